package cluster

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/ordo-actors/ordo/placement"
)

// nodeMeta is what a node gossips about itself.
type nodeMeta struct {
	ID     string `json:"id"`
	Remote string `json:"remote"`
	Lease  int64  `json:"lease"`
	Admin  string `json:"admin,omitempty"` // the admin endpoint, for the dashboard
}

// member is what gossip last said about one memberlist member.
type member struct {
	meta   nodeMeta
	metaOK bool   // meta decoded, with an ID
	addr   string // the gossip address memberlist has for it
	alive  bool
	since  time.Time // when it was declared dead or left; zero while alive

	// For the mismatch warning (see membership.audit).
	mismatch      string
	mismatchSince time.Time
	warned        bool
}

// membership wraps memberlist: it gossips the node's metadata and tracks,
// per memberlist member, whether it is alive and what it claims to be. A
// member stands for a registered node only when it matches the node's
// registration (see identityMismatch); view derives the live set from that.
// Safe for concurrent use.
//
// Locks: keyMu and mu are never held together. memberlist calls the
// delegate methods with its own lock held, and they take mu: mu is never
// held while calling memberlist (keyMu only around the keyring's methods,
// updateMu only around UpdateNode).
type membership struct {
	ml      *memberlist.Memberlist
	changed chan struct{} // receives (coalesced) after any membership event
	bound   string        // the gossip address listened on
	log     *slog.Logger
	keyring *memberlist.Keyring // nil: gossip is plaintext
	// gossipInterval is memberlist's: how often it sends queued updates.
	gossipInterval time.Duration

	keyMu sync.Mutex // serialises keyring changes
	// updateMu serialises Memberlist.UpdateNode: it reads the local
	// node's address outside memberlist's lock, which another UpdateNode
	// writes under it (a race the detector reports when the placement
	// agent's new lease and the live loop gossip at once).
	updateMu sync.Mutex

	mu        sync.Mutex
	meta      nodeMeta
	members   map[string]*member // by memberlist name
	conflicts map[string]bool    // name conflicts logged, by "name addr"
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
		log:       logger,
		changed:   make(chan struct{}, 1),
		meta:      meta,
		members:   make(map[string]*member),
		conflicts: make(map[string]bool),
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
	// memberlist would compress every packet with a new LZW writer (72 KB
	// of tables): gossip packets are a few hundred bytes, and compressing
	// them was most of an idle node's allocations. Peers read compressed
	// and plain packets alike.
	mc.EnableCompression = false
	m.gossipInterval = mc.GossipInterval
	mc.Name = meta.ID
	mc.BindAddr = host
	mc.Delegate = m
	mc.Events = m
	mc.Conflict = m
	if len(cfg.GossipKeys) > 0 {
		keys := copyKeys(cfg.GossipKeys)
		if m.keyring, err = memberlist.NewKeyring(keys, keys[0]); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrGossipKey, err)
		}
		// Every message and stream is encrypted with the primary key and
		// authenticated (AES-GCM); plaintext or undecryptable gossip is
		// dropped.
		mc.Keyring = m.keyring
		mc.GossipVerifyIncoming = true
		mc.GossipVerifyOutgoing = true
	} else {
		logger.Warn("gossip is not encrypted: whoever reaches the gossip port can read it and take part in failure detection; set Config.GossipKeys (bank node: --gossip-key)")
	}
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
	if cfg.Faults != nil {
		mc.Transport = &faultyTransport{NetTransport: nt, faults: cfg.Faults, local: advertised}
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

// setLease gossips a new lease ID. It waits for about one gossip round,
// which lets the first transmission of the change go out; the change is
// queued either way, and every push-pull carries it too.
func (m *membership) setLease(lease int64) {
	m.mu.Lock()
	same := m.meta.Lease == lease
	m.meta.Lease = lease
	m.mu.Unlock()
	if !same {
		m.updateMu.Lock()
		_ = m.ml.UpdateNode(m.gossipInterval) // a timeout leaves the update queued
		m.updateMu.Unlock()
	}
}

// setKeys makes keys the keyring, keys[0] the primary (see
// Node.SetGossipKeys). The keys are checked by the caller.
//
// memberlist's Keyring.RemoveKey shifts the keys after the one removed in
// place, outside its lock, while packets being decrypted read them; a key
// removed from the end of the ring shifts nothing. So keys are removed
// from the end only: a wanted key behind an unwanted one is removed and
// added back (it is not accepted for that instant). Rotating one key at a
// time (add a secondary, make it primary, drop the old one) never needs
// that: the key dropped is then the last.
func (m *membership) setKeys(keys [][]byte) error {
	if m.keyring == nil {
		return errGossipPlaintext
	}
	keys = copyKeys(keys)
	m.keyMu.Lock()
	defer m.keyMu.Unlock()
	kr := m.keyring
	for _, k := range keys {
		if err := kr.AddKey(k); err != nil {
			return fmt.Errorf("%w: %v", ErrGossipKey, err)
		}
	}
	if err := kr.UseKey(keys[0]); err != nil {
		return fmt.Errorf("%w: %v", ErrGossipKey, err)
	}
	wanted := func(k []byte) bool {
		for _, w := range keys {
			if bytes.Equal(k, w) {
				return true
			}
		}
		return false
	}
	for {
		ring := copyKeys(kr.GetKeys())
		last := -1
		for i, k := range ring {
			if !wanted(k) {
				last = i
			}
		}
		if last < 0 {
			return nil
		}
		// last > 0: the primary, keys[0], is wanted.
		for i := len(ring) - 1; i >= last; i-- {
			if err := kr.RemoveKey(ring[i]); err != nil {
				return fmt.Errorf("cluster: removing a gossip key: %w", err)
			}
		}
		for _, k := range ring[last+1:] {
			if err := kr.AddKey(k); err != nil {
				return fmt.Errorf("cluster: restoring a gossip key: %w", err)
			}
		}
	}
}

// gossipView is what gossip says about the registered nodes.
type gossipView struct {
	// live holds this node and the registered nodes whose matching member
	// is alive, sorted.
	live []string
	// dead maps each registered node whose matching member gossip
	// declared dead (or left) to the lease of its registration.
	dead map[string]int64
}

// view returns the live and dead registered nodes: a registered node
// (other than self) counts only through the member that matches its
// registration. Members that match no registration are ignored.
func (m *membership) view(self string, nodes []placement.NodeInfo) gossipView {
	v := gossipView{live: []string{self}, dead: map[string]int64{}}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, info := range nodes {
		if info.ID == self {
			continue
		}
		mem, ok := m.members[info.ID]
		if !ok || identityMismatch(info.ID, mem, info, true) != "" {
			continue
		}
		if mem.alive {
			v.live = append(v.live, info.ID)
		} else {
			v.dead[info.ID] = info.Lease
		}
	}
	sort.Strings(v.live)
	return v
}

// identityMismatch says how the member named name fails to stand for the
// registered node info ("" when it matches): its memberlist name, the ID
// and remote address it gossips, the lease it gossips and the gossip
// address memberlist has for it must all equal the registration's.
// registered is false when no node is registered under name.
func identityMismatch(name string, mem *member, info placement.NodeInfo, registered bool) string {
	switch {
	case !mem.metaOK:
		return "no readable node metadata"
	case mem.meta.ID != name:
		return fmt.Sprintf("gossip name %q claims node ID %q", name, mem.meta.ID)
	case !registered:
		return "not registered in etcd"
	case info.Lease == 0 || mem.meta.Lease != info.Lease:
		return fmt.Sprintf("lease %x, registered under lease %x", mem.meta.Lease, info.Lease)
	case mem.addr != info.GossipAddr:
		return fmt.Sprintf("gossip address %s, registered %s", mem.addr, info.GossipAddr)
	case mem.meta.Remote != info.RemoteAddr:
		return fmt.Sprintf("remote address %s, registered %s", mem.meta.Remote, info.RemoteAddr)
	}
	return ""
}

// mismatchGrace is how long an alive member may fail to match a
// registration before it is logged: a node gossips before it registers,
// and gossips a new lease only after registering under it.
const mismatchGrace = 5 * time.Second

// maxConflictsLogged bounds the memory of name conflicts already logged.
const maxConflictsLogged = 256

// forgetDeadAfter is how long a dead member that stands for no
// registration is remembered.
const forgetDeadAfter = time.Minute

// audit logs, once per member and mismatch, alive members that do not
// match their registration for longer than mismatchGrace, and forgets dead
// members that no longer matter. Called from the node's live loop.
func (m *membership) audit(self string, nodes []placement.NodeInfo, now time.Time) {
	byID := make(map[string]placement.NodeInfo, len(nodes))
	for _, info := range nodes {
		byID[info.ID] = info
	}
	type warning struct{ name, addr, remote, reason string }
	var warn []warning
	m.mu.Lock()
	for name, mem := range m.members {
		if name == self {
			continue
		}
		info, registered := byID[name]
		reason := identityMismatch(name, mem, info, registered)
		if !mem.alive {
			if reason != "" && now.Sub(mem.since) > forgetDeadAfter {
				delete(m.members, name)
			}
			continue
		}
		switch {
		case reason == "":
			mem.mismatch, mem.warned = "", false
		case reason != mem.mismatch:
			mem.mismatch, mem.mismatchSince, mem.warned = reason, now, false
		case !mem.warned && now.Sub(mem.mismatchSince) >= mismatchGrace:
			mem.warned = true
			warn = append(warn, warning{name, mem.addr, mem.meta.Remote, reason})
		}
	}
	m.mu.Unlock()
	for _, w := range warn {
		m.log.Warn("gossip: member does not match its etcd registration; it is ignored",
			"member", w.name, "addr", w.addr, "remote", w.remote, "mismatch", w.reason)
	}
}

// describe returns the Status view of the members: every registered node,
// and the alive members that are not registered.
func (m *membership) describe(self string, nodes []placement.NodeInfo) []Member {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Member, 0, len(nodes))
	seen := make(map[string]bool, len(nodes))
	for _, info := range nodes {
		seen[info.ID] = true
		st := Member{ID: info.ID, RemoteAddr: info.RemoteAddr, Registered: true}
		if info.ID == self {
			st.Alive = true
			out = append(out, st)
			continue
		}
		mem, ok := m.members[info.ID]
		if !ok {
			st.Mismatch = "not in gossip"
			out = append(out, st)
			continue
		}
		if st.Mismatch = identityMismatch(info.ID, mem, info, true); st.Mismatch == "" {
			st.Alive, st.Dead = mem.alive, !mem.alive
		}
		out = append(out, st)
	}
	for name, mem := range m.members {
		if seen[name] || !mem.alive || name == self {
			continue
		}
		out = append(out, Member{ID: name, RemoteAddr: mem.meta.Remote, Alive: true,
			Mismatch: identityMismatch(name, mem, placement.NodeInfo{}, false)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
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

// record stores what an event says about n. memberlist calls its event
// delegates with its node lock held: record must not call memberlist.
func (m *membership) record(n *memberlist.Node, alive bool) (mem *member, wasDead bool) {
	mem = &member{addr: n.Address(), alive: alive}
	if json.Unmarshal(n.Meta, &mem.meta) == nil && mem.meta.ID != "" {
		mem.metaOK = true
	}
	if !alive {
		mem.since = time.Now()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if old, ok := m.members[n.Name]; ok {
		wasDead = !old.alive
		if old.addr == mem.addr && old.meta == mem.meta {
			// Same claim: keep the warning state.
			mem.mismatch, mem.mismatchSince, mem.warned = old.mismatch, old.mismatchSince, old.warned
		}
	}
	m.members[n.Name] = mem
	return mem, wasDead
}

// NotifyJoin implements memberlist.EventDelegate: n is alive (new, or
// back from dead).
func (m *membership) NotifyJoin(n *memberlist.Node) {
	if _, wasDead := m.record(n, true); wasDead {
		m.log.Info("gossip: member alive again", "member", n.Name, "addr", n.Address())
	}
	m.notify()
}

// NotifyLeave implements memberlist.EventDelegate: n was declared dead or
// left.
func (m *membership) NotifyLeave(n *memberlist.Node) {
	m.record(n, false)
	m.log.Info("gossip: member dead or left", "member", n.Name, "addr", n.Address())
	m.notify()
}

// NotifyUpdate implements memberlist.EventDelegate: n's metadata changed.
func (m *membership) NotifyUpdate(n *memberlist.Node) {
	m.record(n, true)
	m.notify()
}

// NotifyConflict implements memberlist.ConflictDelegate: a member claimed
// the name of another at a different address; memberlist ignores it. It
// is logged once per name and address (memberlist reports it for every
// message of the claimant).
func (m *membership) NotifyConflict(existing, other *memberlist.Node) {
	key := existing.Name + " " + other.Address()
	m.mu.Lock()
	seen := m.conflicts[key]
	if !seen {
		if len(m.conflicts) >= maxConflictsLogged {
			clear(m.conflicts)
		}
		m.conflicts[key] = true
	}
	old, known := m.members[existing.Name]
	m.mu.Unlock()
	if seen {
		return
	}
	if known && !old.alive {
		// Most likely the member restarted on another port: memberlist
		// takes the new address once it forgets the old one.
		m.log.Info("gossip: a dead member is back at a new address; ignored until gossip forgets the old one",
			"member", existing.Name, "addr", existing.Address(), "new_addr", other.Address())
		return
	}
	m.log.Warn("gossip: a member claims the name of another at a different address; ignored",
		"member", existing.Name, "addr", existing.Address(), "claimed_by", other.Address())
}

var errGossipCut = errors.New("cluster: gossip cut by Config.Faults")

// faultyTransport filters a NetTransport's outgoing traffic through
// Config.Faults (Faults.Cut).
type faultyTransport struct {
	*memberlist.NetTransport
	faults Faults
	local  string
}

func (t *faultyTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	if t.faults.Cut(t.local, addr) {
		return time.Now(), nil // dropped like a lost datagram
	}
	return t.NetTransport.WriteTo(b, addr)
}

func (t *faultyTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	if t.faults.Cut(t.local, addr) {
		return nil, errGossipCut
	}
	return t.NetTransport.DialTimeout(addr, timeout)
}

// WriteToAddress implements memberlist.NodeAwareTransport.
func (t *faultyTransport) WriteToAddress(b []byte, addr memberlist.Address) (time.Time, error) {
	if t.faults.Cut(t.local, addr.Addr) {
		return time.Now(), nil
	}
	return t.NetTransport.WriteToAddress(b, addr)
}

// DialAddressTimeout implements memberlist.NodeAwareTransport.
func (t *faultyTransport) DialAddressTimeout(addr memberlist.Address, timeout time.Duration) (net.Conn, error) {
	if t.faults.Cut(t.local, addr.Addr) {
		return nil, errGossipCut
	}
	return t.NetTransport.DialAddressTimeout(addr, timeout)
}
