package testsvcpb_test

// Tests of the typed client, server and requester that protoc-gen-ordo
// generated for CounterService (its messages are in testpb), against a
// real actors.Host over the in-memory store.

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/ordo-actors/ordo/persistence"
	"github.com/ordo-actors/ordo/persistence/memory"
	"github.com/ordo-actors/ordo/proto/ordopb"
	"github.com/ordo-actors/ordo/proto/testpb"
	"github.com/ordo-actors/ordo/proto/testsvcpb"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type counterCtx = actors.Context[*testpb.Counter]

// counters is a CounterService server for the state *testpb.Counter.
type counters struct{}

// The generated types fix every request and reply type at compile time:
// these assignments compile only with the exact signatures.
var (
	_ testsvcpb.CounterServiceServer[*testpb.Counter] = counters{}

	_ func(context.Context, string, *testpb.Add, ...actors.CallOption) (*testpb.Value, error) = testsvcpb.CounterServiceClient{}.Add
	_ func(context.Context, string, *testpb.Get, ...actors.CallOption) (*testpb.Value, error) = testsvcpb.CounterServiceClient{}.Get

	_ func(*counterCtx, string, *testpb.Add, string, func(*counterCtx, *testpb.Value, error)) = testsvcpb.CounterServiceRequester[*testpb.Counter]{}.Add
)

func (counters) Add(c *counterCtx, m *testpb.Add) (*testpb.Value, error) {
	c.State.Value += m.Delta
	return &testpb.Value{Value: c.State.Value}, nil
}

func (counters) Get(c *counterCtx, _ *testpb.Get) (*testpb.Value, error) {
	return &testpb.Value{Value: c.State.Value}, nil
}

func (counters) Reject(c *counterCtx, m *testpb.Reject) (*testpb.Value, error) {
	c.State.Value += 1000 // rolled back: the handler fails
	return nil, actors.HandlerError(m.Code, "rejected on purpose")
}

// Forward adds to another counter through the generated requester and
// records the outcome when the reply comes back.
func (counters) Forward(c *counterCtx, m *testpb.Forward) (*testpb.Value, error) {
	c.State.Forwarded = 1
	testsvcpb.CounterServiceRequester[*testpb.Counter]{}.Add(c, m.To, &testpb.Add{Delta: m.Delta}, m.RequestId,
		func(c *counterCtx, v *testpb.Value, err error) {
			if err != nil {
				c.State.Forwarded = -1
				return
			}
			c.State.Forwarded = 2
		})
	return &testpb.Value{Value: c.State.Value}, nil
}

// startHost runs the counter kind on a host owning every shard at epoch 1.
func startHost(t *testing.T) (*actors.Host, *memory.Store) {
	t.Helper()
	kind, err := testsvcpb.NewCounterServiceKind(func() *testpb.Counter { return new(testpb.Counter) }, counters{})
	require.NoError(t, err)
	require.Equal(t, testsvcpb.CounterServiceKindName, kind.Name())
	cfg := actors.DefaultLocalConfig()
	cfg.Shards = 4
	cfg.Logger = testutil.Logger()
	store := memory.New()
	host, err := actors.NewHost(cfg, actors.HostDeps{Store: store}, kind)
	require.NoError(t, err)
	require.NoError(t, host.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, host.Shutdown(ctx))
		store.Close()
	})
	for s := uint32(0); s < uint32(cfg.Shards); s++ {
		require.NoError(t, host.Own(s, 1))
	}
	return host, store
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// stored returns a counter's durable state and the record's sequence
// number (zero values when never written).
func stored(t *testing.T, store *memory.Store, id string) (*testpb.Counter, uint64) {
	t.Helper()
	rec, err := store.Load(context.Background(), testsvcpb.CounterServiceKindName, id)
	if errors.Is(err, persistence.ErrNotFound) {
		return new(testpb.Counter), 0
	}
	require.NoError(t, err)
	var er ordopb.EntityRecord
	require.NoError(t, proto.Unmarshal(rec.Data, &er))
	var c testpb.Counter
	require.NoError(t, proto.Unmarshal(er.State, &c))
	return &c, er.Seq
}

func TestClientCallsWriteAndReadHandlers(t *testing.T) {
	host, store := startHost(t)
	ctx := testCtx(t)
	counter := testsvcpb.NewCounterServiceClient(host)

	// Add is a write handler: durable before it answers, applied once per
	// request ID.
	for i := 0; i < 2; i++ {
		v, err := counter.Add(ctx, "c1", &testpb.Add{Delta: 5}, actors.WithRequestID("add-1"))
		require.NoError(t, err)
		require.EqualValues(t, 5, v.Value)
	}
	state, seq := stored(t, store, "c1")
	require.EqualValues(t, 5, state.Value)
	require.NotZero(t, seq)

	// Get is a read handler: it answers and writes nothing.
	v, err := counter.Get(ctx, "c1", &testpb.Get{})
	require.NoError(t, err)
	require.EqualValues(t, 5, v.Value)
	_, after := stored(t, store, "c1")
	require.Equal(t, seq, after, "a read handler wrote")

	// A handler's error keeps its code; its state changes are rolled back.
	_, err = counter.Reject(ctx, "c1", &testpb.Reject{Code: "nope"})
	require.ErrorIs(t, err, actors.ErrHandler)
	var ae *actors.Error
	require.ErrorAs(t, err, &ae)
	require.Equal(t, "nope", ae.HandlerCode)
	v, err = counter.Get(ctx, "c1", &testpb.Get{})
	require.NoError(t, err)
	require.EqualValues(t, 5, v.Value)

	// An invalid ID fails like actors.Call does.
	_, err = counter.Get(ctx, "", &testpb.Get{})
	require.ErrorIs(t, err, actors.ErrBadRequest)
}

// A co-located entity is an entity of the kind whose ID carries its
// placement: the client calls it by that ID.
func TestClientCallsColocatedEntity(t *testing.T) {
	host, store := startHost(t)
	ctx := testCtx(t)
	counter := testsvcpb.NewCounterServiceClient(host)
	base := actors.Ref{Kind: testsvcpb.CounterServiceKindName, ID: "base"}
	side, err := actors.Colocated(testsvcpb.CounterServiceKindName, base, "side")
	require.NoError(t, err)
	require.Equal(t, actors.ShardOf(base, 4), actors.ShardOf(side, 4))

	v, err := counter.Add(ctx, side.ID, &testpb.Add{Delta: 3})
	require.NoError(t, err)
	require.EqualValues(t, 3, v.Value)
	state, _ := stored(t, store, side.ID)
	require.EqualValues(t, 3, state.Value)
}

// The requester sends a typed request from inside an entity; its
// continuation runs on the sender with the typed reply.
func TestRequesterRunsContinuation(t *testing.T) {
	host, store := startHost(t)
	ctx := testCtx(t)
	counter := testsvcpb.NewCounterServiceClient(host)
	beside, err := actors.Colocated(testsvcpb.CounterServiceKindName, actors.Ref{Kind: testsvcpb.CounterServiceKindName, ID: "s2"}, "t")
	require.NoError(t, err)
	for _, c := range []struct{ source, to string }{
		{"s1", "target"},  // any shard
		{"s2", beside.ID}, // the sender's own shard: handed over in memory
	} {
		_, err := counter.Forward(ctx, c.source, &testpb.Forward{To: c.to, Delta: 7, RequestId: "fwd-" + c.source})
		require.NoError(t, err)
		testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
			if s, _ := stored(t, store, c.source); s.Forwarded != 2 {
				return fmt.Errorf("%s: forwarded %d, want 2", c.source, s.Forwarded)
			}
			return nil
		})
		v, err := counter.Get(ctx, c.to, &testpb.Get{})
		require.NoError(t, err)
		require.EqualValues(t, 7, v.Value, c.to)
	}
}

func TestNewKindRefusesNilServer(t *testing.T) {
	_, err := testsvcpb.NewCounterServiceKind[*testpb.Counter](func() *testpb.Counter { return new(testpb.Counter) }, nil)
	require.ErrorContains(t, err, "nil CounterServiceServer")
	_, err = testsvcpb.NewCounterServiceKind(func() *testpb.Counter { return new(testpb.Counter) }, counters{},
		actors.OnActivate(func(*counterCtx) {}), actors.OnActivate(func(*counterCtx) {}))
	require.ErrorContains(t, err, "two OnActivate hooks")
	require.Panics(t, func() {
		testsvcpb.MustCounterServiceKind[*testpb.Counter](func() *testpb.Counter { return new(testpb.Counter) }, nil)
	})
}
