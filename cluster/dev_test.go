package cluster_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/cluster"
	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/ordo-actors/ordo/persistence/memory"
	"github.com/ordo-actors/ordo/proto/ordopb"
	"github.com/ordo-actors/ordo/proto/testpb"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
)

// relayKind forwards an Add to a counter (Forward.To) and answers, through
// a deferred reply, with the counter's answer.
var relayKind = actors.MustKind("relay", func() *testpb.Counter { return new(testpb.Counter) },
	actors.On(func(c *counterCtx, m *testpb.Forward) (*testpb.Value, error) {
		c.Defer("forwarded")
		c.State.Forwarded = 1
		actors.Request(c, counter(m.To), &testpb.Add{Delta: m.Delta}, m.RequestId,
			func(c *counterCtx, v *testpb.Value, err error) {
				if err == nil {
					c.State.Forwarded = 2
				}
				c.Resolve("forwarded", v, err)
			})
		return nil, nil
	}))

func startDev(t *testing.T, cfg cluster.DevConfig) *cluster.Dev {
	t.Helper()
	if cfg.Kinds == nil {
		cfg.Kinds = []actors.Kind{counterKind, relayKind}
	}
	if cfg.Logger == nil {
		cfg.Logger = testutil.Logger()
	}
	d, err := cluster.NewDev(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, d.Close(ctx))
	})
	return d
}

// stored returns the durable state of an entity of d's memory store.
func stored(t *testing.T, d *cluster.Dev, ref actors.Ref) *testpb.Counter {
	t.Helper()
	rec, err := d.Store().Load(t.Context(), ref.Kind, ref.ID)
	require.NoError(t, err)
	var er ordopb.EntityRecord
	require.NoError(t, proto.Unmarshal(rec.Data, &er))
	var c testpb.Counter
	require.NoError(t, proto.Unmarshal(er.State, &c))
	return &c
}

func TestDevCallsAndDedup(t *testing.T) {
	d := startDev(t, cluster.DevConfig{})
	ctx := testCtx(t)
	for i := 0; i < 2; i++ {
		v, err := cluster.Call[*testpb.Value](ctx, d, counter("c1"), &testpb.Add{Delta: 5}, actors.WithRequestID("req-1"))
		require.NoError(t, err)
		require.EqualValues(t, 5, v.Value, "a retry with the same request ID is applied once")
	}
	v, err := actors.Call[*testpb.Value](ctx, d, counter("c1"), &testpb.Add{Delta: 1})
	require.NoError(t, err)
	require.EqualValues(t, 6, v.Value)
	require.EqualValues(t, 6, stored(t, d, counter("c1")).Value, "the reply left after its write was durable")
	_, err = cluster.Call[*testpb.Value](ctx, d, actors.Ref{Kind: "nope", ID: "x"}, &testpb.Get{})
	require.ErrorIs(t, err, actors.ErrUnknownKind)
}

// A reply waits for its write: while the store holds every Save, the
// caller gets nothing; once released, the reply and the durable state
// agree.
func TestDevOutputGate(t *testing.T) {
	d := startDev(t, cluster.DevConfig{})
	st := d.Store().(*memory.Store)
	ctx := testCtx(t)
	release := st.BlockSaves()
	defer release()
	saves0, _ := st.Stats()
	done := make(chan error, 1)
	go func() {
		_, err := cluster.Call[*testpb.Value](ctx, d, counter("gated"), &testpb.Add{Delta: 7})
		done <- err
	}()
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if saves, _ := st.Stats(); saves == saves0 {
			return errors.New("no Save started yet")
		}
		return nil
	})
	select {
	case err := <-done:
		t.Fatalf("the call returned (%v) before its write was durable", err)
	default:
	}
	release()
	require.NoError(t, <-done)
	require.EqualValues(t, 7, stored(t, d, counter("gated")).Value)
}

// Entities of a dev node call each other (Request and a deferred reply),
// to an entity of another shard and to a co-located one.
func TestDevEntityToEntity(t *testing.T) {
	d := startDev(t, cluster.DevConfig{})
	ctx := testCtx(t)
	far := relayKind.Ref("r-far")
	require.NotEqual(t, actors.ShardOf(far, 256), actors.ShardOf(counter("target"), 256))
	near, err := actors.Colocated("relay", counter("target"), "r-near")
	require.NoError(t, err)
	for i, from := range []actors.Ref{far, near} {
		v, err := cluster.Call[*testpb.Value](ctx, d, from, &testpb.Forward{To: "target", Delta: 10, RequestId: from.ID})
		require.NoError(t, err, from)
		require.EqualValues(t, 10*(i+1), v.Value, from)
		require.EqualValues(t, 2, stored(t, d, from).Forwarded, from)
	}
	require.EqualValues(t, 20, stored(t, d, counter("target")).Value)
}

// A write whose outcome is unknown drops its shard; the dev node serves it
// again at the next epoch, and the caller's retry (same request ID) gets
// the answer of the write that did land: applied once.
func TestDevUnknownOutcomeServesShardAgain(t *testing.T) {
	d := startDev(t, cluster.DevConfig{})
	st := d.Store().(*memory.Store)
	ctx := testCtx(t)
	_, err := cluster.Call[*testpb.Value](ctx, d, counter("u"), &testpb.Add{Delta: 1}) // activate
	require.NoError(t, err)
	shard := actors.ShardOf(counter("u"), 256)
	require.Equal(t, cluster.DevEpoch, st.FenceOf(shard))
	st.LoseNextAcks(1, nil)
	v, err := cluster.Call[*testpb.Value](ctx, d, counter("u"), &testpb.Add{Delta: 5})
	require.NoError(t, err)
	require.EqualValues(t, 6, v.Value)
	require.Equal(t, cluster.DevEpoch+1, st.FenceOf(shard))
	require.Equal(t, cluster.DevEpoch+1, d.Owned()[shard])
	g, err := cluster.Call[*testpb.Value](ctx, d, counter("u"), &testpb.Get{})
	require.NoError(t, err)
	require.EqualValues(t, 6, g.Value)
}

// A shard fenced by another writer of the store is not served again (the
// dev node does not fight over it): calls to it retry until their context
// ends; other shards are unaffected.
func TestDevFencedShardIsGivenUp(t *testing.T) {
	d := startDev(t, cluster.DevConfig{Shards: 4})
	st := d.Store().(*memory.Store)
	ctx := testCtx(t)
	ref := counter("f")
	shard := actors.ShardOf(ref, 4)
	require.NoError(t, st.Fence(ctx, shard, 100))
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	_, err := cluster.Call[*testpb.Value](short, d, ref, &testpb.Add{Delta: 1})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	_, held := d.Owned()[shard]
	require.False(t, held)
	require.EqualValues(t, 100, st.FenceOf(shard))
	for i := 0; ; i++ {
		other := counter(string(rune('a' + i)))
		if actors.ShardOf(other, 4) != shard {
			_, err := cluster.Call[*testpb.Value](ctx, d, other, &testpb.Add{Delta: 1})
			require.NoError(t, err)
			break
		}
	}
}

func TestDevClose(t *testing.T) {
	d, err := cluster.NewDev(t.Context(), cluster.DevConfig{Kinds: []actors.Kind{counterKind}, Logger: testutil.Logger()})
	require.NoError(t, err)
	ctx := testCtx(t)
	_, err = cluster.Call[*testpb.Value](ctx, d, counter("x"), &testpb.Add{Delta: 1})
	require.NoError(t, err)
	require.NoError(t, d.Close(ctx))
	require.NoError(t, d.Close(ctx), "Close is idempotent")
	_, err = cluster.Call[*testpb.Value](ctx, d, counter("x"), &testpb.Get{})
	require.ErrorIs(t, err, cluster.ErrClosed)
}

func TestNewDevInvalid(t *testing.T) {
	_, err := cluster.NewDev(t.Context(), cluster.DevConfig{})
	require.ErrorContains(t, err, "no kinds")
	bad := actors.DefaultLocalConfig()
	bad.DedupWindow = -1
	_, err = cluster.NewDev(t.Context(), cluster.DevConfig{Kinds: []actors.Kind{counterKind}, Host: bad})
	require.ErrorContains(t, err, "DedupWindow")
	_, err = cluster.NewDev(t.Context(), cluster.DevConfig{Kinds: []actors.Kind{counterKind, counterKind}})
	require.ErrorContains(t, err, "twice")
	_, err = cluster.NewDev(t.Context(), cluster.DevConfig{Kinds: []actors.Kind{counterKind},
		Retry: cluster.RetryPolicy{Base: time.Second, Max: time.Millisecond, AttemptTimeout: time.Second}})
	require.ErrorContains(t, err, "retry policy")
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
