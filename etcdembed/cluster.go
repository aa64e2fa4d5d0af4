package etcdembed

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"path/filepath"
	"strings"
	"sync"

	"github.com/ordo-actors/ordo/internal/ports"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// ClusterConfig describes an in-process multi-member etcd cluster.
type ClusterConfig struct {
	// Dir is the parent directory; member i keeps its data in Dir/m<i>
	// (required; a test passes t.TempDir()).
	Dir string
	// Members is the member count; default 3.
	Members int
	// UnsafeNoFsync disables fsync (tests only).
	UnsafeNoFsync bool
	// Slog receives the members' logs, each with a "member" attribute;
	// default slog.Default(). See Config.Slog for what goes to which
	// level; Kill and Crash count as a close.
	Slog *slog.Logger
	// Logger, when non-nil, is the zap logger the members use instead of
	// Slog (zap.NewNop() silences them).
	Logger *zap.Logger
	// TickMs and ElectionMs are the raft timeouts; defaults 20 and 200, so
	// that a killed leader is replaced within a fraction of a second.
	TickMs, ElectionMs uint
}

// Cluster is a running in-process etcd cluster whose members can be killed
// and restarted with their data. Its methods are safe for concurrent use.
type Cluster struct {
	cfg     ClusterConfig
	initial string
	clients []url.URL // what clients use: the fronts
	inner   []url.URL // the members' own client listeners
	peers   []url.URL

	mu      sync.Mutex
	members []*embed.Etcd // nil while killed
	fronts  []*front      // nil while killed
	logs    []*memberLog  // of each member's current run
}

// StartCluster starts cfg.Members members on free loopback ports and waits
// until every one serves, ctx ends, or one fails. On an error every member
// started is closed.
func StartCluster(ctx context.Context, cfg ClusterConfig) (*Cluster, error) {
	if cfg.Dir == "" {
		return nil, errors.New("etcdembed: ClusterConfig.Dir is required")
	}
	if cfg.Members == 0 {
		cfg.Members = 3
	}
	if cfg.Members < 1 {
		return nil, fmt.Errorf("etcdembed: %d members", cfg.Members)
	}
	if cfg.TickMs == 0 {
		cfg.TickMs = 20
	}
	if cfg.ElectionMs == 0 {
		cfg.ElectionMs = 200
	}
	ports, err := freePorts(3 * cfg.Members)
	if err != nil {
		return nil, err
	}
	c := &Cluster{cfg: cfg, members: make([]*embed.Etcd, cfg.Members), fronts: make([]*front, cfg.Members),
		logs: make([]*memberLog, cfg.Members)}
	var parts []string
	for i := 0; i < cfg.Members; i++ {
		cu := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[3*i])}
		pu := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[3*i+1])}
		iu := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[3*i+2])}
		c.clients = append(c.clients, cu)
		c.inner = append(c.inner, iu)
		c.peers = append(c.peers, pu)
		parts = append(parts, fmt.Sprintf("m%d=%s", i, pu.String()))
	}
	c.initial = strings.Join(parts, ",")
	for i := 0; i < cfg.Members; i++ {
		if err := c.startMember(i); err != nil {
			c.Close()
			return nil, err
		}
	}
	for i := 0; i < cfg.Members; i++ {
		if err := c.waitReady(ctx, i); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

func (c *Cluster) memberConfig(i int, ml *memberLog) (*embed.Config, error) {
	ec := embed.NewConfig()
	ec.Name = fmt.Sprintf("m%d", i)
	ec.Dir = filepath.Join(c.cfg.Dir, ec.Name)
	ec.ListenClientUrls = []url.URL{c.inner[i]}
	ec.AdvertiseClientUrls = []url.URL{c.clients[i]}
	ec.ListenPeerUrls = []url.URL{c.peers[i]}
	ec.AdvertisePeerUrls = []url.URL{c.peers[i]}
	ec.InitialCluster = c.initial
	ec.InitialClusterToken = "ordo-test"
	ec.ClusterState = embed.ClusterStateFlagNew
	ec.UnsafeNoFsync = c.cfg.UnsafeNoFsync
	ec.MaxTxnOps = 1024
	ec.MaxRequestBytes = 8 << 20
	sl := c.cfg.Slog
	if sl == nil {
		sl = slog.Default()
	}
	err := applyCommon(ec, Config{Logger: c.cfg.Logger, Slog: sl.With("member", ec.Name),
		TickMs: c.cfg.TickMs, ElectionMs: c.cfg.ElectionMs}, ml)
	return ec, err
}

func (c *Cluster) waitReady(ctx context.Context, i int) error {
	c.mu.Lock()
	e := c.members[i]
	c.mu.Unlock()
	if e == nil {
		return fmt.Errorf("etcdembed: member %d is not running", i)
	}
	select {
	case <-e.Server.ReadyNotify():
		return nil
	case err := <-e.Err():
		return fmt.Errorf("etcdembed: member %d: %w", i, err)
	case <-ctx.Done():
		return fmt.Errorf("etcdembed: waiting for member %d to serve: %w", i, ctx.Err())
	}
}

func (c *Cluster) startMember(i int) error {
	ml := &memberLog{}
	ec, err := c.memberConfig(i, ml)
	if err != nil {
		return err
	}
	e, err := embed.StartEtcd(ec)
	if err != nil {
		return fmt.Errorf("etcdembed: start member %d: %w", i, err)
	}
	f, err := startFront(c.clients[i].Host, c.inner[i].Host)
	if err != nil {
		ml.closing.Store(true)
		e.Close()
		return fmt.Errorf("etcdembed: member %d client listener: %w", i, err)
	}
	c.mu.Lock()
	c.members[i], c.fronts[i], c.logs[i] = e, f, ml
	c.mu.Unlock()
	return nil
}

// Endpoints returns every member's client URL (killed members included:
// their ports are kept for Restart). Clients reach a member through a TCP
// forwarder that Kill severs, so a killed member drops its clients at once.
func (c *Cluster) Endpoints() []string {
	eps := make([]string, len(c.clients))
	for i, u := range c.clients {
		eps[i] = u.String()
	}
	return eps
}

// Endpoint returns member i's client URL.
func (c *Cluster) Endpoint(i int) string { return c.clients[i].String() }

// Size returns the member count.
func (c *Cluster) Size() int { return len(c.clients) }

// Kill cuts member i's client connections, stops it (its data stays) and
// waits for it to exit. Killing a killed member does nothing.
func (c *Cluster) Kill(i int) { c.stop(i, false) }

// Crash stops member i the way SIGKILL would: its client connections are
// cut and its raft node stops at once, with no leadership transfer (Kill
// lets a leader hand leadership over first, as etcd does on a graceful
// stop, so the cluster never waits an election timeout). Its data stays
// for Restart. Crashing a killed member does nothing.
func (c *Cluster) Crash(i int) { c.stop(i, true) }

// stop cuts member i's client connections and stops it, at once (no
// leadership transfer) when hard.
func (c *Cluster) stop(i int, hard bool) {
	c.mu.Lock()
	e, f, ml := c.members[i], c.fronts[i], c.logs[i]
	c.members[i], c.fronts[i] = nil, nil
	c.mu.Unlock()
	if f != nil {
		f.close()
	}
	if e != nil {
		ml.closing.Store(true)
		if hard {
			e.Server.HardStop()
		}
		e.Close()
	}
}

// Restart starts the killed member i again on its old ports and data, and
// waits until it serves (which needs a quorum) or ctx ends. Restarting a
// running member does nothing.
func (c *Cluster) Restart(ctx context.Context, i int) error {
	c.mu.Lock()
	if c.members[i] != nil {
		c.mu.Unlock()
		return nil
	}
	c.mu.Unlock()
	if err := c.startMember(i); err != nil {
		return err
	}
	return c.waitReady(ctx, i)
}

// Leader returns the index of the running member that is the raft leader,
// or -1 when none is (no quorum, or an election in progress).
func (c *Cluster) Leader() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, e := range c.members {
		if e != nil && e.Server.Leader() == e.Server.MemberID() {
			return i
		}
	}
	return -1
}

// Running reports whether member i is running.
func (c *Cluster) Running(i int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.members[i] != nil
}

// Close stops every running member. Idempotent.
func (c *Cluster) Close() {
	for i := range c.members {
		c.Kill(i)
	}
}

// freePorts returns n distinct free loopback ports, outside the ephemeral
// range (internal/ports): members are restarted on their old ports, and an
// outgoing connection could otherwise take one meanwhile.
func freePorts(n int) ([]int, error) {
	p, err := ports.Free(n)
	if err != nil {
		return nil, fmt.Errorf("etcdembed: %w", err)
	}
	return p, nil
}
