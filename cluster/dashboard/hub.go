package dashboard

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ordo-actors/ordo/internal/configerr"
)

// Config configures a Hub.
type Config struct {
	// Interval is how often the node's counters are sampled and an
	// attached page is updated. Default 1s.
	Interval time.Duration
	// History is the number of samples kept per node (the sparklines'
	// width). Default 300 (5 minutes at 1s).
	History int
	// Events is the number of timeline events kept. Default 500.
	Events int
	// PeerTimeout bounds reading another node's numbers. Default 1s.
	PeerTimeout time.Duration
	// Client reads the other nodes' admin endpoints; nil makes one (closed
	// when Run returns).
	Client *http.Client
	// Token, when set, is sent as a bearer token ("Authorization: Bearer
	// <token>") with every read of another node's admin endpoint: the
	// nodes of a cluster share one admin token. Default "": none.
	Token string
	// Logger receives the hub's few logs. Default slog.Default().
	Logger *slog.Logger
}

// ErrInvalidConfig is wrapped by every error of Config.Validate.
var ErrInvalidConfig = errors.New("dashboard: invalid config")

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{Interval: time.Second, History: 300, Events: 500, PeerTimeout: time.Second}
}

// Validate reports the first invalid setting; the error wraps
// ErrInvalidConfig.
func (c *Config) Validate() error {
	if err := c.validate(); err != nil {
		return invalidConfig(err)
	}
	return nil
}

// Validate reports the first invalid setting.
func (c *Config) validate() error {
	switch {
	case c.Interval <= 0:
		return errors.New("dashboard: Interval must be positive")
	case c.History < 2:
		return errors.New("dashboard: History must be at least 2")
	case c.Events < 1:
		return errors.New("dashboard: Events must be at least 1")
	case c.PeerTimeout <= 0:
		return errors.New("dashboard: PeerTimeout must be positive")
	}
	return nil
}

// Hub samples one node, keeps what the page shows, and serves it
// (Handler). Lifecycle: New, then Run until its context ends; Handler
// serves before, during and after Run (without Run, nothing is sampled
// and the page shows what the node's views say now). Safe for concurrent
// use.
//
// Lock order: aggMu before mu.
type Hub struct {
	src       Source
	cfg       Config
	log       *slog.Logger
	client    *http.Client
	ownClient bool
	boot      int64 // identifies this incarnation to peers

	watchers atomic.Int32  // attached pages
	attach   chan struct{} // (cap 1) a page attached: aggregate at once
	dirty    atomic.Bool   // something changed since the last frame
	done     chan struct{} // closed when Run returns
	running  atomic.Bool

	aggMu sync.Mutex // serialises aggregate

	mu       sync.Mutex
	self     *nodeData
	nodes    map[string]*nodeData // by node ID, self included
	known    map[string]*known
	events   *ring[Event] // this node's Local events, for peers
	timeline *ring[Event] // this node's events and its peers' Local ones
	ttls     map[int64]float64
	members  []Member
	shards   []ShardCell
	prefix   string
	frameAt  time.Time
	subs     map[*subscriber]struct{}
}

// nodeData is what the hub holds of one node.
type nodeData struct {
	id      string
	boot    int64
	gen     uint64 // bumped when samples are reset (the node restarted)
	samples *ring[Sample]
	// peerSeq and peerEvents are the newest sample and event numbers read
	// from the peer.
	peerSeq, peerEvents uint64
	report              NodeReport
	reachable           bool
	err                 string
}

// known is what the hub remembers of a member, to show it once it is
// gone from etcd and gossip.
type known struct {
	remote, gossip, admin string
	kinds                 []string
	seen                  time.Time
}

// forgetAfter is how long a member gone from etcd and gossip stays on the
// page (as down).
const forgetAfter = 10 * time.Minute

// New returns a hub reading src.
func New(src Source, cfg Config) (*Hub, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	h := &Hub{
		src: src, cfg: cfg, log: cfg.Logger, client: cfg.Client,
		boot:     time.Now().UnixNano(),
		attach:   make(chan struct{}, 1),
		done:     make(chan struct{}),
		nodes:    map[string]*nodeData{},
		known:    map[string]*known{},
		events:   newRing[Event](cfg.Events),
		timeline: newRing[Event](cfg.Events),
		ttls:     map[int64]float64{},
		subs:     map[*subscriber]struct{}{},
	}
	if h.log == nil {
		h.log = slog.Default()
	}
	if h.client == nil {
		h.client = &http.Client{Transport: &http.Transport{
			MaxIdleConnsPerHost: 2, IdleConnTimeout: 30 * time.Second, DisableCompression: true}}
		h.ownClient = true
	}
	return h, nil
}

// Run samples the node and, while pages are attached, aggregates the
// cluster, until ctx ends. Call it once.
func (h *Hub) Run(ctx context.Context) {
	if !h.running.CompareAndSwap(false, true) {
		return
	}
	defer close(h.done)
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() {
		defer wg.Done()
		h.aggregateLoop(ctx)
	}()
	if h.ownClient {
		defer h.client.CloseIdleConnections()
	}

	local := h.src.Local()
	obs := newObserver(local.ID)
	h.mu.Lock()
	h.self = h.nodeLocked(local.ID)
	h.mu.Unlock()
	changed, unsubscribe := h.src.Subscribe()
	defer unsubscribe()

	// The gossip and lease views are looked at four times per interval,
	// the counters once.
	tick := time.NewTicker(h.cfg.Interval / 4)
	defer tick.Stop()
	now := time.Now()
	h.observe(obs, local, now)
	prev, prevAt := h.src.Counters(), now
	obs.counters(prev, now)
	h.mu.Lock()
	h.self.report = h.reportLocked(local, Detail{}, prev)
	h.mu.Unlock()
	// A change of the routing table is looked at at once, but not more
	// often than every minObserve: the table also notifies changes of keys
	// under its prefix that are not placement's (entity records, when the
	// etcd store shares the prefix).
	const minObserve = 100 * time.Millisecond
	observed := now
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-changed:
			if t := time.Now(); t.Sub(observed) >= minObserve {
				h.observe(obs, h.src.Local(), t)
				observed = t
			}
			n--
			continue
		case now = <-tick.C:
		}
		h.observe(obs, h.src.Local(), now)
		observed = now
		if n%4 != 0 {
			continue
		}
		cur := h.src.Counters()
		s := derive(prev, cur, now.Sub(prevAt))
		s.T = now.UnixMilli()
		prev, prevAt = cur, now
		h.record(obs.counters(cur, now))
		h.mu.Lock()
		s.Seq = h.self.samples.seq + 1
		h.self.samples.add(s)
		detail := Detail{NotReady: h.self.report.NotReady, ActivePerShard: h.self.report.ActivePerShard} // kept from the last aggregate
		h.self.report = h.reportLocked(h.src.Local(), detail, cur)
		h.mu.Unlock()
	}
}

// observe looks at the node's views: it records the events they show and
// remembers the members they name.
func (h *Hub) observe(obs *observer, local Local, now time.Time) {
	view := h.src.View()
	h.record(obs.view(view, now))
	h.record(obs.local(local, now))
	if obs.takeChanged() {
		h.dirty.Store(true)
	}
	h.mu.Lock()
	h.rememberLocked(local, view, now)
	h.mu.Unlock()
}

// nodeLocked returns the hub's data of node id, made if needed. h.mu is
// held.
func (h *Hub) nodeLocked(id string) *nodeData {
	nd, ok := h.nodes[id]
	if !ok {
		nd = &nodeData{id: id, samples: newRing[Sample](h.cfg.History)}
		h.nodes[id] = nd
	}
	return nd
}

// record adds events to the timeline (and the Local ones to what peers
// read).
func (h *Hub) record(evs []Event) {
	if len(evs) == 0 {
		return
	}
	h.mu.Lock()
	for _, ev := range evs {
		h.timeline.add(ev)
		if ev.Local {
			h.events.add(ev)
		}
	}
	h.mu.Unlock()
	h.dirty.Store(true)
}

// aggregateLoop keeps the page's view current while pages are attached:
// every Interval in full (the other nodes' numbers, lease TTLs), and up to
// four times more often from the node's own views when something changed.
func (h *Hub) aggregateLoop(ctx context.Context) {
	tick := time.NewTicker(h.cfg.Interval / 4)
	defer tick.Stop()
	for {
		if h.watchers.Load() == 0 {
			select {
			case <-ctx.Done():
				return
			case <-h.attach:
			}
		}
		h.aggregate(ctx, true)
		for n := 1; h.watchers.Load() > 0; n++ {
			select {
			case <-ctx.Done():
				return
			case <-h.attach:
				h.aggregate(ctx, true)
				n = 0
				continue
			case <-tick.C:
			}
			switch {
			case n%4 == 0:
				h.aggregate(ctx, true)
			case h.dirty.Load():
				h.aggregate(ctx, false)
			}
		}
	}
}

// aggregate rebuilds the page's view from the node's views and, when
// full, from the other nodes' admin endpoints and etcd's lease TTLs; then
// it wakes the attached pages.
func (h *Hub) aggregate(ctx context.Context, full bool) {
	h.aggMu.Lock()
	defer h.aggMu.Unlock()
	h.dirty.Store(false)
	local, detail, view, now := h.src.Local(), h.src.Detail(), h.src.View(), time.Now()

	h.mu.Lock()
	h.rememberLocked(local, view, now)
	type target struct {
		id, admin string
		since     uint64
		events    uint64
		boot      int64
	}
	var peers []target
	leases := map[int64]bool{}
	if full {
		// Read the registered nodes (etcd is the root of trust: an address
		// only gossiped is not read) that gossip does not show dead.
		gossip := map[string]string{}
		for _, g := range view.Gossip {
			gossip[g.ID] = g.State
		}
		registered := map[string]bool{}
		for _, r := range view.Nodes {
			leases[r.Lease] = true
			registered[r.ID] = true
		}
		for id, k := range h.known {
			if id == local.ID || k.admin == "" || !registered[id] || gossip[id] == GossipDead {
				if nd, ok := h.nodes[id]; ok && id != local.ID {
					nd.reachable, nd.err = false, "not read: not registered, or dead in gossip"
				}
				continue
			}
			nd := h.nodeLocked(id)
			peers = append(peers, target{id: id, admin: k.admin, since: nd.peerSeq, events: nd.peerEvents, boot: nd.boot})
		}
	}
	h.mu.Unlock()

	type result struct {
		id  string
		rep NodeReport
		err error
	}
	results := make(chan result, len(peers))
	ttls := make(chan [2]int64, len(leases))
	if full {
		fctx, cancel := context.WithTimeout(ctx, h.cfg.PeerTimeout)
		var wg sync.WaitGroup
		for _, p := range peers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rep, err := h.fetchReport(fctx, p.admin, p.since, p.events)
				if err == nil && rep.Boot != p.boot && p.since > 0 {
					// The peer restarted: read its history again.
					rep, err = h.fetchReport(fctx, p.admin, 0, 0)
				}
				if err == nil && rep.Node != p.id {
					err = errors.New("answered as " + rep.Node)
				}
				results <- result{p.id, rep, err}
			}()
		}
		for l := range leases {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if ttl, err := h.src.LeaseTTL(fctx, l); err == nil {
					ttls <- [2]int64{l, int64(ttl)}
				}
			}()
		}
		wg.Wait()
		cancel()
	}
	close(results)
	close(ttls)

	h.mu.Lock()
	defer h.mu.Unlock()
	if full {
		h.ttls = map[int64]float64{}
		for t := range ttls {
			h.ttls[t[0]] = round3(time.Duration(t[1]).Seconds())
		}
	}
	for r := range results {
		nd := h.nodeLocked(r.id)
		if r.err != nil {
			nd.reachable, nd.err = false, r.err.Error()
			continue
		}
		nd.reachable, nd.err = true, ""
		if r.rep.Boot != nd.boot {
			nd.boot = r.rep.Boot
			nd.gen++
			nd.samples.reset()
			nd.peerSeq, nd.peerEvents = 0, 0
		}
		for _, s := range r.rep.Samples {
			if s.Seq > nd.peerSeq {
				nd.samples.add(s)
				nd.peerSeq = s.Seq
			}
		}
		for _, ev := range r.rep.Events {
			h.timeline.add(ev)
		}
		nd.peerEvents = max(nd.peerEvents, r.rep.EventSeq)
		rep := r.rep
		rep.Samples, rep.Events = nil, nil
		nd.report = rep
	}
	if h.self != nil {
		h.self.reachable = true
		h.self.report.NotReady, h.self.report.ActivePerShard = detail.NotReady, detail.ActivePerShard
	}
	h.prefix = local.Prefix
	h.members = h.membersLocked(local, detail, view, now)
	h.shards = shardCells(int(local.Shards), view.Owners)
	h.frameAt = now
	for s := range h.subs {
		s.wake()
	}
}

// rememberLocked notes what the views say of each member. h.mu is held.
func (h *Hub) rememberLocked(local Local, view View, now time.Time) {
	get := func(id string) *known {
		k, ok := h.known[id]
		if !ok {
			k = &known{}
			h.known[id] = k
		}
		return k
	}
	if local.ID != "" && local.Up {
		k := get(local.ID)
		k.admin, k.kinds, k.seen = local.AdminAddr, local.Kinds, now
	}
	for _, r := range view.Nodes {
		k := get(r.ID)
		k.remote, k.gossip, k.kinds, k.seen = r.RemoteAddr, r.GossipAddr, r.Kinds, now
	}
	for _, g := range view.Gossip {
		k := get(g.ID)
		if g.AdminAddr != "" && g.ID != local.ID {
			k.admin = g.AdminAddr
		}
		if g.State != GossipDead {
			k.seen = now
		}
	}
	for id, k := range h.known {
		if now.Sub(k.seen) > forgetAfter {
			delete(h.known, id)
			if id != local.ID {
				delete(h.nodes, id)
			}
		}
	}
}

// Member states.
const (
	StateAlive        = "alive"         // registered, alive in gossip, lease valid
	StateSuspect      = "suspect"       // gossip suspects it
	StateLeaseInvalid = "lease-invalid" // alive, but its lease is not valid (expired, lost, not registered)
	StateDead         = "dead"          // gossip declared it dead; its registration has not ended yet
	StateDown         = "down"          // neither registered nor alive: crashed, or left
	StateUnknown      = "unknown"       // registered, not (yet) seen by gossip
	StateStarting     = "starting"      // this node, not started or stopped
)

// Member is one node as the page shows it.
type Member struct {
	ID    string `json:"id"`
	State string `json:"state"`
	// Gossip is the gossip state ("" when gossip does not know the node).
	Gossip     string `json:"gossip,omitempty"`
	Registered bool   `json:"registered"`
	RemoteAddr string `json:"remote_addr,omitempty"`
	GossipAddr string `json:"gossip_addr,omitempty"`
	AdminAddr  string `json:"admin_addr,omitempty"`
	// Lease is the registration's lease, in hexadecimal as etcdctl shows
	// it (a JSON number would lose digits in JavaScript); LeaseTTL its
	// remaining time to
	// live in etcd, in seconds (absent when unknown, negative when ended).
	Lease    string   `json:"lease,omitempty"`
	LeaseTTL *float64 `json:"lease_ttl,omitempty"`
	// LeaseValid and Deadline (Unix ms) are what the node itself reports
	// of its lease, when it could be read.
	LeaseValid *bool  `json:"lease_valid,omitempty"`
	Deadline   int64  `json:"deadline,omitempty"`
	NotReady   string `json:"not_ready,omitempty"`
	// Shards is the number of shards the routing table shows it owning.
	Shards int `json:"shards"`
	// Active is its number of active entities, when known.
	Active    int      `json:"active"`
	Kinds     []string `json:"kinds,omitempty"`
	Self      bool     `json:"self,omitempty"`
	Reachable bool     `json:"reachable"`
	Error     string   `json:"error,omitempty"`
}

// ShardCell is one shard as the page shows it: its owner ("" when free)
// and epoch.
type ShardCell struct {
	Owner string `json:"o,omitempty"`
	Epoch int64  `json:"e,omitempty"`
}

func shardCells(n int, owners map[uint32]Owner) []ShardCell {
	cells := make([]ShardCell, n)
	for s, o := range owners {
		if int(s) < n {
			cells[s] = ShardCell{Owner: o.Node, Epoch: o.Epoch}
		}
	}
	return cells
}

// membersLocked builds the member list. h.mu is held.
func (h *Hub) membersLocked(local Local, detail Detail, view View, now time.Time) []Member {
	regs := map[string]Registration{}
	for _, r := range view.Nodes {
		regs[r.ID] = r
	}
	gossip := map[string]string{}
	for _, g := range view.Gossip {
		gossip[g.ID] = g.State
	}
	owned := map[string]int{}
	for _, o := range view.Owners {
		owned[o.Node]++
	}
	ids := map[string]bool{}
	for id := range h.known {
		ids[id] = true
	}
	if local.ID != "" {
		ids[local.ID] = true
	}
	var out []Member
	for id := range ids {
		m := Member{ID: id, Gossip: gossip[id], Shards: owned[id], Self: id == local.ID}
		if k := h.known[id]; k != nil {
			m.RemoteAddr, m.GossipAddr, m.AdminAddr, m.Kinds = k.remote, k.gossip, k.admin, k.kinds
		}
		r, registered := regs[id]
		if registered {
			m.Registered, m.Lease = true, strconv.FormatInt(r.Lease, 16)
			if ttl, ok := h.ttls[r.Lease]; ok {
				m.LeaseTTL = &ttl
			}
		}
		var rep *NodeReport
		if nd := h.nodes[id]; nd != nil {
			m.Reachable, m.Error = nd.reachable, nd.err
			if nd.reachable && nd.report.Node == id {
				rep = &nd.report
			}
		}
		if m.Self {
			m.Reachable, m.Error = true, ""
			m.Gossip = GossipAlive
			m.AdminAddr, m.Kinds = local.AdminAddr, local.Kinds
			valid := local.LeaseValid
			m.LeaseValid, m.NotReady = &valid, detail.NotReady
			if !local.Deadline.IsZero() {
				m.Deadline = local.Deadline.UnixMilli()
			}
			for _, n := range detail.ActivePerShard {
				m.Active += n
			}
		} else if rep != nil {
			valid := rep.LeaseValid
			m.LeaseValid, m.Deadline, m.NotReady, m.Active = &valid, rep.Deadline, rep.NotReady, rep.Active
		}
		m.State = memberState(m, local)
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func memberState(m Member, local Local) string {
	switch {
	case m.Self && !local.Up:
		return StateStarting
	case m.Self && !local.LeaseValid:
		return StateLeaseInvalid
	case m.Self:
		return StateAlive
	case m.Gossip == GossipDead && m.Registered:
		return StateDead
	case m.Gossip == GossipDead, !m.Registered && m.Gossip == "":
		return StateDown
	case !m.Registered:
		return StateLeaseInvalid
	case m.LeaseTTL != nil && *m.LeaseTTL < 0:
		return StateLeaseInvalid
	case m.LeaseValid != nil && !*m.LeaseValid:
		return StateLeaseInvalid
	case m.Gossip == GossipSuspect:
		return StateSuspect
	case m.Gossip == GossipAlive:
		return StateAlive
	}
	return StateUnknown
}

// reportLocked builds this node's report (without samples and events).
// h.mu is held.
func (h *Hub) reportLocked(local Local, d Detail, c Counters) NodeReport {
	rep := NodeReport{Node: local.ID, Boot: h.boot, Time: time.Now().UnixMilli(), Up: local.Up,
		NotReady: d.NotReady, Lease: local.Lease, LeaseValid: local.LeaseValid,
		Totals: totals(c), Active: c.Active, ActivePerShard: d.ActivePerShard, Kinds: local.Kinds}
	if !local.Deadline.IsZero() {
		rep.Deadline = local.Deadline.UnixMilli()
	}
	return rep
}

// NodeReport is what a node tells its peers' hubs (GET
// /dashboard/api/node).
type NodeReport struct {
	Node           string         `json:"node"`
	Boot           int64          `json:"boot"`
	Time           int64          `json:"t"`
	Up             bool           `json:"up"`
	NotReady       string         `json:"not_ready,omitempty"`
	Lease          int64          `json:"lease"`
	LeaseValid     bool           `json:"lease_valid"`
	Deadline       int64          `json:"deadline,omitempty"`
	Totals         Totals         `json:"totals"`
	Active         int            `json:"active"`
	ActivePerShard map[uint32]int `json:"active_per_shard,omitempty"`
	Kinds          []string       `json:"kinds,omitempty"`
	// Samples are those numbered after the request's since; Events the
	// node's Local events numbered after its events, EventSeq the number
	// of its newest.
	Samples  []Sample `json:"samples,omitempty"`
	Events   []Event  `json:"events,omitempty"`
	EventSeq uint64   `json:"event_seq"`
}

// invalidConfig makes a Validate error: err, also matching ErrInvalidConfig.
func invalidConfig(err error) error { return configerr.Wrap(ErrInvalidConfig, err) }
