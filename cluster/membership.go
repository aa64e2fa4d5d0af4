package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// nodeMeta is what a node gossips about itself.
type nodeMeta struct {
	ID     string `json:"id"`
	Remote string `json:"remote"`
	Lease  int64  `json:"lease"`
	Admin  string `json:"admin,omitempty"` // the admin endpoint, for the dashboard
}

// membership wraps memberlist: it gossips the node's metadata and tracks
// which nodes are alive and which were declared dead. Safe for concurrent
// use.
type membership struct {
	ml      *memberlist.Memberlist
	changed chan struct{} // receives (coalesced) after any membership event
	bound   string        // the gossip address listened on
	log     *slog.Logger

	mu    sync.Mutex
	meta  nodeMeta
	alive map[string]nodeMeta
	dead  map[string]time.Time // declared dead or left, by node ID
}

func startMembership(cfg Config, meta nodeMeta, logger *slog.Logger) (*membership, error) {
	host, portStr, err := net.SplitHostPort(cfg.GossipAddr)
	if err != nil {
		return nil, fmt.Errorf("cluster: gossip address: %w", err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("cluster: gossip address %q: bad port", cfg.GossipAddr)
	}
	m := &membership{
		log:     logger,
		changed: make(chan struct{}, 1),
		meta:    meta,
		alive:   make(map[string]nodeMeta),
		dead:    make(map[string]time.Time),
	}
	var mc *memberlist.Config
	if cfg.Gossip == "local" {
		mc = memberlist.DefaultLocalConfig()
		mc.ProbeInterval = 200 * time.Millisecond
		mc.ProbeTimeout = 100 * time.Millisecond
		mc.GossipInterval = 50 * time.Millisecond
		mc.PushPullInterval = 2 * time.Second
	} else {
		mc = memberlist.DefaultLANConfig()
		// Declare a crashed node dead in about 2s rather than memberlist's
		// LAN default of about 5s: probes every 500ms, suspicion ×3.
		mc.ProbeInterval = 500 * time.Millisecond
		mc.ProbeTimeout = 250 * time.Millisecond
		mc.SuspicionMult = 3
	}
	mc.Name = meta.ID
	mc.BindAddr = host
	mc.Delegate = m
	mc.Events = m
	// memberlist's messages go to the node's logger at debug level (its
	// handler drops them unless debug logging is on).
	mc.Logger = slog.NewLogLogger(logger.Handler(), slog.LevelDebug)
	// The transport is built here, not by memberlist, to know the port
	// bound (memberlist reports the advertised one).
	nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{
		BindAddrs: []string{host}, BindPort: port, Logger: mc.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("cluster: starting gossip on %q: %w", cfg.GossipAddr, err)
	}
	mc.BindPort = nt.GetAutoBindPort()
	m.bound = net.JoinHostPort(host, strconv.Itoa(mc.BindPort))
	advertised := m.bound
	if cfg.AdvertiseGossipAddr != "" {
		// Otherwise memberlist advertises the bound address (a private IP
		// of the machine when bound to all interfaces).
		advertised = cfg.AdvertiseGossipAddr
		ah, ap, _ := net.SplitHostPort(advertised) // checked by Config.Validate
		mc.AdvertiseAddr = ah
		mc.AdvertisePort, _ = strconv.Atoi(ap)
	}
	mc.Transport = nt
	if cfg.GossipFaults != nil {
		mc.Transport = &faultyTransport{NetTransport: nt, faults: cfg.GossipFaults, local: advertised}
	}
	ml, err := memberlist.Create(mc)
	if err != nil {
		_ = nt.Shutdown()
		return nil, fmt.Errorf("cluster: starting gossip on %q: %w", cfg.GossipAddr, err)
	}
	m.ml = ml
	if len(cfg.Join) > 0 {
		// Not fatal: the node also joins every node registered in etcd
		// (Node.liveLoop), so unreachable seeds only delay gossip.
		if _, err := ml.Join(cfg.Join); err != nil {
			logger.Warn("joining gossip seeds failed; will join registered nodes instead", "seeds", cfg.Join, "err", err)
		}
	}
	return m, nil
}

// addr returns the gossip address other nodes use (the advertised one).
func (m *membership) addr() string {
	n := m.ml.LocalNode()
	return net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port)))
}

// setLease gossips a new lease ID.
func (m *membership) setLease(lease int64) {
	m.mu.Lock()
	same := m.meta.Lease == lease
	m.meta.Lease = lease
	m.mu.Unlock()
	if !same {
		_ = m.ml.UpdateNode(time.Second) // best effort: the next push-pull carries it too
	}
}

// snapshot returns the alive members and the dead ones with the time they
// were declared dead.
func (m *membership) snapshot() (alive map[string]nodeMeta, dead map[string]time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	alive = make(map[string]nodeMeta, len(m.alive))
	for k, v := range m.alive {
		alive[k] = v
	}
	dead = make(map[string]time.Time, len(m.dead))
	for k, v := range m.dead {
		dead[k] = v
	}
	return alive, dead
}

func (m *membership) leave(timeout time.Duration) {
	_ = m.ml.Leave(timeout)
	_ = m.ml.Shutdown()
}

func (m *membership) kill() { _ = m.ml.Shutdown() }

func (m *membership) notify() {
	select {
	case m.changed <- struct{}{}:
	default:
	}
}

// NodeMeta implements memberlist.Delegate.
func (m *membership) NodeMeta(limit int) []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, _ := json.Marshal(m.meta)
	if len(b) > limit {
		return nil
	}
	return b
}

// NotifyMsg implements memberlist.Delegate (unused).
func (m *membership) NotifyMsg([]byte) {}

// GetBroadcasts implements memberlist.Delegate (unused).
func (m *membership) GetBroadcasts(int, int) [][]byte { return nil }

// LocalState implements memberlist.Delegate (unused).
func (m *membership) LocalState(bool) []byte { return nil }

// MergeRemoteState implements memberlist.Delegate (unused).
func (m *membership) MergeRemoteState([]byte, bool) {}

func decodeMeta(n *memberlist.Node) nodeMeta {
	var meta nodeMeta
	if json.Unmarshal(n.Meta, &meta) != nil || meta.ID == "" {
		meta.ID = n.Name
	}
	return meta
}

// NotifyJoin implements memberlist.EventDelegate.
func (m *membership) NotifyJoin(n *memberlist.Node) {
	meta := decodeMeta(n)
	m.mu.Lock()
	m.alive[meta.ID] = meta
	_, wasDead := m.dead[meta.ID]
	delete(m.dead, meta.ID)
	m.mu.Unlock()
	if wasDead {
		m.log.Info("gossip: node alive again", "peer", meta.ID, "addr", n.Address())
	}
	m.notify()
}

// NotifyLeave implements memberlist.EventDelegate.
func (m *membership) NotifyLeave(n *memberlist.Node) {
	meta := decodeMeta(n)
	m.mu.Lock()
	delete(m.alive, meta.ID)
	m.dead[meta.ID] = time.Now()
	m.mu.Unlock()
	m.log.Info("gossip: node dead or left", "peer", meta.ID, "addr", n.Address())
	m.notify()
}

// NotifyUpdate implements memberlist.EventDelegate.
func (m *membership) NotifyUpdate(n *memberlist.Node) {
	meta := decodeMeta(n)
	m.mu.Lock()
	m.alive[meta.ID] = meta
	m.mu.Unlock()
	m.notify()
}

// GossipFaults cuts gossip between two groups of nodes: a fault hook for
// tests. Give the same GossipFaults to every node's Config; Isolate splits
// the listed gossip addresses from all others, Heal joins them again. Only
// outgoing traffic is filtered, on both sides, which stops every packet and
// stream that would cross. Safe for concurrent use.
type GossipFaults struct {
	mu       sync.Mutex
	isolated map[string]bool
}

// Isolate cuts the given gossip addresses ("host:port") off from the rest.
func (f *GossipFaults) Isolate(addrs ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.isolated = make(map[string]bool, len(addrs))
	for _, a := range addrs {
		f.isolated[a] = true
	}
}

// Heal ends the isolation.
func (f *GossipFaults) Heal() {
	f.mu.Lock()
	f.isolated = nil
	f.mu.Unlock()
}

func (f *GossipFaults) cut(from, to string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.isolated) > 0 && f.isolated[from] != f.isolated[to]
}

var errGossipCut = errors.New("cluster: gossip cut by fault hook")

// faultyTransport filters a NetTransport's outgoing traffic.
type faultyTransport struct {
	*memberlist.NetTransport
	faults *GossipFaults
	local  string
}

func (t *faultyTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	if t.faults.cut(t.local, addr) {
		return time.Now(), nil // dropped like a lost datagram
	}
	return t.NetTransport.WriteTo(b, addr)
}

func (t *faultyTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	if t.faults.cut(t.local, addr) {
		return nil, errGossipCut
	}
	return t.NetTransport.DialTimeout(addr, timeout)
}

// WriteToAddress implements memberlist.NodeAwareTransport.
func (t *faultyTransport) WriteToAddress(b []byte, addr memberlist.Address) (time.Time, error) {
	if t.faults.cut(t.local, addr.Addr) {
		return time.Now(), nil
	}
	return t.NetTransport.WriteToAddress(b, addr)
}

// DialAddressTimeout implements memberlist.NodeAwareTransport.
func (t *faultyTransport) DialAddressTimeout(addr memberlist.Address, timeout time.Duration) (net.Conn, error) {
	if t.faults.cut(t.local, addr.Addr) {
		return nil, errGossipCut
	}
	return t.NetTransport.DialAddressTimeout(addr, timeout)
}
