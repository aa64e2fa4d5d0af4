package actors_test

import (
	"context"
	"fmt"
	"hash/fnv"
	"strings"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/ordo-actors/ordo/persistence"
	"github.com/ordo-actors/ordo/proto/ordopb"
	"github.com/ordo-actors/ordo/proto/testpb"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// storedRecord returns the durable record of a counter.
func storedRecord(t *testing.T, h *harness, id string) *ordopb.EntityRecord {
	t.Helper()
	rec, err := h.store.Load(context.Background(), "counter", id)
	require.NoError(t, err)
	var er ordopb.EntityRecord
	require.NoError(t, proto.Unmarshal(rec.Data, &er))
	return &er
}

// A record keeps its dedup entries compact (the reply without a second
// copy of the request ID, the payload's type URL without its prefix), and
// a retry answered from a reloaded record gets the whole reply back.
func TestDedupEntriesAreStoredCompact(t *testing.T) {
	h := newHarness(t, func(c *actors.HostConfig, d *actors.HostDeps) { c.IdleTimeout = 50 * time.Millisecond })
	ctx := testCtx(t)
	const id = "req-compact-1"
	v, err := h.add(ctx, "compact", 5, actors.WithRequestID(id))
	require.NoError(t, err)
	require.EqualValues(t, 5, v.Value)

	er := storedRecord(t, h, "compact")
	require.Len(t, er.Recent, 1)
	d := er.Recent[0]
	require.Equal(t, id, d.RequestId)
	require.Empty(t, d.Reply.GetRequestId(), "the reply repeats the entry's request ID")
	require.Equal(t, "ordo.test.v1.Value", d.Reply.GetPayload().GetTypeUrl())
	full := proto.Clone(d).(*ordopb.DedupEntry)
	full.Reply.RequestId = id
	full.Reply.Payload.TypeUrl = "type.googleapis.com/ordo.test.v1.Value"
	require.Equal(t, proto.Size(full)-len(id)-len("type.googleapis.com/")-2, proto.Size(d),
		"bytes saved per entry")

	// Reload from the store: the retry is answered, the handler not run.
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		if h.host.Stats().Passivations == 0 {
			return errPending
		}
		return nil
	})
	v, err = h.add(ctx, "compact", 5, actors.WithRequestID(id))
	require.NoError(t, err)
	require.EqualValues(t, 5, v.Value)
	require.EqualValues(t, 1, h.n.adds.Load())
}

// Records written with whole dedup entries (request ID twice, full type
// URL) still answer their retries.
func TestDedupEntriesStoredWholeStillAnswer(t *testing.T) {
	h := newHarness(t, nil)
	ctx := testCtx(t)
	const id = "old-1"
	payload, err := anypb.New(&testpb.Add{Delta: 5})
	require.NoError(t, err)
	hash := fnv.New64a()
	hash.Write([]byte(payload.TypeUrl))
	hash.Write([]byte{0})
	hash.Write(payload.Value)
	reply, err := anypb.New(&testpb.Value{Value: 9})
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(reply.TypeUrl, "type.googleapis.com/"))
	state, err := proto.Marshal(&testpb.Counter{Value: 9})
	require.NoError(t, err)
	data, err := proto.Marshal(&ordopb.EntityRecord{State: state, Epoch: 1, Seq: 1, Recent: []*ordopb.DedupEntry{{
		RequestId: id, Reply: &ordopb.Reply{RequestId: id, Payload: reply}, PayloadHash: hash.Sum64(),
	}}})
	require.NoError(t, err)
	r := ref("legacy")
	require.NoError(t, h.store.Fence(ctx, actors.ShardOf(r, h.cfg.Shards), 1))
	out, err := h.store.Save(ctx, []persistence.Record{{Kind: r.Kind, ID: r.ID,
		Shard: actors.ShardOf(r, h.cfg.Shards), Epoch: 1, Data: data}})
	require.NoError(t, err)
	for _, e := range out {
		require.NoError(t, e)
	}

	v, err := h.add(ctx, "legacy", 5, actors.WithRequestID(id))
	require.NoError(t, err)
	require.EqualValues(t, 9, v.Value, "the stored reply")
	require.Zero(t, h.n.adds.Load(), "the handler must not run for a retry")

	// The next write keeps the old entry, now compact.
	_, err = h.add(ctx, "legacy", 1, actors.WithRequestID("new-1"))
	require.NoError(t, err)
	er := storedRecord(t, h, "legacy")
	require.Len(t, er.Recent, 2)
	require.Empty(t, er.Recent[0].Reply.GetRequestId())
	require.Equal(t, "ordo.test.v1.Value", er.Recent[0].Reply.GetPayload().GetTypeUrl())
}

// HostStats.DedupEntries counts the entries the active entities hold: the
// window of each, and nothing of an entity that stopped.
func TestHostStatsCountDedupEntries(t *testing.T) {
	h := newHarness(t, func(c *actors.HostConfig, d *actors.HostDeps) { c.DedupWindow = 4 })
	ctx := testCtx(t)
	entries := func(want int64) {
		t.Helper()
		testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
			if got := h.host.Stats().DedupEntries; got != want {
				return fmt.Errorf("%d dedup entries, want %d", got, want)
			}
			return nil
		})
	}
	for i := range 6 {
		_, err := h.add(ctx, "a", 1, actors.WithRequestID(fmt.Sprintf("a-%d", i)))
		require.NoError(t, err)
	}
	for i := range 2 {
		_, err := h.add(ctx, "b", 1, actors.WithRequestID(fmt.Sprintf("b-%d", i)))
		require.NoError(t, err)
	}
	entries(4 + 2)

	shards := map[uint32]bool{}
	for _, id := range []string{"a", "b"} {
		shards[actors.ShardOf(ref(id), h.cfg.Shards)] = true
	}
	for s := range shards {
		require.NoError(t, h.host.Release(ctx, s, 1))
	}
	entries(0)

	// Activated again, an entity holds the window it loaded.
	for s := range shards {
		require.NoError(t, h.host.Own(s, 2))
	}
	v, err := h.add(ctx, "a", 1, actors.WithRequestID("a-5"))
	require.NoError(t, err)
	require.EqualValues(t, 6, v.Value, "the retry's stored reply")
	entries(4)
}
