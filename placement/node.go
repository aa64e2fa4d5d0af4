package placement

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/time/rate"
)

// ShardRunner is what an Agent drives: the part of the runtime that runs a shard's
// entities.
//
// Acquired and Lost are never called concurrently with each other (the node
// serialises them), and for one session every Acquired of a shard happens
// before the Lost that drops it. Release may run concurrently with
// Acquired and Lost of other shards; when the session ends during a
// Release, its ctx is cancelled and Lost names the shard too. Callbacks
// must not call Agent.Shutdown.
type ShardRunner interface {
	// Acquired reports that the node now holds the lock of shard at epoch.
	// It is called after the lock is held and before the node admits calls
	// for the shard; the host fences its store at epoch before loading any
	// state of the shard. It should return quickly (fence asynchronously):
	// it holds up other Acquired and Lost calls.
	Acquired(shard uint32, epoch int64)

	// Release drains shard: stop admitting calls (answer NotHere), finish
	// the call in progress, flush pending writes, stop the entities. The
	// lock is deleted only after it returns nil; on an error the node keeps
	// the shard and tries again later.
	Release(ctx context.Context, shard uint32, epoch int64) error

	// Lost reports that the session ended or its validity deadline passed:
	// the host drops every listed shard at once and discards replies not
	// yet durable. It is called once per ended session (shards may be
	// empty), and for single shards whose lock vanished.
	Lost(shards []uint32)
}

// LeaseObserver may be implemented by a ShardRunner that announces the node's
// lease elsewhere (the cluster package gossips it, and peers count the
// node as live only while the lease they see in gossip equals its
// registration's). LeaseGranted is called with each new session's lease
// before the node registers under it, so that the announcement can lead
// the registration; the registration waits for it to return, so it should
// take no longer than a gossip round. It is not serialised with the other
// ShardRunner calls.
type LeaseObserver interface {
	LeaseGranted(lease clientv3.LeaseID)
}

// Agent holds one node's placement state: its session and registry entry,
// the shard locks it owns, and the reconciler that moves them toward the
// rendezvous-hashing assignment over the live set.
//
// Lifecycle: New, Start, then Shutdown (idempotent; call it after Start has
// returned, or instead of Start). Every other method is safe for concurrent
// use at any time. Lock order: cbMu (serialises host callbacks) before mu,
// liveMu before mu, and mu before the routing table's lock.
type Agent struct {
	cfg    Config
	client *clientv3.Client
	host   ShardRunner
	keys   Keys
	log    *slog.Logger
	table  *Table

	crashing atomic.Bool // Config.Faults crashed the node: no keepalive or new session from now on
	started  atomic.Bool
	kick     chan struct{}

	cbMu   sync.Mutex
	liveMu sync.Mutex // serialises SetLive

	mu         sync.Mutex
	sess       *Session
	sessCtx    context.Context
	sessCancel context.CancelFunc
	oldLease   clientv3.LeaseID // the last ended session's lease, until revoked
	owned      map[uint32]int64
	acquiring  map[uint32]bool
	releasing  map[uint32]bool
	unlocking  map[uint32]int // shards whose lock unlock is deleting (not owned any more)
	live       []string
	desired    []string      // desired[shard] over live; replaced, never mutated
	handoffs   *rate.Limiter // paces handoffs (Config.HandoffRate, HandoffBurst)
	changed    chan struct{} // closed, and replaced, when a session opens or ends (Changed)

	life       context.Context // ends when Shutdown finishes
	lifeCancel context.CancelFunc
	loopCancel context.CancelFunc
	loopDone   chan struct{}
	wg         sync.WaitGroup // session watchers
	handoffWG  sync.WaitGroup // handoffs; Add only from the loop goroutine

	shutdownOnce sync.Once
	shutdownErr  error
}

// New validates cfg and returns a node that is not yet started. client
// stays owned by the caller and must outlive the node.
func New(cfg Config, client *clientv3.Client, host ShardRunner) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if client == nil || host == nil {
		return nil, fmt.Errorf("%w: nil etcd client or host", ErrInvalidConfig)
	}
	keys, _ := NewKeys(cfg.Prefix)
	table, err := NewTable(client, cfg.Prefix, cfg.logger())
	if err != nil {
		return nil, err
	}
	table.retry = cfg.RetryBackoff
	live := []string{cfg.NodeID}
	return &Agent{
		desired:   desiredOwners(cfg.Shards, live),
		cfg:       cfg,
		client:    client,
		host:      host,
		keys:      keys,
		log:       cfg.logger().With("node", cfg.NodeID),
		table:     table,
		kick:      make(chan struct{}, 1),
		owned:     map[uint32]int64{},
		acquiring: map[uint32]bool{},
		releasing: map[uint32]bool{},
		unlocking: map[uint32]int{},
		live:      live,
		handoffs:  rate.NewLimiter(rate.Limit(cfg.HandoffRate), cfg.HandoffBurst),
		changed:   make(chan struct{}),
		loopDone:  make(chan struct{}),
	}, nil
}

// Start checks the cluster's shard count, opens the session, registers the
// node, loads the routing table and starts the reconciler. A node ID still
// registered by a previous session (a crashed process's, whose lease has
// not ended) makes it wait for that lease to end; ctx bounds the start,
// and the wait: when ctx ends first, Start fails with ErrNodeIDInUse. On
// an error everything started so far is undone.
func (n *Agent) Start(ctx context.Context) (err error) {
	if !n.started.CompareAndSwap(false, true) {
		return ErrStarted
	}
	n.life, n.lifeCancel = context.WithCancel(context.WithoutCancel(ctx))
	loopCtx, loopCancel := context.WithCancel(n.life)
	n.loopCancel = loopCancel
	defer func() {
		if err != nil {
			_ = n.stop(ctx, failedStart)
			n.shutdownOnce.Do(func() {})
		}
	}()
	if err := EnsureShardCount(ctx, n.client, n.keys, n.cfg.Shards); err != nil {
		return err
	}
	if err := n.openFirstSession(ctx); err != nil {
		return err
	}
	if err := n.table.start(ctx, loopCtx); err != nil {
		return err
	}
	go n.loop(loopCtx)
	if n.cfg.Faults != nil {
		if crashed := n.cfg.Faults.Crashed(); crashed != nil {
			go n.watchCrash(crashed)
		}
	}
	n.poke()
	return nil
}

// Shutdown stops the reconciler, drains every owned shard through
// ShardRunner.Release, reports the shards whose Release failed through ShardRunner.Lost,
// and revokes the lease, which deletes the node's registry entry and every
// shard key it holds in one step. ctx bounds the graceful part; when it
// ends, remaining work is abandoned and the lease is still revoked (best
// effort). Idempotent: later calls return the first call's result. After
// Config.Faults crashed the node, Shutdown stops it as the crash does
// (see Faults.Crashed), or waits for that stop, and returns nil.
func (n *Agent) Shutdown(ctx context.Context) error {
	n.shutdownOnce.Do(func() { n.shutdownErr = n.shutdown(ctx) })
	return n.shutdownErr
}

func (n *Agent) shutdown(ctx context.Context) error {
	if !n.started.Load() {
		n.started.Store(true) // a later Start fails
		return nil
	}
	if n.crashed() {
		return n.stop(ctx, crash)
	}
	return n.stop(ctx, graceful)
}

// teardown is how a node stops.
type teardown int

const (
	failedStart teardown = iota // Start failed: nothing was served; the lease is revoked
	graceful                    // Shutdown: shards drained through the host, the lease revoked
	crash                       // Faults.Crashed: no host callback; the lease is left to expire
)

// stop is the one teardown of a started node: the reconciler and the
// routing table stop, handoffs end, the shards are drained (graceful) or
// let go, the session ends (its lease revoked, or left to expire in a
// crash), and the session watchers return. ctx bounds the graceful part.
func (n *Agent) stop(ctx context.Context, how teardown) error {
	if how == crash {
		n.crashing.Store(true) // no keepalive or new session from now on
	}
	n.loopCancel()
	if how == failedStart {
		close(n.loopDone) // the loop never started
	}
	<-n.loopDone
	n.table.Close()
	if how == crash {
		n.mu.Lock()
		n.owned = map[uint32]int64{}
		if n.sessCancel != nil {
			n.sessCancel()
		}
		n.mu.Unlock()
	}
	n.awaitHandoffs(ctx)

	var failed []uint32
	if how == graceful {
		failed = n.releaseOwned(ctx)
	}
	n.mu.Lock()
	s, old := n.sess, n.oldLease
	n.sess, n.owned = nil, map[uint32]int64{}
	if s != nil {
		n.signalLocked()
	}
	n.mu.Unlock()

	var err error
	if how == crash {
		if s != nil {
			s.Close() // stops the keepalive loop; the lease stays until it expires
		}
	} else {
		err = n.revokeLeases(ctx, s, old)
	}
	n.lifeCancel()
	n.wg.Wait()
	if len(failed) > 0 {
		err = errors.Join(err, fmt.Errorf("placement: %d shards failed to drain and were dropped", len(failed)))
	}
	return err
}

// awaitHandoffs lets in-flight handoffs finish, unless ctx ends first:
// then the session's context is cancelled, which ends them.
func (n *Agent) awaitHandoffs(ctx context.Context) {
	handoffs := make(chan struct{})
	go func() {
		n.handoffWG.Wait()
		close(handoffs)
	}()
	select {
	case <-handoffs:
	case <-ctx.Done():
		n.mu.Lock()
		if n.sessCancel != nil {
			n.sessCancel()
		}
		n.mu.Unlock()
		<-handoffs
	}
}

// releaseOwned drains every owned shard through ShardRunner.Release, reports the
// shards whose Release failed through ShardRunner.Lost, and returns them.
func (n *Agent) releaseOwned(ctx context.Context) []uint32 {
	n.cbMu.Lock()
	defer n.cbMu.Unlock()
	n.mu.Lock()
	owned := n.owned
	n.mu.Unlock()
	var failed []uint32
	var fmu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, n.cfg.AcquireConcurrency)
	for shard, epoch := range owned {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := n.host.Release(ctx, shard, epoch); err != nil {
				fmu.Lock()
				failed = append(failed, shard)
				fmu.Unlock()
			}
		}()
	}
	wg.Wait()
	n.mu.Lock()
	n.owned = map[uint32]int64{}
	n.mu.Unlock()
	if len(failed) > 0 {
		slices.Sort(failed)
		n.host.Lost(failed)
	}
	return failed
}

// revokeLeases revokes the session's lease, which deletes the node's
// registry entry and every shard key it holds in one step, and the last
// ended session's lease if it is not revoked yet (it may still be alive
// in etcd if only the local deadline passed). Best effort: bounded by the
// request timeout even when ctx has ended.
func (n *Agent) revokeLeases(ctx context.Context, s *Session, old clientv3.LeaseID) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), n.cfg.RequestTimeout)
	defer cancel()
	var err error
	if s != nil {
		err = s.Revoke(rctx)
	}
	if old != 0 {
		if _, rerr := n.client.Revoke(rctx, old); rerr != nil && !isLeaseNotFound(rerr) {
			err = errors.Join(err, fmt.Errorf("placement: revoke lease %x: %w", int64(old), rerr))
		}
	}
	return err
}

// ID returns the node ID.
func (n *Agent) ID() string { return n.cfg.NodeID }

// Table returns the node's routing table (read-only use).
func (n *Agent) Table() *Table { return n.table }

// Valid reports whether the node holds a session whose validity deadline
// has not passed. The host must not let a reply out unless it is true.
func (n *Agent) Valid() bool {
	n.mu.Lock()
	s := n.sess
	n.mu.Unlock()
	return s != nil && s.Valid()
}

// Changed returns a channel that is closed the next time a session opens
// or ends: Valid may then answer differently. (Valid turns false when the
// validity deadline passes, a moment before the session's end is noticed;
// Changed reports that end.) Safe for concurrent use.
func (n *Agent) Changed() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.changed
}

// signalLocked closes the channel Changed returned and makes a new one.
// n.mu is held.
func (n *Agent) signalLocked() {
	close(n.changed)
	n.changed = make(chan struct{})
}

// Deadline returns the current session's validity deadline, or the zero
// time without a session.
func (n *Agent) Deadline() time.Time {
	n.mu.Lock()
	s := n.sess
	n.mu.Unlock()
	if s == nil {
		return time.Time{}
	}
	return s.Deadline()
}

// Lease returns the current session's lease ID, or 0 without a session.
func (n *Agent) Lease() clientv3.LeaseID {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.sess == nil {
		return 0
	}
	return n.sess.ID()
}

// Holds reports the epoch of shard when the node owns it under a session
// whose validity deadline has not passed, checked atomically: the test a
// host applies before admitting a call or letting a reply out.
func (n *Agent) Holds(shard uint32) (int64, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	epoch, ok := n.owned[shard]
	if !ok || n.sess == nil || !n.sess.Valid() {
		return 0, false
	}
	return epoch, true
}

// Owned returns a copy of the shards the node owns, with their epochs.
func (n *Agent) Owned() map[uint32]int64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make(map[uint32]int64, len(n.owned))
	for k, v := range n.owned {
		out[k] = v
	}
	return out
}

// SetLive sets the live node IDs over which desired ownership is computed
// (the cluster layer passes the members alive in memberlist and registered
// in etcd). The node itself always counts as live. The same set again
// changes nothing: the desired owners are recomputed, and the reconciler
// woken, only when the set changes.
func (n *Agent) SetLive(ids []string) {
	live := append([]string{n.cfg.NodeID}, ids...)
	slices.Sort(live)
	live = slices.Compact(live)
	n.liveMu.Lock()
	defer n.liveMu.Unlock()
	n.mu.Lock()
	same := n.desired != nil && slices.Equal(n.live, live)
	n.mu.Unlock()
	if same {
		return
	}
	desired := desiredOwners(n.cfg.Shards, live)
	n.mu.Lock()
	n.live, n.desired = live, desired
	n.mu.Unlock()
	n.poke()
}

// desiredOwners computes Desired for every shard.
func desiredOwners(shards uint32, live []string) []string {
	out := make([]string, shards)
	for s := range out {
		out[s] = Desired(uint32(s), live)
	}
	return out
}

// RevokeDead revokes lease, the lease of the registered node id that
// memberlist declared dead, when this node is the deterministic Revoker
// of id over the current live set, id is still registered under lease
// (not re-registered since under another), and the lease shows a missed
// renewal (see RevokeIfExpiring). It reports whether it revoked. The
// caller invokes it when memberlist declares id dead.
func (n *Agent) RevokeDead(ctx context.Context, id string, lease clientv3.LeaseID) (bool, error) {
	if id == n.cfg.NodeID {
		return false, nil
	}
	n.mu.Lock()
	live := append([]string{id}, n.live...)
	n.mu.Unlock()
	if Revoker(id, live) != n.cfg.NodeID {
		return false, nil
	}
	info, ok := n.table.Node(id)
	if !ok || info.Lease != int64(lease) {
		return false, nil
	}
	return RevokeIfExpiring(ctx, n.client, lease)
}

func (n *Agent) poke() {
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// openFirstSession opens the node's first session. A node restarted right
// after a crash finds its ID still registered under the crashed process's
// lease (ErrNodeIDInUse) until that lease expires or a peer revokes it; it
// waits for that, retrying with backoff, until ctx ends.
func (n *Agent) openFirstSession(ctx context.Context) error {
	wait := n.cfg.RetryBackoff
	for {
		err := n.openSession(ctx, n.cfg.RequestTimeout)
		if err == nil || !errors.Is(err, ErrNodeIDInUse) {
			return err
		}
		n.log.Info("placement: node ID still registered by a previous session; waiting for its lease to end", "err", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (gave up waiting: %v)", err, ctx.Err())
		case <-t.C:
		}
		wait = min(2*wait, time.Second)
	}
}

// openSession grants a new lease, registers the node under it (taking the
// registry entry over from the previous session's lease, which may not be
// revoked yet) and starts the session's watcher. Each etcd request is
// bounded by timeout. It does not wait for the previous lease's revocation
// (see revokeEnded): a request etcd loses, as it does a proposal forwarded
// to a leader that just died, must not hold up the new session.
func (n *Agent) openSession(ctx context.Context, timeout time.Duration) error {
	n.mu.Lock()
	prev := n.oldLease
	n.mu.Unlock()
	gctx, cancel := context.WithTimeout(ctx, timeout)
	s, err := newSession(gctx, n.client, n.cfg.LeaseTTL, n.cfg.ValidityMargin, n.cfg.keepAliveInterval(), n.suspended)
	cancel()
	if err != nil {
		return err
	}
	if o, ok := n.host.(LeaseObserver); ok {
		o.LeaseGranted(s.ID())
	}
	info := NodeInfo{ID: n.cfg.NodeID, RemoteAddr: n.cfg.RemoteAddr, GossipAddr: n.cfg.GossipAddr, Kinds: n.cfg.Kinds}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	err = Register(rctx, n.client, n.keys, info, s.ID(), prev)
	cancel()
	if err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
		_ = s.Revoke(rctx)
		cancel()
		return err
	}
	sctx, scancel := context.WithCancel(n.life)
	n.mu.Lock()
	n.sess, n.sessCtx, n.sessCancel = s, sctx, scancel
	n.signalLocked()
	n.mu.Unlock()
	n.log.Info("placement: session opened", "lease", fmt.Sprintf("%x", int64(s.ID())), "ttl", s.TTL())
	n.wg.Add(1)
	go n.watchSession(s, sctx)
	return nil
}

// revokeEnded revokes the lease of a session that ended, so that the keys
// still bound to it (shard locks; the registry entry unless a new session
// took it over) free at once instead of when etcd expires the lease. The
// lease may still be alive in etcd if only the local deadline passed.
//
// Each attempt is bounded by the session request timeout and retried
// with backoff until etcd reports the lease gone or the node stops: a
// revoke proposed just as the etcd leader dies is lost and never answered,
// and waiting the full RequestTimeout for it would keep the shards locked
// long after a new leader could have freed them. While keepalives are
// suspended (a paused process) it sends nothing.
func (n *Agent) revokeEnded(lease clientv3.LeaseID) {
	defer n.wg.Done()
	timeout := n.cfg.sessionRequestTimeout()
	backoff := n.cfg.RetryBackoff
	for {
		if n.suspended() == nil {
			rctx, cancel := context.WithTimeout(n.life, timeout)
			_, err := n.client.Revoke(rctx, lease)
			cancel()
			if err == nil || isLeaseNotFound(err) {
				n.mu.Lock()
				if n.oldLease == lease {
					n.oldLease = 0
				}
				n.mu.Unlock()
				n.poke()
				return
			}
			if n.life.Err() != nil {
				return
			}
			n.log.Debug("placement: revoke of an ended session's lease failed; retrying",
				"lease", fmt.Sprintf("%x", int64(lease)), "err", err, "retry_in", backoff)
		}
		select {
		case <-n.life.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, timeout)
	}
}

// watchSession drops every shard at once when s ends.
func (n *Agent) watchSession(s *Session, sctx context.Context) {
	defer n.wg.Done()
	select {
	case <-s.Done():
	case <-sctx.Done():
		s.Close()
		return
	}
	n.cbMu.Lock()
	n.mu.Lock()
	if n.sess != s {
		n.mu.Unlock()
		n.cbMu.Unlock()
		return
	}
	shards := make([]uint32, 0, len(n.owned))
	for sh := range n.owned {
		shards = append(shards, sh)
	}
	slices.Sort(shards)
	n.owned = map[uint32]int64{}
	n.sess = nil
	n.oldLease = s.ID()
	n.sessCancel()
	n.signalLocked()
	n.mu.Unlock()
	n.log.Warn("placement: session ended; dropping all shards", "err", s.Err(), "shards", len(shards))
	n.host.Lost(shards)
	n.cbMu.Unlock()
	n.wg.Add(1)
	go n.revokeEnded(s.ID())
	n.poke()
}
