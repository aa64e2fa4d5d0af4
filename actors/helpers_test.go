package actors_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/ordo-actors/ordo/persistence/memory"
	"github.com/ordo-actors/ordo/proto/ordopb"
	"github.com/ordo-actors/ordo/proto/testpb"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// guard detects overlapping handler runs of one entity.
type guard struct {
	mu       sync.Mutex
	inside   map[string]bool
	overlaps atomic.Int64
}

func (g *guard) enter(id string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.inside == nil {
		g.inside = make(map[string]bool)
	}
	if g.inside[id] {
		g.overlaps.Add(1)
	}
	g.inside[id] = true
}

func (g *guard) exit(id string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.inside[id] = false
}

// counters counts handler runs for tests that check what ran.
type counters struct {
	adds, gets, rejects, fifoViolations atomic.Int64
}

type ctxC = actors.Context[*testpb.Counter]

// newCounterKind declares the test counter kind with a fresh guard.
func newCounterKind(g *guard, n *counters) *actors.KindOf[*testpb.Counter] {
	return actors.MustKind("counter", func() *testpb.Counter { return new(testpb.Counter) },
		actors.On(func(c *ctxC, m *testpb.Add) (*testpb.Value, error) {
			g.enter(c.Ref().ID)
			defer g.exit(c.Ref().ID)
			n.adds.Add(1)
			var prev uint64
			if m.Sender != "" {
				if c.State.LastSeq == nil {
					c.State.LastSeq = make(map[string]uint64)
				}
				prev = c.State.LastSeq[m.Sender]
				if m.Seq != prev+1 {
					n.fifoViolations.Add(1)
				}
				c.State.LastSeq[m.Sender] = m.Seq
			}
			if m.Ballast > 0 {
				c.State.Ballast = make([]byte, m.Ballast)
			}
			c.State.Value += m.Delta
			return &testpb.Value{Value: c.State.Value, PrevSeq: prev}, nil
		}),
		actors.OnRead(func(c *ctxC, m *testpb.Get) (*testpb.Value, error) {
			g.enter(c.Ref().ID)
			defer g.exit(c.Ref().ID)
			n.gets.Add(1)
			return &testpb.Value{Value: c.State.Value}, nil
		}),
		actors.On(func(c *ctxC, m *testpb.Reject) (*testpb.Value, error) {
			n.rejects.Add(1)
			c.State.Value += 1000 // must be rolled back
			return nil, actors.HandlerError(m.Code, "rejected on purpose")
		}),
		actors.On(func(c *ctxC, m *testpb.Forward) (*testpb.Value, error) {
			c.State.Forwarded = 1
			to := actors.Ref{Kind: "counter", ID: m.To}
			actors.Request(c, to, &testpb.Add{Delta: m.Delta}, m.RequestId,
				func(c *ctxC, v *testpb.Value, err error) {
					if err != nil {
						c.State.Forwarded = -1
						return
					}
					c.State.Forwarded = 2
				})
			return &testpb.Value{Value: c.State.Value}, nil
		}),
	)
}

type harness struct {
	t     *testing.T
	store *memory.Store
	host  *actors.Host
	g     *guard
	n     *counters
	cfg   actors.HostConfig
}

// newHarness starts a host over a memory store owning every shard at epoch 1.
// tweak, when set, changes the host's tunables and dependencies first.
func newHarness(t testing.TB, tweak func(*actors.HostConfig, *actors.HostDeps)) *harness {
	t.Helper()
	h := &harness{store: memory.New(), g: &guard{}, n: &counters{}}
	h.cfg = actors.DefaultLocalConfig()
	h.cfg.Shards = 8
	deps := actors.HostDeps{Store: h.store}
	if tweak != nil {
		tweak(&h.cfg, &deps)
	}
	host, err := actors.NewHost(h.cfg, deps, newCounterKind(h.g, h.n))
	if err != nil {
		t.Fatal(err)
	}
	if err := host.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.host = host
	for s := range h.cfg.Shards {
		if err := host.Own(uint32(s), 1); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := host.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		h.store.Close()
	})
	if tt, ok := t.(*testing.T); ok {
		h.t = tt
	}
	return h
}

func ref(id string) actors.Ref { return actors.Ref{Kind: "counter", ID: id} }

func (h *harness) add(ctx context.Context, id string, delta int64, opts ...actors.CallOption) (*testpb.Value, error) {
	return actors.Call[*testpb.Value](ctx, h.host, ref(id), &testpb.Add{Delta: delta}, opts...)
}

func (h *harness) get(ctx context.Context, id string) (int64, error) {
	v, err := actors.Call[*testpb.Value](ctx, h.host, ref(id), &testpb.Get{})
	return v.GetValue(), err
}

// stored returns the durable value of a counter (0 when never saved).
func (h *harness) stored(id string) (int64, uint64) {
	h.t.Helper()
	rec, err := h.store.Load(context.Background(), "counter", id)
	if err != nil {
		return 0, 0
	}
	var er ordopb.EntityRecord
	if err := protoUnmarshal(rec.Data, &er); err != nil {
		h.t.Fatal(err)
	}
	var c testpb.Counter
	if err := protoUnmarshal(er.State, &c); err != nil {
		h.t.Fatal(err)
	}
	return c.Value, er.Seq
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

var errPending = errors.New("pending")

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }

// startHost starts a host with cfg, deps and kinds, stopped (and its store
// closed) at cleanup.
func startHost(t *testing.T, cfg actors.HostConfig, deps actors.HostDeps, kinds ...actors.Kind) *actors.Host {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = testutil.Logger()
	}
	host, err := actors.NewHost(cfg, deps, kinds...)
	require.NoError(t, err)
	require.NoError(t, host.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := host.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		deps.Store.Close()
	})
	return host
}

// ownAll makes host own every one of its shards at epoch 1.
func ownAll(t *testing.T, host *actors.Host, shards uint32) {
	t.Helper()
	for s := range shards {
		require.NoError(t, host.Own(uint32(s), 1))
	}
}

// testLease is an actors.Lease a test turns off and on.
type testLease struct {
	mu      sync.Mutex
	valid   bool
	changed chan struct{}
}

func newTestLease() *testLease { return &testLease{valid: true, changed: make(chan struct{})} }

func (l *testLease) Valid() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.valid
}

func (l *testLease) Changed() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.changed
}

// Store makes the lease valid or not, and signals the change.
func (l *testLease) Store(valid bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.valid = valid
	close(l.changed)
	l.changed = make(chan struct{})
}
