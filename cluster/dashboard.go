package cluster

import (
	"context"
	"net"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/cluster/dashboard"
	"github.com/ordo-actors/ordo/placement"
	dto "github.com/prometheus/client_model/go"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// dashboard returns the node's dashboard hub (package dashboard), made on
// first use: the admin handler serves it before Start, and Start runs it.
func (n *Node) dashboard() *dashboard.Hub {
	n.dashOnce.Do(func() {
		cfg := dashboard.DefaultConfig()
		cfg.Logger = n.log
		// The cluster's nodes share one admin token; it goes only to the
		// admin addresses of members that match their registration
		// (View).
		cfg.Token = n.cfg.AdminToken
		hub, err := dashboard.New(dashSource{n}, cfg)
		if err != nil {
			panic("cluster: the dashboard's default config is invalid: " + err.Error()) // a programming error
		}
		n.dash = hub
	})
	return n.dash
}

// runDashboard samples the node for the dashboard until ctx ends.
func (n *Node) runDashboard(ctx context.Context) {
	defer n.wg.Done()
	n.dashboard().Run(ctx)
}

// adminAdvert is the admin endpoint's address as gossiped, so that the
// other nodes' dashboards can read this node's numbers ("" without an
// admin endpoint). An address bound to every interface is advertised with
// the host of the remote address.
func (n *Node) adminAdvert() string {
	if n.adminLn == nil {
		return ""
	}
	host, port, err := net.SplitHostPort(n.adminLn.Addr().String())
	if err != nil {
		return ""
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		if rh, _, err := net.SplitHostPort(n.tr.addr); err == nil {
			host = rh
		}
	}
	return net.JoinHostPort(host, port)
}

type gossipState struct {
	id, admin string
	alive     bool
}

// gossipStates lists this node and every member whose metadata names it
// (by its memberlist name), alive or declared dead. Only a member that
// matches its registration among nodes has its admin address listed: the
// dashboard reads the others' admin endpoints with the admin token, which
// must not go to an address a gossip member merely claims.
func (m *membership) gossipStates(self string, nodes []placement.NodeInfo) []gossipState {
	registered := make(map[string]placement.NodeInfo, len(nodes))
	for _, info := range nodes {
		registered[info.ID] = info
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := []gossipState{{id: self, admin: m.meta.Admin, alive: true}}
	for name, mem := range m.members {
		if name == self || !mem.metaOK || mem.meta.ID != name {
			continue
		}
		st := gossipState{id: name, alive: mem.alive}
		if info, ok := registered[name]; ok && identityMismatch(name, mem, info, true) == "" {
			st.admin = mem.meta.Admin
		}
		out = append(out, st)
	}
	return out
}

// suspects returns the members gossip suspects.
func (m *membership) suspects() map[string]bool {
	out := map[string]bool{}
	for _, node := range m.ml.Members() {
		if node.State == memberlist.StateSuspect {
			out[node.Name] = true
		}
	}
	return out
}

// dashSource is the dashboard's view of a Node.
type dashSource struct{ n *Node }

var _ dashboard.Source = dashSource{}

// running reports whether the node's parts may be read: Start has
// returned (which publishes them) and the node has not stopped.
func (s dashSource) running() bool { return s.n.up.Load() && !s.n.stopped.Load() }

func (s dashSource) Local() dashboard.Local {
	n := s.n
	l := dashboard.Local{ID: n.cfg.NodeID, Prefix: n.cfg.Placement.Prefix, Shards: n.cfg.Placement.Shards}
	for _, k := range n.kinds {
		l.Kinds = append(l.Kinds, k.Name())
	}
	if !s.running() {
		return l
	}
	l.Up = true
	l.Lease, l.LeaseValid, l.Deadline = int64(n.place.Lease()), n.place.Valid(), n.place.Deadline()
	l.AdminAddr = n.members.adminAddr()
	return l
}

func (s dashSource) Detail() dashboard.Detail {
	var d dashboard.Detail
	if err := s.n.Readiness(); err != nil {
		d.NotReady = reason(err)
	}
	if s.running() {
		d.ActivePerShard = s.n.host.ActivePerShard()
	}
	return d
}

// adminAddr returns the admin address the node gossips.
func (m *membership) adminAddr() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.meta.Admin
}

func (s dashSource) Counters() dashboard.Counters {
	n := s.n
	var c dashboard.Counters
	if s.running() {
		hs := n.host.Stats()
		c.Saves, c.Writes, c.Fenced, c.Failed = hs.Batch.Saves, hs.Batch.Writes, hs.Batch.Fenced, hs.Batch.Failed
		c.Activations, c.Passivations, c.Active = hs.Activations, hs.Passivations, hs.Active
	}
	mfs, err := n.metrics.reg.Gather()
	if err != nil {
		n.log.Debug("dashboard: gathering metrics", "err", err)
	}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "ordo_calls_total":
			c.Calls = byKindOutcome(mf)
		case "ordo_served_total":
			c.Served = byKindOutcome(mf)
		case "ordo_call_duration_seconds":
			c.Latency = map[string]dashboard.Histogram{}
			for _, m := range mf.GetMetric() {
				h := m.GetHistogram()
				var hist dashboard.Histogram
				for _, b := range h.GetBucket() {
					hist.Bounds = append(hist.Bounds, b.GetUpperBound())
					hist.Counts = append(hist.Counts, b.GetCumulativeCount())
				}
				hist.Count = h.GetSampleCount()
				c.Latency[label(m, "kind")] = hist
			}
		case "ordo_call_retries_total":
			c.Retries = counterValue(mf)
		case "ordo_handoffs_total":
			c.Handoffs = counterValue(mf)
		case "ordo_failover_revocations_total":
			c.Failovers = counterValue(mf)
		}
	}
	return c
}

func byKindOutcome(mf *dto.MetricFamily) map[string]map[string]uint64 {
	out := map[string]map[string]uint64{}
	for _, m := range mf.GetMetric() {
		kind := label(m, "kind")
		if out[kind] == nil {
			out[kind] = map[string]uint64{}
		}
		out[kind][label(m, "outcome")] = uint64(m.GetCounter().GetValue())
	}
	return out
}

func counterValue(mf *dto.MetricFamily) uint64 {
	var v float64
	for _, m := range mf.GetMetric() {
		v += m.GetCounter().GetValue()
	}
	return uint64(v)
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func (s dashSource) View() dashboard.View {
	var v dashboard.View
	if !s.running() {
		return v
	}
	n := s.n
	table := n.place.Table()
	for _, info := range table.Nodes() {
		v.Nodes = append(v.Nodes, dashboard.Registration{ID: info.ID, RemoteAddr: info.RemoteAddr,
			GossipAddr: info.GossipAddr, Lease: info.Lease, Kinds: info.Kinds})
	}
	snap, _ := table.Snapshot()
	v.Owners = make(map[uint32]dashboard.Owner, len(snap))
	for shard, o := range snap {
		v.Owners[shard] = dashboard.Owner{Node: o.NodeID, Epoch: o.Epoch}
	}
	// Every member gossip knows, registered or not: the dashboard shows
	// registration and gossip side by side.
	suspect := n.members.suspects()
	for _, m := range n.members.gossipStates(n.cfg.NodeID, table.Nodes()) {
		st := dashboard.GossipDead
		if m.alive {
			st = dashboard.GossipAlive
			if suspect[m.id] {
				st = dashboard.GossipSuspect
			}
		}
		v.Gossip = append(v.Gossip, dashboard.GossipMember{ID: m.id, State: st, AdminAddr: m.admin})
	}
	return v
}

func (s dashSource) Subscribe() (<-chan struct{}, func()) {
	if !s.running() {
		return nil, func() {}
	}
	return s.n.place.Table().Subscribe()
}

func (s dashSource) LeaseTTL(ctx context.Context, lease int64) (time.Duration, error) {
	if !s.running() {
		return 0, ErrClosed
	}
	resp, err := s.n.etcd.TimeToLive(ctx, clientv3.LeaseID(lease))
	if err != nil {
		return 0, err
	}
	return time.Duration(resp.TTL) * time.Second, nil
}

func (s dashSource) ActiveIn(shard uint32) []actors.Ref {
	if !s.running() {
		return nil
	}
	return s.n.host.ActiveIn(shard)
}

func (s dashSource) IsActive(ref actors.Ref) bool {
	return s.running() && s.n.host.IsActive(ref)
}

func (s dashSource) Runtime(ctx context.Context, ref actors.Ref) (actors.Runtime, error) {
	if !s.running() {
		return actors.Runtime{}, ErrClosed
	}
	return s.n.host.Runtime(ctx, ref)
}

func (s dashSource) Record(ctx context.Context, ref actors.Ref) (actors.Record, error) {
	if !s.running() {
		return actors.Record{}, ErrClosed
	}
	return s.n.host.LoadRecord(ctx, ref)
}
