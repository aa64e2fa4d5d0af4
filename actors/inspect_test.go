package actors_test

import (
	"context"
	"errors"
	"testing"

	"github.com/ordo-actors/ordo/actors"
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
