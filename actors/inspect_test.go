package actors_test

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
	"github.com/ordo-actors/ordo/proto/testpb"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
)

func TestInspection(t *testing.T) {
	h := newHarness(t, nil)
	ctx := testCtx(t)
	require.Equal(t, []string{"counter"}, h.host.KindNames())

	for _, id := range []string{"a", "b", "c"} {
		_, err := h.add(ctx, id, 2)
		require.NoError(t, err)
	}
	_, err := h.add(ctx, "a", 3)
	require.NoError(t, err)

	shard := actors.ShardOf(ref("a"), h.cfg.Shards)
	require.Contains(t, h.host.ActiveIn(shard), ref("a"))
	require.True(t, h.host.IsActive(ref("a")))
	require.False(t, h.host.IsActive(ref("never")))
	total := 0
	for s, n := range h.host.ActivePerShard() {
		require.Len(t, h.host.ActiveIn(s), n)
		total += n
	}
	require.Equal(t, 3, total)

	rec, err := h.host.LoadRecord(ctx, ref("a"))
	require.NoError(t, err)
	require.True(t, rec.Found)
	require.Equal(t, shard, rec.Shard)
	require.Equal(t, int64(1), rec.Epoch)
	require.Equal(t, uint64(2), rec.Seq)
	require.Equal(t, 2, rec.Recent, "one dedup entry per request")
	require.Positive(t, rec.Size)
	require.Equal(t, proto.Size(rec.State), rec.StateSize)
	require.True(t, proto.Equal(&testpb.Counter{Value: 5}, rec.State), "state %v", rec.State)

	rec, err = h.host.LoadRecord(ctx, ref("never"))
	require.NoError(t, err)
	require.False(t, rec.Found)
	require.True(t, proto.Equal(&testpb.Counter{}, rec.State))

	_, err = h.host.LoadRecord(ctx, actors.Ref{Kind: "nokind", ID: "x"})
	require.ErrorIs(t, err, actors.ErrUnknownKind)
	_, err = h.host.LoadRecord(ctx, actors.Ref{Kind: "counter", ID: ""})
	require.ErrorIs(t, err, actors.ErrBadRequest)

	h.host.Drop(shard, errors.New("gone"))
	require.Nil(t, h.host.ActiveIn(shard))
	require.False(t, h.host.IsActive(ref("a")))
	require.NoError(t, h.store.Close())
	_, err = h.host.LoadRecord(context.Background(), ref("a"))
	require.Error(t, err)
}

// Runtime shows a write held in flight: the entity's seq ahead of its
// durable one, its reply held, the batcher sending it and a newer write of
// the entity queued behind it; once the Save goes through, nothing waits.
func TestRuntime(t *testing.T) {
	store := &hookedStore{Store: memory.New()}
	h := newHarness(t, func(c *actors.HostConfig, d *actors.HostDeps) { d.Store = store })
	ctx := testCtx(t)
	_, err := h.add(ctx, "a", 1)
	require.NoError(t, err)

	entered, gate := make(chan struct{}, 8), make(chan struct{})
	hook := func([]persistence.Record) { entered <- struct{}{}; <-gate }
	store.onSave.Store(&hook)
	errs := make(chan error, 2)
	go func() { _, err := h.add(ctx, "a", 1); errs <- err }()
	<-entered // the second write's Save is in flight
	go func() { _, err := h.add(ctx, "a", 1); errs <- err }()

	var rt actors.Runtime
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		rt, err = h.host.Runtime(ctx, ref("a"))
		if err != nil {
			return err
		}
		if rt.Actor == nil || rt.Writes == nil || rt.Actor.Seq != 3 || len(rt.Writes.Queued) != 1 {
			return fmt.Errorf("runtime %+v", rt)
		}
		return nil
	})
	require.Equal(t, actors.ShardOf(ref("a"), h.cfg.Shards), rt.Shard)
	require.Equal(t, int64(1), rt.Epoch)
	require.Equal(t, uint64(1), rt.Actor.Durable)
	require.Equal(t, 2, rt.Actor.Held, "two replies wait for their writes")
	require.Equal(t, uint64(2), rt.Actor.HeldFor)
	require.True(t, rt.Writes.Sending)
	require.Equal(t, uint64(1), rt.Writes.Durable)
	require.Equal(t, uint64(3), rt.Writes.Queued[0].Seq)

	store.onSave.Store(nil)
	close(gate)
	require.NoError(t, <-errs)
	require.NoError(t, <-errs)
	rt, err = h.host.Runtime(ctx, ref("a"))
	require.NoError(t, err)
	require.Equal(t, actors.ActorRuntime{Loaded: true, Seq: 3, Durable: 3}, *rt.Actor)
	require.Equal(t, actors.WritesRuntime{Durable: 3}, *rt.Writes)

	_, err = h.host.Runtime(ctx, ref("never"))
	require.ErrorIs(t, err, actors.ErrNotActive)
}
