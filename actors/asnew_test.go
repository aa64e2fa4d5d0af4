package actors_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/ordo-actors/ordo/persistence/memory"
	"github.com/ordo-actors/ordo/proto/testpb"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
)

// newKind is a counter kind that trusts its callers' AsNew hints. Its
// Reject handler gives up as if its context had ended (no answer, no
// write); its OnActivate hook, in an entity that looks new, sends Add 1
// to the plain counter "counter/outside", changing nothing itself, once
// hookArmed is set.
func newKind() *actors.KindOf[*testpb.Counter] {
	return actors.MustKind("fresh", func() *testpb.Counter { return new(testpb.Counter) },
		actors.TrustAsNew[*testpb.Counter](),
		actors.On(func(c *ctxC, m *testpb.Add) (*testpb.Value, error) {
			c.State.Value += m.Delta
			return &testpb.Value{Value: c.State.Value}, nil
		}),
		actors.OnRead(func(c *ctxC, _ *testpb.Get) (*testpb.Value, error) {
			return &testpb.Value{Value: c.State.Value}, nil
		}),
		actors.On(func(c *ctxC, _ *testpb.Reject) (*testpb.Value, error) {
			return nil, context.Canceled
		}),
		actors.On(func(c *ctxC, m *testpb.Forward) (*testpb.Value, error) {
			c.State.Forwarded = 1 // marks the entity for the hook below
			return &testpb.Value{Value: c.State.Value}, nil
		}),
		actors.OnActivate(func(c *ctxC) {
			if c.State.Value == 0 && c.State.Forwarded == 0 && hookArmed.Load() {
				c.Send(ref("outside"), &testpb.Add{Delta: 1}, "from-hook")
			}
		}),
	)
}

// hookArmed makes the fresh kind's OnActivate hook send (see newKind).
var hookArmed atomic.Bool

func freshRef(id string) actors.Ref { return actors.Ref{Kind: "fresh", ID: id} }

// logBuffer is a slog destination a test reads.
type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// asNewLog is where asNewHost's hosts log.
var asNewLog logBuffer

// asNewHost starts a host over store owning every shard at epoch, with
// the fresh and counter kinds; lost counts its lost shards.
func asNewHost(t *testing.T, store *memory.Store, epoch int64, lost *atomic.Int64) (*actors.Host, actors.HostConfig) {
	t.Helper()
	cfg := actors.DefaultLocalConfig()
	cfg.Shards = 4
	cfg.Logger = slog.New(slog.NewTextHandler(&asNewLog, nil))
	deps := actors.HostDeps{Store: store}
	if lost != nil {
		deps.ShardLost = func(uint32, int64, error) { lost.Add(1) }
	}
	host := startHost(t, cfg, deps, newKind(), newCounterKind(&guard{}, &counters{}))
	for s := range cfg.Shards {
		require.NoError(t, host.Own(s, epoch))
	}
	return host, cfg
}

// seed stores fresh/id with value v (and Forwarded set), written by a host
// at epoch 1 that is then shut down.
func seed(t *testing.T, store *memory.Store, id string, v int64) {
	t.Helper()
	seedCalls(t, store, freshRef(id), &testpb.Forward{}, &testpb.Add{Delta: v})
}

// seedCalls makes calls to r with a host at epoch 1 over store, then shuts
// it down.
func seedCalls(t *testing.T, store *memory.Store, r actors.Ref, msgs ...proto.Message) {
	t.Helper()
	cfg := actors.DefaultLocalConfig()
	cfg.Shards = 4
	cfg.Logger = testutil.Logger()
	host, err := actors.NewHost(cfg, actors.HostDeps{Store: store}, newKind(), newCounterKind(&guard{}, &counters{}))
	require.NoError(t, err)
	require.NoError(t, host.Start(context.Background()))
	for s := range cfg.Shards {
		require.NoError(t, host.Own(s, 1))
	}
	ctx := testCtx(t)
	for _, m := range msgs {
		_, err = actors.Call[*testpb.Value](ctx, host, r, m)
		require.NoError(t, err)
	}
	require.NoError(t, host.Shutdown(ctx))
}

func freshAdd(ctx context.Context, host *actors.Host, id string, delta int64, opts ...actors.CallOption) (int64, error) {
	v, err := actors.Call[*testpb.Value](ctx, host, freshRef(id), &testpb.Add{Delta: delta}, opts...)
	return v.GetValue(), err
}

func freshGet(ctx context.Context, host *actors.Host, id string) (int64, error) {
	v, err := actors.Call[*testpb.Value](ctx, host, freshRef(id), &testpb.Get{})
	return v.GetValue(), err
}

// A call marked AsNew activates its entity without a store read; its
// first write creates the record. A call without it reads.
func TestAsNewSkipsTheRead(t *testing.T) {
	store := memory.New()
	host, _ := asNewHost(t, store, 1, nil)
	ctx := testCtx(t)
	v, err := freshAdd(ctx, host, "a", 3, actors.AsNew())
	require.NoError(t, err)
	require.EqualValues(t, 3, v)
	require.Zero(t, host.Stats().Loads, "an entity activated as new must not be read")
	v, err = freshAdd(ctx, host, "a", 1)
	require.NoError(t, err)
	require.EqualValues(t, 4, v)
	rec, err := store.Load(ctx, "fresh", "a")
	require.NoError(t, err)
	require.NotEmpty(t, rec.Data)

	_, err = freshAdd(ctx, host, "b", 1)
	require.NoError(t, err)
	require.EqualValues(t, 1, host.Stats().Loads, "without the hint an activation reads")
	// A read is never presumed: it reads too.
	_, err = actors.Call[*testpb.Value](ctx, host, freshRef("c"), &testpb.Get{}, actors.AsNew())
	require.NoError(t, err)
	require.EqualValues(t, 2, host.Stats().Loads)
}

// A kind that does not trust the hint reads the store, and a stored
// entity keeps its state.
func TestAsNewIgnoredByOtherKinds(t *testing.T) {
	store := memory.New()
	seedCalls(t, store, ref("plain"), &testpb.Add{Delta: 5})
	host, _ := asNewHost(t, store, 2, nil)
	ctx := testCtx(t)
	v, err := actors.Call[*testpb.Value](ctx, host, ref("plain"), &testpb.Add{Delta: 1}, actors.AsNew())
	require.NoError(t, err)
	require.EqualValues(t, 6, v.GetValue())
	require.EqualValues(t, 1, host.Stats().Loads)
}

// A wrong hint loses nothing: the creation is refused, the shard
// restarts, the call fails retryably, and a retry without the hint sees
// the stored state.
func TestAsNewOnStoredEntityLosesNothing(t *testing.T) {
	store := memory.New()
	seed(t, store, "x", 5)
	var lost atomic.Int64
	host, cfg := asNewHost(t, store, 2, &lost)
	ctx := testCtx(t)
	_, err := freshAdd(ctx, host, "x", 1, actors.AsNew())
	require.Error(t, err)
	require.True(t, actors.Retryable(err), "got %v", err)
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if lost.Load() != 1 {
			return errorf("OnShardLost called %d times", lost.Load())
		}
		return nil
	})
	rec, err := store.Load(ctx, "fresh", "x")
	require.NoError(t, err)
	require.EqualValues(t, 1, rec.Epoch, "the refused creation must not be stored")
	require.GreaterOrEqual(t, host.Stats().Batch.Failed, uint64(1))
	require.Contains(t, asNewLog.String(), `entity=fresh/x caller=process`, "the warning names the entity and the caller whose hint was wrong")

	shard := actors.ShardOf(freshRef("x"), cfg.Shards)
	require.NoError(t, host.Own(shard, 3))
	v, err := freshAdd(ctx, host, "x", 1)
	require.NoError(t, err)
	require.EqualValues(t, 6, v)
}

// An entity activated as new that has written nothing does not answer a
// read from its assumed state: the read loads the store first.
func TestAsNewReadBeforeAnyWriteReadsTheStore(t *testing.T) {
	store := memory.New()
	seed(t, store, "y", 5)
	var lost atomic.Int64
	host, _ := asNewHost(t, store, 2, &lost)
	ctx := testCtx(t)
	_, err := actors.Call[*testpb.Value](ctx, host, freshRef("y"), &testpb.Reject{}, actors.AsNew())
	require.ErrorIs(t, err, actors.ErrUnavailable) // gave up: nothing written
	require.Zero(t, host.Stats().Loads)
	v, err := freshGet(ctx, host, "y")
	require.NoError(t, err)
	require.EqualValues(t, 5, v)
	require.EqualValues(t, 1, host.Stats().Loads)
	v, err = freshAdd(ctx, host, "y", 1)
	require.NoError(t, err)
	require.EqualValues(t, 6, v)
	require.Zero(t, lost.Load())
}

// A run of an entity activated as new that changes nothing but sends a
// message (its OnActivate hook) writes its record all the same, and the
// message leaves only once that creation is durable: for a stored entity
// it never leaves.
func TestAsNewMessagesWaitForTheCreation(t *testing.T) {
	store := memory.New()
	seed(t, store, "hook", 5)
	var lost atomic.Int64
	host, cfg := asNewHost(t, store, 2, &lost)
	ctx := testCtx(t)
	hookArmed.Store(true)
	t.Cleanup(func() { hookArmed.Store(false) })
	_, err := freshAdd(ctx, host, "hook", 1, actors.AsNew())
	require.Error(t, err)
	require.True(t, actors.Retryable(err), "got %v", err)
	shard := actors.ShardOf(freshRef("hook"), cfg.Shards)
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if _, owned := host.Owned()[shard]; owned {
			return errorf("shard %d still owned", shard)
		}
		return nil
	})
	require.NoError(t, host.Own(shard, 3))
	v, err := freshAdd(ctx, host, "hook", 1)
	require.NoError(t, err)
	require.EqualValues(t, 6, v)
	out, err := actors.Call[*testpb.Value](ctx, host, ref("outside"), &testpb.Get{})
	require.NoError(t, err)
	require.Zero(t, out.GetValue(), "a message of the refused activation was delivered")

	// A new entity's hook message does leave, after its creation.
	_, err = freshAdd(ctx, host, "hook2", 1, actors.AsNew())
	require.NoError(t, err)
	rec, err := store.Load(ctx, "fresh", "hook2")
	require.NoError(t, err)
	require.NotEmpty(t, rec.Data)
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		out, err := actors.Call[*testpb.Value](ctx, host, ref("outside"), &testpb.Get{})
		if err != nil || out.GetValue() != 1 {
			return errorf("outside = %d, %v; want 1", out.GetValue(), err)
		}
		return nil
	})
}

// ForRetry drops the hint in a copy, leaving the first attempt's envelope
// as it was.
func TestForRetryDropsTheHint(t *testing.T) {
	env, err := actors.Envelope(freshRef("r"), &testpb.Add{Delta: 1}, "id")
	require.NoError(t, err)
	require.Same(t, env, actors.ForRetry(env), "an envelope without the hint is sent as it is")
	env.NewEntity = true
	retry := actors.ForRetry(env)
	require.NotSame(t, env, retry)
	require.False(t, retry.GetNewEntity())
	require.True(t, env.GetNewEntity(), "the first attempt's envelope must not change")
	require.Equal(t, env.GetRequestId(), retry.GetRequestId())
}

// TrustAsNew is refused on an event-sourced kind.
func TestTrustAsNewStateBasedOnly(t *testing.T) {
	_, err := actors.NewKind("es", func() *testpb.Ledger { return new(testpb.Ledger) },
		actors.TrustAsNew[*testpb.Ledger](),
		actors.EventSourced(actors.EventSourcing[*testpb.Ledger]{
			Events: []proto.Message{&testpb.Added{}},
			Apply: func(s *testpb.Ledger, e proto.Message) error {
				s.Balance += e.(*testpb.Added).GetDelta()
				return nil
			},
		}),
	)
	require.ErrorContains(t, err, "state-based kinds only")
}
