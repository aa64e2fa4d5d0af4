package actors

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/ordo-actors/ordo/persistence"
	"github.com/ordo-actors/ordo/proto/ordopb"
	"google.golang.org/protobuf/proto"
)

// This file holds the host's read-only views for admin tools (the
// dashboard and the entity inspector of package cluster). None of them
// changes what the host runs, and each is a snapshot: the host goes on
// activating and passivating meanwhile.

// ActiveIn returns the entities active on the host in shard, sorted by
// kind then ID; nil when the host does not serve the shard. Entities
// passivating are included until they have stopped. Safe for concurrent
// use.
func (h *Host) ActiveIn(shard uint32) []Ref {
	h.mu.Lock()
	sh, ok := h.shards[shard]
	var refs []Ref
	if ok {
		refs = make([]Ref, 0, len(sh.entities))
		for ref := range sh.entities {
			refs = append(refs, ref)
		}
	}
	h.mu.Unlock()
	sort.Slice(refs, func(i, j int) bool {
		if refs[i].Kind != refs[j].Kind {
			return refs[i].Kind < refs[j].Kind
		}
		return refs[i].ID < refs[j].ID
	})
	return refs
}

// ActivePerShard returns, for every shard the host serves, the number of
// its entities active on the host. Safe for concurrent use.
func (h *Host) ActivePerShard() map[uint32]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[uint32]int, len(h.shards))
	for id, sh := range h.shards {
		out[id] = len(sh.entities)
	}
	return out
}

// IsActive reports whether ref is active on the host (its shard served
// here and the entity activated and not yet stopped). Safe for concurrent
// use.
func (h *Host) IsActive(ref Ref) bool {
	shard := ShardOf(ref, h.cfg.Shards)
	h.mu.Lock()
	defer h.mu.Unlock()
	sh, ok := h.shards[shard]
	if !ok {
		return false
	}
	_, ok = sh.entities[ref]
	return ok
}

// KindNames returns the names of the kinds the host runs, sorted.
func (h *Host) KindNames() []string {
	names := make([]string, 0, len(h.kinds))
	for name := range h.kinds {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// Record is an entity's durable record as LoadRecord reads it.
type Record struct {
	// Ref is the entity.
	Ref Ref
	// Found is false when the entity was never saved; State is then the
	// kind's fresh state and the other fields are zero.
	Found bool
	// Shard and Epoch are the shard and fencing epoch the record was
	// written under.
	Shard uint32
	Epoch int64
	// Seq is the entity's write sequence number (one per write).
	Seq uint64
	// Size is the stored record's size in bytes, StateSize its state's.
	Size, StateSize int
	// Recent is the number of recent requests stored for deduplication.
	Recent int
	// State is the entity's state, decoded as its kind's state message.
	// That of an event-sourced entity is rebuilt as its activation would:
	// its snapshot, then the events after it.
	State proto.Message
	// SnapshotSeq and LastEvent are, for an event-sourced entity, the last
	// event its snapshot covers and the last event of its journal.
	SnapshotSeq, LastEvent uint64
}

// ErrNoState is returned by LoadRecord for a kind whose state is not a
// protobuf message the host can decode (a kind not made by NewKind).
var ErrNoState = errors.New("actors: kind has no decodable state")

// LoadRecord reads ref's durable record from the host's store and decodes
// it with its kind's state message. It is a plain read: it neither fences
// nor activates anything, so the record may be older than the state of an
// active entity (whose latest writes may be in flight), and reading a
// record of a shard another node owns is allowed. A kind the host does not
// run fails with ErrUnknownKind. Safe for concurrent use.
func (h *Host) LoadRecord(ctx context.Context, ref Ref) (Record, error) {
	if err := ref.Validate(); err != nil {
		return Record{}, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	k, ok := h.kinds[ref.Kind]
	if !ok {
		return Record{}, fmt.Errorf("%w: %q", ErrUnknownKind, ref.Kind)
	}
	sb, ok := k.newBehavior().(interface{ stateMessage() proto.Message })
	if !ok {
		return Record{}, fmt.Errorf("%w: %q", ErrNoState, ref.Kind)
	}
	out := Record{Ref: ref, Shard: ShardOf(ref, h.cfg.Shards)}
	rec, err := h.store.Load(ctx, ref.Kind, ref.ID)
	switch {
	case errors.Is(err, persistence.ErrNotFound):
		out.State = sb.stateMessage()
		return out, nil
	case err != nil:
		return Record{}, fmt.Errorf("actors: loading %s: %w", ref, err)
	}
	var stored ordopb.EntityRecord
	if err := proto.Unmarshal(rec.Data, &stored); err != nil {
		return Record{}, fmt.Errorf("actors: decoding the record of %s: %w", ref, err)
	}
	var state proto.Message
	if k.eventSourced() {
		if state, err = h.rebuild(ctx, ref, k, &stored); err != nil {
			return Record{}, fmt.Errorf("actors: rebuilding the state of %s: %w", ref, err)
		}
		out.SnapshotSeq, out.LastEvent = stored.GetSnapshotSeq(), stored.GetLastEvent()
	} else {
		state = sb.stateMessage()
		if err := proto.Unmarshal(stored.GetState(), state); err != nil {
			return Record{}, fmt.Errorf("actors: decoding the state of %s: %w", ref, err)
		}
	}
	out.Found = true
	out.Shard, out.Epoch = rec.Shard, rec.Epoch
	out.Seq = stored.GetSeq()
	out.Size, out.StateSize = len(rec.Data), proto.Size(state)
	out.Recent = len(stored.GetRecent())
	if stored.GetDedupGeneration() != 0 {
		out.Recent = int(stored.GetDedupLen()) // the older ones are in its dedup record
	}
	out.State = state
	return out, nil
}

// stateMessage returns the behavior's state (a fresh one for a behavior
// just made).
func (b *typedBehavior[S]) stateMessage() proto.Message { return b.state }

// Runtime is an active entity's in-memory state as its host holds it: what
// to look at when an entity does not answer (a reply held for a write not
// yet durable, a write the batcher holds back for another entity's).
type Runtime struct {
	Ref Ref `json:"ref"`
	// Shard and Epoch are the ownership the entity runs under.
	Shard uint32 `json:"shard"`
	Epoch int64  `json:"epoch"`
	// Mailbox is the number of calls handed to the entity and not yet
	// taken; Parked the calls waiting for it to finish passivating
	// (Closing).
	Mailbox int64 `json:"mailbox"`
	Parked  int   `json:"parked,omitempty"`
	Closing bool  `json:"closing,omitempty"`
	// Actor is the entity's own view, nil when it did not answer before
	// the context ended (ActorError says so: a handler blocks, or its
	// mailbox is long).
	Actor      *ActorRuntime `json:"actor,omitempty"`
	ActorError string        `json:"actor_error,omitempty"`
	// Writes is what the batcher holds of the entity, nil when it did not
	// answer before the context ended (WritesError).
	Writes      *WritesRuntime `json:"writes,omitempty"`
	WritesError string         `json:"writes_error,omitempty"`
}

// ActorRuntime is an active entity's view of itself.
type ActorRuntime struct {
	Loaded bool `json:"loaded"`
	// Seq is the sequence number of its last write, Durable the highest it
	// knows durable: replies and messages wait while Seq > Durable.
	Seq     uint64 `json:"seq"`
	Durable uint64 `json:"durable"`
	// Held is the number of replies and messages waiting for a write to
	// be durable; HeldFor the write the oldest waits for.
	Held    int    `json:"held,omitempty"`
	HeldFor uint64 `json:"held_for,omitempty"`
	// Outs are its messages not yet answered.
	Outs []OutRuntime `json:"outs,omitempty"`
	// Deferred is the number of requests whose reply is deferred.
	Deferred int `json:"deferred,omitempty"`
	// Behind is the number of runs written behind (Context.WriteBehind)
	// whose changes the next write saves.
	Behind      int  `json:"behind,omitempty"`
	Passivating bool `json:"passivating,omitempty"`
	// Draining: its shard is being released, and it stops once its
	// writes are durable.
	Draining bool `json:"draining,omitempty"`
	Stopping bool `json:"stopping,omitempty"`
}

// OutRuntime is one message of an entity not yet answered.
type OutRuntime struct {
	To        Ref    `json:"to"`
	RequestID string `json:"request_id"`
	// Dep is the sender's write the message was released behind.
	Dep       uint64 `json:"dep"`
	Attempts  int    `json:"attempts"`
	Colocated bool   `json:"colocated,omitempty"`
	// Scheduled: the next attempt waits for its backoff.
	Scheduled bool `json:"scheduled,omitempty"`
}

// WritesRuntime is what the batcher holds of one entity.
type WritesRuntime struct {
	// Durable is the highest sequence number of the entity's writes the
	// batcher made durable (in this activation or an earlier one).
	Durable uint64 `json:"durable"`
	// Sending: a Save carrying a write of the entity is in flight.
	Sending bool `json:"sending,omitempty"`
	// Poisoned is the failure that fails the entity's later writes, if any.
	Poisoned string `json:"poisoned,omitempty"`
	// Queued are its writes not yet sent, in the order they go.
	Queued []QueuedWrite `json:"queued,omitempty"`
}

// QueuedWrite is one write waiting in the batcher (with the older writes
// of the entity it covers).
type QueuedWrite struct {
	Seq    uint64 `json:"seq"`
	Epoch  int64  `json:"epoch"`
	Covers int    `json:"covers"`
	// Expect is the number of co-located receivers' writes it still
	// waits for (up to a short linger), to share their Save.
	Expect int `json:"expect,omitempty"`
	// After are the co-located writes it may not be sent before.
	After []WriteDep `json:"after,omitempty"`
}

// WriteDep is a co-located entity's write another write waits for.
type WriteDep struct {
	Ref     Ref    `json:"ref"`
	Seq     uint64 `json:"seq"`
	Durable uint64 `json:"durable"` // the writer's highest durable write now
	// Queued and Sending say where the writer's own writes are.
	Queued  bool `json:"queued,omitempty"`
	Sending bool `json:"sending,omitempty"`
}

// ErrNotActive is returned by Runtime for an entity not active on the host.
var ErrNotActive = errors.New("actors: entity not active here")

// Runtime describes ref's in-memory state on the host, asking the entity
// and the batcher; a part that does not answer before ctx ends is
// reported as such. ErrNotActive when the entity is not active here. Safe
// for concurrent use.
func (h *Host) Runtime(ctx context.Context, ref Ref) (Runtime, error) {
	shard := ShardOf(ref, h.cfg.Shards)
	h.mu.Lock()
	sh, ok := h.shards[shard]
	var en *entry
	if ok {
		en = sh.entities[ref]
	}
	if en == nil {
		h.mu.Unlock()
		return Runtime{}, fmt.Errorf("%w: %s", ErrNotActive, ref)
	}
	rt := Runtime{Ref: ref, Shard: shard, Epoch: sh.epoch, Mailbox: en.queued.Load(),
		Parked: len(h.parked[en]), Closing: en.closing}
	pid, stopped := en.pid, en.stoppedLocked()
	h.mu.Unlock()

	actorC := make(chan ActorRuntime, 1)
	h.system.Root.Send(pid, &inspectReq{c: actorC})
	writesC := make(chan WritesRuntime, 1)
	if h.batcher.do(batchOp{inspect: &inspectWrites{en: en, c: writesC}}) {
		w := <-writesC // answered under the batcher's lock
		rt.Writes = &w
	} else {
		rt.WritesError = ErrClosed.Error()
	}
	select {
	case a := <-actorC:
		rt.Actor = &a
	case <-stopped:
		rt.ActorError = "the entity stopped"
	case <-ctx.Done():
		rt.ActorError = "the entity did not answer: " + ctx.Err().Error()
	}
	return rt, nil
}

// inspectReq asks an entity for its ActorRuntime.
type inspectReq struct{ c chan<- ActorRuntime }

func (e *entity) runtime() ActorRuntime {
	a := ActorRuntime{Loaded: e.loaded, Seq: e.seq, Durable: e.durable, Held: len(e.held),
		Deferred: len(e.waitIdx), Behind: int(e.behindRuns), Passivating: e.passivating,
		Draining: e.drain != nil, Stopping: e.stopping}
	if len(e.held) > 0 {
		a.HeldFor = e.held[0].dep
	}
	if n, dep := e.en.earlyHeld(); n > 0 {
		a.Held += n
		if a.HeldFor == 0 || dep < a.HeldFor {
			a.HeldFor = dep
		}
	}
	for _, out := range e.outs {
		a.Outs = append(a.Outs, OutRuntime{To: out.to, RequestID: out.env.GetRequestId(), Dep: out.dep,
			Attempts: out.attempts, Colocated: out.msg != nil, Scheduled: out.timer != nil})
	}
	sort.Slice(a.Outs, func(i, j int) bool { return a.Outs[i].RequestID < a.Outs[j].RequestID })
	return a
}

// inspectWrites asks the batcher for an entity's WritesRuntime.
type inspectWrites struct {
	en *entry
	c  chan<- WritesRuntime
}

func (q *queue) inspect(r *inspectWrites) {
	ref := r.en.ref
	w := WritesRuntime{Durable: r.en.durable.Load(), Sending: q.sending[ref]}
	if p, ok := q.poisoned[ref]; ok {
		w.Poisoned = fmt.Sprintf("epoch %d: %v", p.epoch, p.err)
	}
	for p := q.queued[ref]; p != nil; p = p.next {
		qw := QueuedWrite{Seq: p.w.seq, Epoch: p.w.epoch, Covers: len(p.done), Expect: p.expect}
		for _, d := range p.after {
			_, queued := q.queued[d.en.ref]
			qw.After = append(qw.After, WriteDep{Ref: d.en.ref, Seq: d.seq, Durable: d.en.durable.Load(),
				Queued: queued, Sending: q.sending[d.en.ref]})
		}
		w.Queued = append(w.Queued, qw)
	}
	r.c <- w
}
