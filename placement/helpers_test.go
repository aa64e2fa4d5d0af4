package placement_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/ordo-actors/ordo/etcdembed"
	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/ordo-actors/ordo/placement"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// An embedded multi-member etcd leaves one idle keep-alive HTTP
		// connection between two of its closed members' peer transports
		// (both ends in this process, neither ever times out). Placement
		// itself uses no net/http; these four functions only match that
		// connection's client and server goroutines.
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreAnyFunction("net/http.(*connReader).backgroundRead"),
		goleak.IgnoreAnyFunction("net/http.(*conn).serve"),
	)
}

func startEtcd(t testing.TB) *etcdembed.Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := etcdembed.Start(ctx, etcdembed.Config{Dir: t.TempDir(), UnsafeNoFsync: true, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return srv
}

func newClient(t testing.TB, endpoints ...string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{
		Endpoints:            endpoints,
		DialTimeout:          2 * time.Second,
		DialKeepAliveTime:    time.Second,
		DialKeepAliveTimeout: time.Second,
		Logger:               zap.NewNop(),
		// gRPC's default reconnect backoff grows to 120s: a client whose
		// only member restarts would wait that long.
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: time.Second,
		})},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func testConfig(id, prefix string) placement.Config {
	cfg := placement.DefaultLocalConfig()
	cfg.NodeID = id
	cfg.Prefix = prefix
	cfg.RemoteAddr = "127.0.0.1:1" + id
	cfg.Logger = testutil.Logger().With("node", id)
	return cfg
}

// keepalives is the placement.Faults of a test: it suspends an agent's
// keepalives while on, and never crashes it.
type keepalives struct {
	mu        sync.Mutex
	suspended chan struct{} // non-nil while suspended, closed when they resume
}

var _ placement.Faults = (*keepalives)(nil)

// withKeepalives returns cfg with a fresh keepalives as its Faults.
func withKeepalives(cfg placement.Config) (placement.Config, *keepalives) {
	k := &keepalives{}
	cfg.Faults = k
	return cfg, k
}

// suspend suspends the agent's keepalives (on) or resumes them.
func (k *keepalives) suspend(on bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	switch {
	case on && k.suspended == nil:
		k.suspended = make(chan struct{})
	case !on && k.suspended != nil:
		close(k.suspended)
		k.suspended = nil
	}
}

func (k *keepalives) KeepalivesSuspended() <-chan struct{} {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.suspended
}

func (k *keepalives) Crashed() <-chan struct{} { return nil }

// hostEvent is one host callback, ordered across all nodes by seq.
type hostEvent struct {
	seq   int
	node  string
	kind  string // "acquired", "released", "lost"
	shard uint32
	epoch int64
	at    time.Time
}

// history records host callbacks of several nodes in one total order.
type history struct {
	mu     sync.Mutex
	events []hostEvent
}

func (h *history) add(node, kind string, shard uint32, epoch int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, hostEvent{seq: len(h.events), node: node, kind: kind, shard: shard, epoch: epoch, at: time.Now()})
}

func (h *history) snapshot() []hostEvent {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.events)
}

// checkNoOverlap verifies that no shard was active on two nodes at once
// (valid only for runs without pauses or partitions).
func (h *history) checkNoOverlap() error {
	holder := map[uint32]hostEvent{}
	for _, e := range h.snapshot() {
		switch e.kind {
		case "acquired":
			if prev, ok := holder[e.shard]; ok {
				return fmt.Errorf("shard %d acquired by %s at epoch %d while active on %s at epoch %d",
					e.shard, e.node, e.epoch, prev.node, prev.epoch)
			}
			holder[e.shard] = e
		case "released", "lost":
			if prev, ok := holder[e.shard]; ok && prev.node == e.node {
				delete(holder, e.shard)
			}
		}
	}
	return nil
}

// recHost is a placement.ShardRunner that records its callbacks.
type recHost struct {
	id string
	h  *history

	mu      sync.Mutex
	active  map[uint32]int64
	losts   int
	lostAt  map[uint32]time.Time
	failRel bool
}

func newRecHost(id string, h *history) *recHost {
	return &recHost{id: id, h: h, active: map[uint32]int64{}, lostAt: map[uint32]time.Time{}}
}

func (r *recHost) Acquired(shard uint32, epoch int64) {
	r.mu.Lock()
	r.active[shard] = epoch
	r.mu.Unlock()
	r.h.add(r.id, "acquired", shard, epoch)
}

func (r *recHost) Release(ctx context.Context, shard uint32, epoch int64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failRel {
		return fmt.Errorf("release refused")
	}
	delete(r.active, shard)
	r.h.add(r.id, "released", shard, epoch)
	return nil
}

func (r *recHost) Lost(shards []uint32) {
	r.mu.Lock()
	now := time.Now()
	r.losts++
	for _, s := range shards {
		r.h.add(r.id, "lost", s, r.active[s])
		delete(r.active, s)
		r.lostAt[s] = now
	}
	r.mu.Unlock()
}

func (r *recHost) lostCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.losts
}

func (r *recHost) activeCopy() map[uint32]int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps_clone(r.active)
}

func maps_clone(m map[uint32]int64) map[uint32]int64 {
	out := make(map[uint32]int64, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// startNode creates and starts a node, shutting it down at cleanup.
func startNode(t testing.TB, cfg placement.Config, c *clientv3.Client, host placement.ShardRunner) *placement.Agent {
	t.Helper()
	n, err := placement.New(cfg, c, host)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = n.Shutdown(ctx)
	})
	return n
}

// settled reports nil when the nodes together own every shard, each by its
// desired owner over the given IDs, with no shard on two nodes.
func settled(shards uint32, nodes []*placement.Agent, live []string) error {
	owner := map[uint32]string{}
	for _, n := range nodes {
		for s := range n.Owned() {
			if o, dup := owner[s]; dup {
				return fmt.Errorf("shard %d owned by %s and %s", s, o, n.ID())
			}
			owner[s] = n.ID()
		}
	}
	for s := uint32(0); s < shards; s++ {
		want := placement.Desired(s, live)
		if owner[s] != want {
			return fmt.Errorf("shard %d owned by %q, desired %q", s, owner[s], want)
		}
	}
	return nil
}

// shardWatcher records every event on P/shards/ from revision from on, and
// checks as it goes that a put only creates a free key (never overwrites
// another owner) and that epochs of successive owners strictly increase.
type shardWatcher struct {
	mu      sync.Mutex
	errs    []error
	owners  map[string]int64 // key -> create revision
	last    map[string]int64 // key -> last epoch seen
	lastRev int64
	events  int
	deleted map[string]time.Time // key -> when its last deletion was seen
	done    chan struct{}
	cancel  context.CancelFunc
}

func watchShards(t testing.TB, c *clientv3.Client, prefix string) *shardWatcher {
	t.Helper()
	resp, err := c.Get(context.Background(), prefix+"/shards/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &shardWatcher{owners: map[string]int64{}, last: map[string]int64{}, deleted: map[string]time.Time{}, done: make(chan struct{}), cancel: cancel}
	for _, kv := range resp.Kvs {
		w.owners[string(kv.Key)] = kv.CreateRevision
		w.last[string(kv.Key)] = kv.CreateRevision
	}
	w.lastRev = resp.Header.Revision
	wch := c.Watch(ctx, prefix+"/shards/", clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
	go func() {
		defer close(w.done)
		for r := range wch {
			if err := r.Err(); err != nil {
				if ctx.Err() == nil {
					w.fail(fmt.Errorf("watch: %w", err))
				}
				return
			}
			w.mu.Lock()
			for _, ev := range r.Events {
				w.events++
				k := string(ev.Kv.Key)
				if ev.Kv.ModRevision < w.lastRev {
					w.errs = append(w.errs, fmt.Errorf("revision went back: %d after %d", ev.Kv.ModRevision, w.lastRev))
				}
				w.lastRev = ev.Kv.ModRevision
				if ev.IsCreate() {
					if _, held := w.owners[k]; held {
						w.errs = append(w.errs, fmt.Errorf("rev %d: %s created while owned", ev.Kv.ModRevision, k))
					}
					if ev.Kv.CreateRevision <= w.last[k] {
						w.errs = append(w.errs, fmt.Errorf("rev %d: %s epoch %d not above %d", ev.Kv.ModRevision, k, ev.Kv.CreateRevision, w.last[k]))
					}
					w.owners[k] = ev.Kv.CreateRevision
					w.last[k] = ev.Kv.CreateRevision
				} else if ev.Type == clientv3.EventTypePut {
					w.errs = append(w.errs, fmt.Errorf("rev %d: %s overwritten (version %d)", ev.Kv.ModRevision, k, ev.Kv.Version))
				} else {
					if _, held := w.owners[k]; !held {
						w.errs = append(w.errs, fmt.Errorf("rev %d: %s deleted while free", ev.Kv.ModRevision, k))
					}
					delete(w.owners, k)
					w.deleted[k] = time.Now()
				}
			}
			w.mu.Unlock()
		}
	}()
	t.Cleanup(w.stop)
	return w
}

func (w *shardWatcher) fail(err error) {
	w.mu.Lock()
	w.errs = append(w.errs, err)
	w.mu.Unlock()
}

func (w *shardWatcher) stop() {
	w.cancel()
	<-w.done
}

func (w *shardWatcher) check(t testing.TB) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, err := range w.errs {
		if i > 10 {
			break
		}
		t.Error(err)
	}
}

// matches reports nil when the watcher's owners equal a fresh Get.
func (w *shardWatcher) matches(c *clientv3.Client, prefix string) error {
	resp, err := c.Get(context.Background(), prefix+"/shards/", clientv3.WithPrefix())
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(resp.Kvs) != len(w.owners) {
		return fmt.Errorf("watcher has %d shard keys, etcd %d", len(w.owners), len(resp.Kvs))
	}
	for _, kv := range resp.Kvs {
		if w.owners[string(kv.Key)] != kv.CreateRevision {
			return fmt.Errorf("%s: watcher epoch %d, etcd %d", kv.Key, w.owners[string(kv.Key)], kv.CreateRevision)
		}
	}
	return nil
}

func (w *shardWatcher) deletedAt(key string) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	at, ok := w.deleted[key]
	return at, ok
}

func (w *shardWatcher) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.events
}

func ids(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("n%d", i+1)
	}
	return out
}
