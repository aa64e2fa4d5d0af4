package dashboard

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Event types.
const (
	EventJoin       = "join"        // a member joined gossip
	EventSuspect    = "suspect"     // gossip suspects a member
	EventAlive      = "alive"       // a suspect or dead member is alive again
	EventDead       = "dead"        // gossip declared a member dead (or it left)
	EventRegister   = "register"    // a node registered in etcd
	EventReregister = "reregister"  // a node registered again under a new lease
	EventUnregister = "unregister"  // a registration ended (lease expired, revoked or released)
	EventMoves      = "moves"       // shards changed owner or epoch
	EventLeaseLost  = "lease-lost"  // the observer's lease stopped being valid
	EventLeaseValid = "lease-valid" // the observer's lease is valid again
	EventNewLease   = "new-lease"   // the observer opened a new session
	EventFenced     = "fenced"      // storage rejected the observer's writes by fencing
	EventFailed     = "failed"      // the observer's writes failed with an unknown outcome
	EventHandoff    = "handoff"     // the observer released shards gracefully
	EventRevoke     = "revoke"      // the observer revoked a dead node's lease
)

// Event is one entry of the cluster timeline.
type Event struct {
	// T is when it was observed (Unix milliseconds).
	T int64 `json:"t"`
	// Node is the node that observed it.
	Node string `json:"node"`
	// Type is one of the Event* constants.
	Type string `json:"type"`
	// Subject is the node the event is about, when it is one.
	Subject string `json:"subject,omitempty"`
	// Text says what happened, in a line.
	Text string `json:"text"`
	// Moves lists the shard moves of an EventMoves.
	Moves []Move `json:"moves,omitempty"`
	// Local marks events about the observer itself (its lease, its
	// writes): the page shows every node's; of the others (what a node
	// sees of the cluster), the page shows those of the node serving it.
	Local bool `json:"local,omitempty"`
}

// Move is one shard changing hands: From at FromEpoch ("" when the
// observer had not seen an owner) to To at ToEpoch.
type Move struct {
	Shard     uint32 `json:"shard"`
	From      string `json:"from,omitempty"`
	FromEpoch int64  `json:"from_epoch,omitempty"`
	To        string `json:"to"`
	ToEpoch   int64  `json:"to_epoch"`
}

// observer turns successive views of the cluster and of the node into
// events. It is used by one goroutine at a time (Hub.Run's).
type observer struct {
	self    string
	started bool
	gossip  map[string]string       // ID → gossip state
	regs    map[string]Registration // ID → registration
	held    map[uint32]Owner        // last owner seen per shard, kept when freed
	owners  int                     // shards owned in the last view
	changed bool                    // the views differed since the last takeChanged
	lease   int64
	valid   bool
	counts  Counters
	counted bool

	// Moves are reported once they stop coming (moveQuiet), or at the
	// latest moveMax after the first, so that a failover or a join, which
	// moves shards one lock at a time, makes one event per pair of nodes.
	pending     map[[2]string][]Move
	pendingFrom time.Time
	lastMove    time.Time
}

const (
	moveQuiet = 500 * time.Millisecond
	moveMax   = 3 * time.Second
)

func newObserver(self string) *observer {
	return &observer{self: self, gossip: map[string]string{}, regs: map[string]Registration{},
		held: map[uint32]Owner{}, pending: map[[2]string][]Move{}}
}

// view compares v with the previous view. The first view is the
// baseline: it yields no events.
func (o *observer) view(v View, now time.Time) []Event {
	var evs []Event
	ev := func(typ, subject, format string, args ...any) {
		evs = append(evs, Event{T: now.UnixMilli(), Node: o.self, Type: typ, Subject: subject, Text: fmt.Sprintf(format, args...)})
	}
	baseline := !o.started
	o.started = true

	// Gossip.
	seen := map[string]bool{}
	for _, m := range v.Gossip {
		if m.ID == o.self {
			continue
		}
		seen[m.ID] = true
		prev, had := o.gossip[m.ID]
		o.gossip[m.ID] = m.State
		if baseline || prev == m.State {
			continue
		}
		o.changed = true
		switch {
		case m.State == GossipAlive && !had:
			ev(EventJoin, m.ID, "%s joined gossip", m.ID)
		case m.State == GossipAlive:
			ev(EventAlive, m.ID, "%s is alive again (was %s)", m.ID, prev)
		case m.State == GossipSuspect:
			ev(EventSuspect, m.ID, "%s is suspected by gossip", m.ID)
		case m.State == GossipDead:
			ev(EventDead, m.ID, "%s declared dead by gossip, or left", m.ID)
		}
	}
	for id := range o.gossip {
		if !seen[id] {
			delete(o.gossip, id)
			o.changed = true
		}
	}

	// Registrations.
	regs := make(map[string]Registration, len(v.Nodes))
	for _, r := range v.Nodes {
		regs[r.ID] = r
		prev, had := o.regs[r.ID]
		o.changed = o.changed || !had || prev.Lease != r.Lease
		switch {
		case baseline:
		case !had:
			ev(EventRegister, r.ID, "%s registered in etcd under lease %x", r.ID, r.Lease)
		case prev.Lease != r.Lease:
			ev(EventReregister, r.ID, "%s registered again under lease %x: lease %x ended", r.ID, r.Lease, prev.Lease)
		}
	}
	if !baseline {
		for id, prev := range o.regs {
			if _, ok := regs[id]; !ok {
				o.changed = true
				ev(EventUnregister, id, "%s's registration ended with lease %x (expired, revoked or released)", id, prev.Lease)
			}
		}
	}
	o.regs = regs

	// Shard owners: a shard that got an owner, or a new epoch, moved from
	// the last owner seen.
	for s, cur := range v.Owners {
		prev, had := o.held[s]
		o.held[s] = cur
		if baseline || (had && prev == cur) {
			continue
		}
		o.changed = true
		if len(o.pending) == 0 {
			o.pendingFrom = now
		}
		o.lastMove = now
		p := [2]string{prev.Node, cur.Node}
		o.pending[p] = append(o.pending[p], Move{Shard: s, From: prev.Node, FromEpoch: prev.Epoch, To: cur.Node, ToEpoch: cur.Epoch})
	}
	if len(v.Owners) != o.owners {
		o.changed = true // a shard was freed (or taken)
		o.owners = len(v.Owners)
	}
	if len(o.pending) > 0 && (now.Sub(o.lastMove) >= moveQuiet || now.Sub(o.pendingFrom) >= moveMax) {
		evs = append(evs, o.flushMoves()...)
	}
	return evs
}

// takeChanged reports whether the views differed (gossip states,
// registrations, shard owners) since it was last called.
func (o *observer) takeChanged() bool {
	c := o.changed
	o.changed = false
	return c
}

// flushMoves reports the pending moves: one event per pair of nodes.
func (o *observer) flushMoves() []Event {
	pairs := make([][2]string, 0, len(o.pending))
	for p := range o.pending {
		pairs = append(pairs, p)
	}
	sort.Slice(pairs, func(i, j int) bool {
		if pairs[i][0] != pairs[j][0] {
			return pairs[i][0] < pairs[j][0]
		}
		return pairs[i][1] < pairs[j][1]
	})
	var evs []Event
	for _, p := range pairs {
		moves := o.pending[p]
		sort.Slice(moves, func(i, j int) bool { return moves[i].Shard < moves[j].Shard })
		evs = append(evs, Event{T: o.pendingFrom.UnixMilli(), Node: o.self, Type: EventMoves, Subject: p[1],
			Text: movesText(moves), Moves: moves})
	}
	clear(o.pending)
	return evs
}

func movesText(moves []Move) string {
	if len(moves) == 1 {
		m := moves[0]
		if m.From == "" {
			return fmt.Sprintf("shard %d → %s (epoch %d)", m.Shard, m.To, m.ToEpoch)
		}
		return fmt.Sprintf("shard %d %s (epoch %d) → %s (epoch %d)", m.Shard, m.From, m.FromEpoch, m.To, m.ToEpoch)
	}
	var b strings.Builder
	if from, to := moves[0].From, moves[0].To; from == "" {
		fmt.Fprintf(&b, "%d free shards → %s", len(moves), to)
	} else {
		fmt.Fprintf(&b, "%d shards %s → %s", len(moves), from, to)
	}
	lo, hi := moves[0].ToEpoch, moves[0].ToEpoch
	for _, m := range moves {
		lo, hi = min(lo, m.ToEpoch), max(hi, m.ToEpoch)
	}
	if lo == hi {
		fmt.Fprintf(&b, " (epoch %d)", lo)
	} else {
		fmt.Fprintf(&b, " (epochs %d–%d)", lo, hi)
	}
	return b.String()
}

// local compares the node's own state with the previous one.
func (o *observer) local(l Local, now time.Time) []Event {
	var evs []Event
	ev := func(typ, format string, args ...any) {
		evs = append(evs, Event{T: now.UnixMilli(), Node: o.self, Type: typ, Subject: o.self, Local: true,
			Text: fmt.Sprintf(format, args...)})
	}
	if !l.Up {
		return nil
	}
	if o.lease != 0 && l.Lease != 0 && l.Lease != o.lease {
		ev(EventNewLease, "%s opened a new session under lease %x (lease %x was lost)", o.self, l.Lease, o.lease)
	}
	if o.lease != 0 || o.valid {
		switch {
		case o.valid && !l.LeaseValid:
			ev(EventLeaseLost, "%s's lease is not valid: it stops serving every shard", o.self)
		case !o.valid && l.LeaseValid:
			ev(EventLeaseValid, "%s's lease is valid again", o.self)
		}
	}
	if l.Lease != 0 {
		o.lease = l.Lease
	}
	o.valid = l.LeaseValid
	return evs
}

// counters compares the node's counters with the previous reading.
func (o *observer) counters(c Counters, now time.Time) []Event {
	prev, had := o.counts, o.counted
	o.counts, o.counted = c, true
	if !had {
		return nil
	}
	var evs []Event
	ev := func(typ, format string, args ...any) {
		evs = append(evs, Event{T: now.UnixMilli(), Node: o.self, Type: typ, Subject: o.self, Local: true,
			Text: fmt.Sprintf(format, args...)})
	}
	if d := delta(prev.Fenced, c.Fenced); d > 0 {
		ev(EventFenced, "storage rejected %d of %s's writes: their epoch was stale (fenced)", d, o.self)
	}
	if d := delta(prev.Failed, c.Failed); d > 0 {
		ev(EventFailed, "%d of %s's writes failed with an unknown outcome", d, o.self)
	}
	if d := delta(prev.Handoffs, c.Handoffs); d > 0 {
		ev(EventHandoff, "%s handed off %d %s", o.self, d, plural(d, "shard", "shards"))
	}
	if d := delta(prev.Failovers, c.Failovers); d > 0 {
		ev(EventRevoke, "%s revoked the lease of %d dead %s (accelerated failover)", o.self, d, plural(d, "node", "nodes"))
	}
	return evs
}

func plural(n uint64, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
