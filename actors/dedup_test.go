package actors_test

import (
	"context"
	"errors"
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
	reply, err := anypb.New(&testpb.Value{Value: 9})
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(reply.TypeUrl, "type.googleapis.com/"))
	state, err := proto.Marshal(&testpb.Counter{Value: 9})
	require.NoError(t, err)
	data, err := proto.Marshal(&ordopb.EntityRecord{State: state, Epoch: 1, Seq: 1, Recent: []*ordopb.DedupEntry{{
		RequestId: id, Reply: &ordopb.Reply{RequestId: id, Payload: reply}, PayloadHash: payloadHashOf(t, &testpb.Add{Delta: 5}),
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

// payloadHashOf is the payload hash a dedup entry keeps of a request of
// m: FNV-1a 64 of its type URL, a zero byte and its bytes.
func payloadHashOf(t *testing.T, m proto.Message) uint64 {
	t.Helper()
	payload, err := anypb.New(m)
	require.NoError(t, err)
	hash := fnv.New64a()
	hash.Write([]byte(payload.TypeUrl))
	hash.Write([]byte{0})
	hash.Write(payload.Value)
	return hash.Sum64()
}

// storedDedup returns the dedup record of a counter (nil: none).
func storedDedup(t *testing.T, h *harness, id string) *ordopb.DedupRecord {
	t.Helper()
	rec, err := h.store.Load(context.Background(), "counter"+actors.DedupKindSuffix, id)
	if errors.Is(err, persistence.ErrNotFound) {
		return nil
	}
	require.NoError(t, err)
	var d ordopb.DedupRecord
	require.NoError(t, proto.Unmarshal(rec.Data, &d))
	return &d
}

// reown drops every shard of h and owns it again under epoch: every
// entity loads from the store at its next call.
func reown(t *testing.T, h *harness, epoch int64) {
	t.Helper()
	for s := range h.cfg.Shards {
		h.host.Drop(uint32(s), errors.New("test: reload"))
		require.NoError(t, h.host.Own(uint32(s), epoch))
	}
}

// A busy entity's record holds only its newest replies; the older ones of
// its dedup window are in its dedup record, rewritten with the whole
// window once the record's own part is full. After a reload every request
// of the window is still recognised, and nothing is applied twice.
func TestDedupWindowSpansTwoRecords(t *testing.T) {
	h := newHarness(t, func(c *actors.HostConfig, d *actors.HostDeps) { c.DedupWindow = 40 })
	ctx := testCtx(t)
	const n = 70
	for i := range n {
		_, err := h.add(ctx, "busy", 1, actors.WithRequestID(fmt.Sprintf("busy-%d", i)))
		require.NoError(t, err)
	}
	er := storedRecord(t, h, "busy")
	d := storedDedup(t, h, "busy")
	require.NotNil(t, d)
	// Writes 16, 32, 48 and 64 wrote the dedup record: the window then,
	// of 40 entries from busy-24 to busy-63; the record holds busy-64 on.
	require.EqualValues(t, 4, d.Generation)
	require.Equal(t, d.Generation, er.DedupGeneration)
	require.Len(t, d.Recent, 40)
	require.Equal(t, "busy-24", d.Recent[0].RequestId)
	require.Len(t, er.Recent, n-64)
	require.Equal(t, "busy-64", er.Recent[0].RequestId)
	require.EqualValues(t, 40, er.DedupLen)
	rec, err := h.host.LoadRecord(ctx, ref("busy"))
	require.NoError(t, err)
	require.Equal(t, 40, rec.Recent)

	reown(t, h, 2)
	adds := h.n.adds.Load()
	for i := n - 40; i < n; i++ {
		v, err := h.add(ctx, "busy", 1, actors.WithRequestID(fmt.Sprintf("busy-%d", i)))
		require.NoError(t, err)
		require.EqualValues(t, i+1, v.Value, "the reply to busy-%d as it was", i)
	}
	require.Equal(t, adds, h.n.adds.Load(), "a retry within the window ran the handler")
	// The one before the window is applied again (the window is 40).
	v, err := h.add(ctx, "busy", 1, actors.WithRequestID(fmt.Sprintf("busy-%d", n-41)))
	require.NoError(t, err)
	require.EqualValues(t, n+1, v.Value)
}

// A record whose dedup record is missing or of another generation does
// not load: its retries cannot be told apart from new requests.
func TestDedupRecordOfAnotherGenerationIsRefused(t *testing.T) {
	h := newHarness(t, nil)
	ctx := testCtx(t)
	for i := range 20 {
		_, err := h.add(ctx, "torn", 1, actors.WithRequestID(fmt.Sprintf("torn-%d", i)))
		require.NoError(t, err)
	}
	d := storedDedup(t, h, "torn")
	require.NotNil(t, d)
	r := ref("torn")
	shard := actors.ShardOf(r, h.cfg.Shards)
	d.Generation++
	data, err := proto.Marshal(d)
	require.NoError(t, err)
	out, err := h.store.Save(ctx, []persistence.Record{{Kind: "counter" + actors.DedupKindSuffix, ID: r.ID,
		Shard: shard, Epoch: 1, Data: data}})
	require.NoError(t, err)
	require.NoError(t, out[shard])

	reown(t, h, 2)
	_, err = h.add(ctx, "torn", 1, actors.WithRequestID("torn-0"))
	require.ErrorIs(t, err, actors.ErrInternal)
	require.ErrorContains(t, err, "generation")
}

// A record written with the whole window in it (before dedup records) is
// read as it is, and its next write that fills the record's part moves
// the window to a dedup record.
func TestDedupWindowOfOlderRecords(t *testing.T) {
	h := newHarness(t, nil)
	ctx := testCtx(t)
	r := ref("older")
	shard := actors.ShardOf(r, h.cfg.Shards)
	var recent []*ordopb.DedupEntry
	for i := range 30 {
		reply, err := anypb.New(&testpb.Value{Value: int64(i + 1)})
		require.NoError(t, err)
		id := fmt.Sprintf("older-%d", i)
		recent = append(recent, &ordopb.DedupEntry{RequestId: id, Reply: &ordopb.Reply{RequestId: id, Payload: reply},
			PayloadHash: payloadHashOf(t, &testpb.Add{Delta: 1})})
	}
	state, err := proto.Marshal(&testpb.Counter{Value: 30})
	require.NoError(t, err)
	data, err := proto.Marshal(&ordopb.EntityRecord{State: state, Epoch: 1, Seq: 30, Recent: recent})
	require.NoError(t, err)
	require.NoError(t, h.store.Fence(ctx, shard, 1))
	out, err := h.store.Save(ctx, []persistence.Record{{Kind: r.Kind, ID: r.ID, Shard: shard, Epoch: 1, Data: data}})
	require.NoError(t, err)
	require.NoError(t, out[shard])

	v, err := h.add(ctx, "older", 1, actors.WithRequestID("older-7"))
	require.NoError(t, err)
	require.EqualValues(t, 8, v.Value, "the stored reply")
	_, err = h.add(ctx, "older", 1, actors.WithRequestID("newer-0"))
	require.NoError(t, err)
	require.Zero(t, h.n.adds.Load()-1, "only the new request ran")
	d := storedDedup(t, h, "older")
	require.NotNil(t, d, "the first write moved the 31 replies to a dedup record")
	require.Len(t, d.Recent, 31)
	require.Empty(t, storedRecord(t, h, "older").Recent)

	reown(t, h, 2)
	v, err = h.add(ctx, "older", 1, actors.WithRequestID("older-0"))
	require.NoError(t, err)
	require.EqualValues(t, 1, v.Value)
	require.EqualValues(t, 1, h.n.adds.Load())
}
