package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/cluster/dashboard"
	"github.com/ordo-actors/ordo/placement"
	"github.com/ordo-actors/ordo/proto/ordopb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrClosed is returned by calls on a node or client that was shut down.
var ErrClosed = errors.New("cluster: closed")

// ErrInvalidConfig is wrapped by every error of Config.Validate (and of
// New, which calls it), including those of its Placement and Host parts.
var ErrInvalidConfig = errors.New("cluster: invalid config")

// Node is one member of an ordo cluster: it hosts the entities of the
// shards it owns, routes calls to the owners of the others, and takes part
// in placement and gossip.
//
// Lifecycle: New, Start, then Shutdown (idempotent; drains every shard).
// A test harness injects faults through Config.Faults. All methods are
// safe for concurrent use.
type Node struct {
	cfg     Config
	log     *slog.Logger
	kinds   []actors.Kind
	metrics *metrics

	etcd    *clientv3.Client
	ownEtcd bool
	tr      *transport
	host    *actors.Host
	place   *placement.Agent
	members *membership
	router  *router
	admin   *http.Server
	adminLn net.Listener

	dashOnce sync.Once
	dash     *dashboard.Hub // see dashboard()

	cancel context.CancelFunc
	wg     sync.WaitGroup

	stopOnce sync.Once
	quit     chan struct{} // closed when Shutdown or a crash begins
	started  atomic.Bool
	stopped  atomic.Bool
	up       atomic.Bool // Start returned nil (see Readiness)
	leaving  atomic.Bool // Shutdown or a crash began
}

// New validates cfg and returns a node for kinds. It does no I/O.
func New(cfg Config, kinds ...actors.Kind) (*Node, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.GossipKeys != nil {
		cfg.GossipKeys = copyKeys(cfg.GossipKeys)
	}
	return &Node{cfg: cfg, log: cfg.Logger.With("node", cfg.NodeID), kinds: kinds, metrics: newMetrics(),
		quit: make(chan struct{})}, nil
}

// Start serves the admin endpoint (Config.AdminAddr; refused first when
// it cannot be protected), connects to etcd, starts the remote listener,
// the entity host, gossip and placement, and returns once the node is
// registered. On error everything started so far is stopped.
func (n *Node) Start(ctx context.Context) (err error) {
	if !n.started.CompareAndSwap(false, true) {
		return errors.New("cluster: node already started")
	}
	defer func() {
		if err != nil {
			n.teardown(true)
		}
	}()
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	n.cancel = cancel
	// The admin endpoint first: it answers probes while the node starts,
	// and one that cannot be protected stops the start before any I/O.
	if n.cfg.AdminAddr != "" {
		if err = n.startAdmin(); err != nil {
			return err
		}
	}

	if n.cfg.Etcd != nil {
		n.etcd = n.cfg.Etcd
	} else {
		n.etcd, err = dialEtcd(ctx, etcdAccess{endpoints: n.cfg.EtcdEndpoints, timeout: n.cfg.EtcdDialTimeout,
			tls: n.cfg.EtcdTLS, username: n.cfg.EtcdUsername, password: n.cfg.EtcdPassword}, n.log)
		if err != nil {
			return err
		}
		n.ownEtcd = true
	}
	warnPlaintext(n.log, n.cfg.TLS)
	if n.tr, err = startTransport(n.cfg.RemoteAddr, n.cfg.AdvertiseRemoteAddr, n.log, n.cfg.TLS); err != nil {
		return err
	}

	// Gossip, then the placement agent: its routing table is the router's,
	// and it is the host's lease and hears of the shards the host gives
	// up. It drives the host (placementHost) only once started, below.
	n.members, err = startMembership(n.cfg, nodeMeta{ID: n.cfg.NodeID, Remote: n.tr.addr, Admin: n.adminAdvert()}, n.log)
	if err != nil {
		return err
	}
	pc := n.cfg.Placement
	pc.NodeID = n.cfg.NodeID
	pc.RemoteAddr = n.tr.addr
	pc.GossipAddr = n.members.addr()
	for _, k := range n.kinds {
		pc.Kinds = append(pc.Kinds, k.Name())
	}
	if pc.Logger == nil {
		pc.Logger = n.log
	}
	pc.Faults = n.cfg.Faults
	if n.place, err = placement.New(pc, n.etcd, placementHost{n}); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	n.router = &router{self: n.cfg.NodeID, table: n.place.Table(), tr: n.tr, shards: n.cfg.Placement.Shards,
		policy: n.cfg.Retry, metrics: n.metrics, log: n.log, kinds: make(map[string]bool),
		tracer: tracerOf(n.cfg.TracerProvider, TracerName, n.cfg.NodeID)}
	for _, k := range n.kinds {
		n.router.kinds[k.Name()] = true
	}

	hc := n.cfg.Host
	hc.Shards = n.cfg.Placement.Shards
	place := n.place
	deps := actors.HostDeps{Store: n.cfg.Store, Router: n.router, Lease: n.place,
		// The host gave a shard up (storage fenced it, or one of its writes
		// failed with an unknown outcome; the host logged which): if
		// placement still believes it holds the shard at this epoch, it
		// lets the lock go so that the shard is served again, by whoever
		// acquires it next, under a new epoch.
		ShardLost: func(shard uint32, epoch int64, _ error) { place.Relinquish(shard, epoch) },
		OnBatch:   n.metrics.observeBatch}
	if n.cfg.Faults != nil {
		deps.Faults = entityGate{n.cfg.Faults}
	}
	if n.cfg.TracerProvider != nil {
		hc.Tracer = tracerOf(n.cfg.TracerProvider, actors.TracerName, n.cfg.NodeID)
	}
	if n.cfg.Insecure {
		// Plaintext: no caller can be told from another, and this
		// cluster's own entities' messages arrive unauthenticated.
		hc.TrustUnauthenticated = true
	}
	if hc.Logger == nil {
		hc.Logger = n.log
	}
	if n.host, err = actors.NewHost(hc, deps, n.kinds...); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	if err = n.host.Start(ctx); err != nil {
		return err
	}
	n.router.local = n.host
	n.metrics.registerHost(n.host)
	n.metrics.registerTransport(n.tr)
	n.metrics.registerStore(n.cfg.Store)
	n.tr.serve(n.serveRemote)

	// A node restarted right after a crash finds its ID still registered
	// under its previous lease: Start waits, until ctx ends, for that
	// lease to end (at most its TTL).
	if err = n.place.Start(ctx); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	n.members.setLease(int64(n.place.Lease()))

	n.wg.Add(1)
	go n.liveLoop(runCtx)
	n.up.Store(true)
	n.wg.Add(1)
	go n.runDashboard(runCtx)
	if n.cfg.Faults != nil {
		if crashed := n.cfg.Faults.Crashed(); crashed != nil {
			// Not in wg: the crash's teardown waits for wg.
			go n.watchCrash(runCtx, crashed)
		}
	}
	n.log.Info("node started", "remote", n.tr.addr, "gossip", n.members.addr())
	return nil
}

// Shutdown leaves the cluster gracefully: every shard is drained and
// released (callers see retries, not failures), the lease is revoked, and
// everything stops. If ctx ends first, what remains is stopped at once.
// It is idempotent. After Config.Faults crashed the node, it waits until
// the crash has stopped the node (see Faults) and returns nil.
func (n *Node) Shutdown(ctx context.Context) error {
	if n.crashed() {
		n.crash(ctx)
		return nil
	}
	var err error
	n.stopOnce.Do(func() {
		n.leaving.Store(true)
		close(n.quit)
		if n.place != nil {
			if perr := n.place.Shutdown(ctx); perr != nil {
				err = perr
			}
		}
		if n.host != nil {
			if herr := n.host.Shutdown(ctx); herr != nil && err == nil {
				err = herr
			}
		}
		n.teardown(false)
	})
	return err
}

// teardown stops what Start started, in reverse order.
func (n *Node) teardown(hard bool) {
	n.stopped.Store(true)
	if n.cancel != nil {
		n.cancel()
	}
	if n.admin != nil {
		_ = n.admin.Close()
	}
	n.wg.Wait()
	if n.members != nil {
		if hard {
			n.members.kill()
		} else {
			n.members.leave(time.Second)
		}
	}
	if n.host != nil {
		n.host.Close() // a no-op after a graceful Shutdown
	}
	if n.tr != nil {
		n.tr.close(hard)
	}
	if n.ownEtcd && n.etcd != nil {
		n.etcd.Close()
	}
}

// ID returns the node ID.
func (n *Node) ID() string { return n.cfg.NodeID }

// RemoteAddr returns the address other nodes and clients call the node
// on: Config.AdvertiseRemoteAddr when set, else the bound address.
func (n *Node) RemoteAddr() string { return n.tr.addr }

// GossipAddr returns the gossip address other nodes use:
// Config.AdvertiseGossipAddr when set, else the bound address.
func (n *Node) GossipAddr() string { return n.members.addr() }

// ListenAddrs returns the addresses the node's remote and gossip agents
// are bound to (with port 0 in the Config, the ports picked).
func (n *Node) ListenAddrs() (remote, gossip string) { return n.tr.bound, n.members.bound }

// AdminAddr returns the admin endpoint's address ("" when disabled).
func (n *Node) AdminAddr() string {
	if n.adminLn == nil {
		return ""
	}
	return n.adminLn.Addr().String()
}

// Owned returns the shards the node holds and their epochs.
func (n *Node) Owned() map[uint32]int64 { return n.place.Owned() }

// Invoke implements actors.Invoker: it routes env to the owner of its
// entity, retrying until ctx ends.
func (n *Node) Invoke(ctx context.Context, env *ordopb.Envelope) (*ordopb.Reply, error) {
	if n.stopped.Load() {
		return nil, ErrClosed
	}
	return n.router.Invoke(ctx, env)
}

// liveLoop feeds placement the live set (registered in etcd and alive in
// gossip through the member that matches the registration; see
// membership.view) and revokes the leases of registered nodes whose
// matching member gossip declared dead, when this node is the one chosen
// to.
func (n *Node) liveLoop(ctx context.Context) {
	defer n.wg.Done()
	changed, unsubscribe := n.place.Table().Subscribe()
	defer unsubscribe()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	revoking := make(map[string]bool)
	var revokeMu sync.Mutex
	lastLease := int64(n.place.Lease())
	var lastRejoin time.Time
	var lastLive []string
	for {
		nodes := n.place.Table().Nodes()
		v := n.members.view(n.cfg.NodeID, nodes)
		if !slices.Equal(v.live, lastLive) {
			n.log.Debug("live nodes changed", "live", v.live)
			lastLive = v.live
		}
		n.place.SetLive(v.live)
		n.members.audit(n.cfg.NodeID, nodes, time.Now())

		for id, lease := range v.dead {
			if placement.Revoker(id, v.live) != n.cfg.NodeID {
				continue
			}
			revokeMu.Lock()
			busy := revoking[id]
			revoking[id] = true
			revokeMu.Unlock()
			if busy {
				continue
			}
			n.metrics.failoverChecks.Inc()
			n.wg.Add(1)
			go func(id string, lease int64) {
				defer n.wg.Done()
				defer func() { revokeMu.Lock(); delete(revoking, id); revokeMu.Unlock() }()
				ok, err := n.place.RevokeDead(ctx, id, clientv3.LeaseID(lease))
				switch {
				case err != nil && ctx.Err() == nil:
					n.log.Warn("revoking a dead node's lease failed", "dead", id, "err", err)
				case ok:
					n.metrics.failovers.Inc()
					n.log.Info("revoked the lease of a dead node", "dead", id)
				}
			}(id, lease)
		}
		// Gossip does not heal by itself: a node that declared its peers dead
		// (and they it) after a partition never talks to them again. Join
		// again every node etcd shows registered that gossip does not show
		// live.
		if time.Since(lastRejoin) >= rejoinEvery {
			lastRejoin = time.Now()
			var addrs []string
			for _, info := range nodes {
				if !contains(v.live, info.ID) && info.GossipAddr != "" {
					addrs = append(addrs, info.GossipAddr)
				}
			}
			if len(addrs) > 0 {
				n.wg.Add(1)
				go func() {
					defer n.wg.Done()
					if _, err := n.members.ml.Join(addrs); err != nil {
						n.log.Debug("rejoining gossip failed", "addrs", addrs, "err", err)
					}
				}()
			}
		}
		if l := int64(n.place.Lease()); l != lastLease {
			lastLease = l
			n.members.setLease(l)
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-n.members.changed:
		case <-tick.C:
		}
	}
}

// rejoinEvery is how often a node tries to join registered nodes that
// gossip does not show alive.
const rejoinEvery = 2 * time.Second

func contains(s []string, x string) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}

// placementHost adapts the entity host to placement's callbacks.
type placementHost struct{ n *Node }

func (p placementHost) Acquired(shard uint32, epoch int64) {
	if err := p.n.host.Own(shard, epoch); err != nil {
		p.n.log.Error("cannot serve acquired shard", "shard", shard, "epoch", epoch, "err", err)
	}
}

func (p placementHost) Release(ctx context.Context, shard uint32, epoch int64) error {
	p.n.metrics.handoffs.Inc()
	return p.n.host.Release(ctx, shard, epoch)
}

// LeaseGranted implements placement.LeaseObserver: the node gossips a new
// lease before registering under it, so that peers, which count it as live
// only while its gossiped lease equals its registration's, see both
// change together.
func (p placementHost) LeaseGranted(lease clientv3.LeaseID) {
	p.n.members.setLease(int64(lease))
}

func (p placementHost) Lost(shards []uint32) {
	p.n.waitFaults()
	for _, s := range shards {
		p.n.host.Drop(s, fmt.Errorf("%w: lease lost", actors.ErrNotHere))
	}
}

// serveRemote hands an envelope that arrived over the transport to the
// host; the reply goes back on the stream it came from.
//
// caller is the sending process as the transport authenticated it
// (Config.TLS): a node (a node certificate) or an external client (a
// client certificate), each by its certificate's subject common name; in
// plaintext, nobody knows who (actors.CallerUnknown, trusted when
// Config.Insecure: see actors.HostConfig.TrustUnauthenticated). The host
// decides on it at admission: only a node may say that an entity sent
// the message (env.Sender), and the message types a kind declares
// internal (actors.Internal) are refused to anyone else.
func (n *Node) serveRemote(caller peerID, env *ordopb.Envelope, reply func(*ordopb.Reply)) {
	kind := env.GetTarget().GetKind()
	if !n.router.hosts(kind) {
		// The caller's table said this node owns the shard, or it did not
		// know what this node hosts: answer as the router would have.
		if err := n.router.missingKind(n.cfg.NodeID, kind); err != nil {
			rep := &ordopb.Reply{RequestId: env.GetRequestId(), Error: actors.ErrorToProto(err)}
			n.metrics.served.WithLabelValues(kind, outcome(rep.GetError())).Inc()
			reply(rep)
			return
		}
	}
	n.host.SubmitAs(callerOfPeer(caller), env, func(rep *ordopb.Reply) {
		n.metrics.served.WithLabelValues(kind, outcome(rep.GetError())).Inc()
		reply(rep)
	})
}

// callerOfPeer returns the actors.Caller a stream's verified peer is.
func callerOfPeer(p peerID) actors.Caller {
	switch {
	case p.Name == "" && !p.Node:
		return actors.Caller{Class: actors.CallerUnknown}
	case p.Node:
		return actors.Caller{Class: actors.CallerNode, Name: p.Name}
	default:
		return actors.Caller{Class: actors.CallerClient, Name: p.Name}
	}
}
