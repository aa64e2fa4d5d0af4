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
	"github.com/ordo-actors/ordo/persistence"
	"github.com/ordo-actors/ordo/proto/ordopb"
	"github.com/ordo-actors/ordo/proto/testpb"
	"github.com/stretchr/testify/require"
)

// Per-sender FIFO: each sender pipelines its messages without waiting; the
// entity must apply them in each sender's order and never run two handlers
// at once.
func TestPerSenderFIFOAndNoOverlap(t *testing.T) {
	const senders, perSender = 8, 200
	h := newHarness(t, func(c *actors.HostConfig, d *actors.HostDeps) { c.MaxMailbox = senders * perSender })
	var wg sync.WaitGroup
	var failed atomic.Int64
	for s := 0; s < senders; s++ {
		wg.Add(1)
		go func(s int) {
			defer wg.Done()
			replies := make(chan *ordopb.Reply, perSender)
			sender := fmt.Sprintf("s%d", s)
			for i := 1; i <= perSender; i++ {
				env, err := actors.Envelope(ref("fifo"), &testpb.Add{Delta: 1, Sender: sender, Seq: uint64(i)}, actors.NewRequestID())
				if err != nil {
					t.Error(err)
					return
				}
				h.host.Submit(env, func(r *ordopb.Reply) { replies <- r })
			}
			for i := 0; i < perSender; i++ {
				if r := <-replies; r.GetError() != nil {
					failed.Add(1)
				}
			}
		}(s)
	}
	wg.Wait()
	require.Zero(t, failed.Load(), "failed calls")
	require.Zero(t, h.n.fifoViolations.Load(), "per-sender FIFO violations")
	require.Zero(t, h.g.overlaps.Load(), "overlapping handler runs")
	v, err := h.get(testCtx(t), "fifo")
	require.NoError(t, err)
	require.EqualValues(t, senders*perSender, v)
	stored, _ := h.stored("fifo")
	require.EqualValues(t, senders*perSender, stored)
}

// Output gate: while the store holds a write back, neither its reply nor a
// later read's reply may leave.
func TestOutputGateHoldsRepliesUntilDurable(t *testing.T) {
	h := newHarness(t, nil)
	ctx := testCtx(t)
	_, err := h.add(ctx, "gate", 1) // activate and make one durable write
	require.NoError(t, err)

	release := h.store.BlockSaves()
	defer release()
	savesBefore, _ := h.store.Stats()
	addReply := make(chan *ordopb.Reply, 1)
	getReply := make(chan *ordopb.Reply, 1)
	env, _ := actors.Envelope(ref("gate"), &testpb.Add{Delta: 41}, "add-41")
	h.host.Submit(env, func(r *ordopb.Reply) { addReply <- r })
	getsBefore := h.n.gets.Load()
	env2, _ := actors.Envelope(ref("gate"), &testpb.Get{}, "get-1")
	h.host.Submit(env2, func(r *ordopb.Reply) { getReply <- r })

	// Wait until the write reached the (blocked) store and the read ran.
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if s, _ := h.store.Stats(); s <= savesBefore {
			return errPending
		}
		if h.n.gets.Load() == getsBefore {
			return errPending
		}
		return nil
	})
	select {
	case r := <-addReply:
		t.Fatalf("write reply left before its save completed: %v", r)
	case r := <-getReply:
		t.Fatalf("read reply left before the write it observed was durable: %v", r)
	default:
	}
	if v, _ := h.stored("gate"); v != 1 {
		t.Fatalf("store has %d before the save completed", v)
	}

	release()
	r := <-addReply
	require.Nil(t, r.GetError())
	// The reply arrived, so the state it reports must be durable.
	v, _ := h.stored("gate")
	require.EqualValues(t, 42, v)
	r = <-getReply
	got, err := actors.DecodeReply[*testpb.Value](r)
	require.NoError(t, err)
	require.EqualValues(t, 42, got.Value)
}

// A failed save sends no success reply for the lost state. The store
// cannot say whether the write landed, so the host gives the whole shard
// up (a late landing must meet a newer fence); once the shard is owned
// again under a new epoch, the entity sees only durable state and a retry
// with the same ID applies once.
func TestFailedSaveDropsShardUntilNewEpoch(t *testing.T) {
	var lost atomic.Int64
	h := newHarness(t, func(c *actors.HostConfig, d *actors.HostDeps) {
		d.ShardLost = func(uint32, int64, error) { lost.Add(1) }
	})
	ctx := testCtx(t)
	_, err := h.add(ctx, "fail", 5, actors.WithRequestID("first"))
	require.NoError(t, err)
	shard := actors.ShardOf(ref("fail"), h.cfg.Shards)

	h.store.FailNextSaves(1, nil)
	_, err = h.add(ctx, "fail", 10, actors.WithRequestID("lost"))
	require.Error(t, err)
	require.True(t, actors.Retryable(err), "error %v should be retryable", err)
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if lost.Load() != 1 {
			return errPending
		}
		return nil
	})
	_, err = h.get(ctx, "fail")
	require.ErrorIs(t, err, actors.ErrNotHere, "the shard waits for a new epoch")

	require.NoError(t, h.host.Own(shard, 2))
	v, err := h.get(ctx, "fail")
	require.NoError(t, err)
	require.EqualValues(t, 5, v, "the next activation must see only durable state")
	got, err := h.add(ctx, "fail", 10, actors.WithRequestID("lost"))
	require.NoError(t, err)
	require.EqualValues(t, 15, got.Value)
	got, err = h.add(ctx, "fail", 10, actors.WithRequestID("lost"))
	require.NoError(t, err)
	require.EqualValues(t, 15, got.Value, "the retry must not apply twice")
	stored, _ := h.stored("fail")
	require.EqualValues(t, 15, stored)
}

// A write that landed although the store reported an unknown outcome is
// found, with its reply, by the next owner: the retry is not applied again.
func TestUnknownOutcomeThatLandedAppliesOnce(t *testing.T) {
	h := newHarness(t, nil)
	ctx := testCtx(t)
	_, err := h.add(ctx, "landed", 1, actors.WithRequestID("a"))
	require.NoError(t, err)
	shard := actors.ShardOf(ref("landed"), h.cfg.Shards)
	h.store.LoseNextAcks(1, nil)
	_, err = h.add(ctx, "landed", 10, actors.WithRequestID("b"))
	require.True(t, actors.Retryable(err), "error %v should be retryable", err)
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if _, owned := h.host.Owned()[shard]; owned {
			return errPending
		}
		return nil
	})
	require.NoError(t, h.host.Own(shard, 2))
	got, err := h.add(ctx, "landed", 10, actors.WithRequestID("b"))
	require.NoError(t, err)
	require.EqualValues(t, 11, got.Value)
	stored, _ := h.stored("landed")
	require.EqualValues(t, 11, stored)
}

// Writes queued behind a failing one fail with it and are never written.
func TestLaterPendingWritesFailWithEarlierOne(t *testing.T) {
	h := newHarness(t, nil)
	ctx := testCtx(t)
	_, err := h.add(ctx, "chain", 1)
	require.NoError(t, err)

	release := h.store.BlockSaves()
	h.store.FailNextSaves(1, nil)
	saves0, _ := h.store.Stats()
	const n = 5
	replies := make(chan *ordopb.Reply, n)
	for i := 0; i < n; i++ {
		env, _ := actors.Envelope(ref("chain"), &testpb.Add{Delta: 1}, fmt.Sprintf("c%d", i))
		h.host.Submit(env, func(r *ordopb.Reply) { replies <- r })
	}
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if s, _ := h.store.Stats(); s <= saves0 {
			return errPending
		}
		return nil
	})
	release()
	failures := 0
	for i := 0; i < n; i++ {
		r := <-replies
		if r.GetError() != nil {
			require.True(t, actors.Retryable(actors.ErrorFromProto(r.GetError())))
			failures++
		}
	}
	require.Positive(t, failures)
	// The shard was given up; owned again, whatever succeeded is durable,
	// and nothing else is.
	shard := actors.ShardOf(ref("chain"), h.cfg.Shards)
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if _, owned := h.host.Owned()[shard]; owned {
			return errPending
		}
		return nil
	})
	require.NoError(t, h.host.Own(shard, 2))
	v, err := h.get(ctx, "chain")
	require.NoError(t, err)
	stored, _ := h.stored("chain")
	require.Equal(t, stored, v)
	require.EqualValues(t, 1+n-failures, v)
}

// The same request ID, sent many times at once and again after
// passivation, changes the state once and always gets the same reply.
func TestExactlyOnce(t *testing.T) {
	h := newHarness(t, func(c *actors.HostConfig, d *actors.HostDeps) { c.IdleTimeout = 50 * time.Millisecond })
	ctx := testCtx(t)
	const n = 50
	var wg sync.WaitGroup
	values := make([]int64, n)
	errs := make([]error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			v, err := h.add(ctx, "once", 7, actors.WithRequestID("the-one"))
			values[i], errs[i] = v.GetValue(), err
		}(i)
	}
	wg.Wait()
	for i := 0; i < n; i++ {
		require.NoError(t, errs[i])
		require.EqualValues(t, 7, values[i])
	}
	require.EqualValues(t, 1, h.n.adds.Load(), "handler runs")

	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		if h.host.Stats().Passivations == 0 {
			return errPending
		}
		return nil
	})
	v, err := h.add(ctx, "once", 7, actors.WithRequestID("the-one"))
	require.NoError(t, err)
	require.EqualValues(t, 7, v.Value)
	require.EqualValues(t, 1, h.n.adds.Load(), "handler runs after reactivation")
	require.GreaterOrEqual(t, h.host.Stats().Activations, uint64(2))
}

// Handler errors are rolled back, reach the caller with their code, and
// are deduplicated like any reply.
func TestHandlerErrorRollbackAndDedup(t *testing.T) {
	h := newHarness(t, nil)
	ctx := testCtx(t)
	_, err := actors.Call[*testpb.Value](ctx, h.host, ref("rej"), &testpb.Reject{Code: "insufficient_funds"}, actors.WithRequestID("r1"))
	require.ErrorIs(t, err, actors.ErrHandler)
	var ae *actors.Error
	require.ErrorAs(t, err, &ae)
	require.Equal(t, "insufficient_funds", ae.HandlerCode)
	require.False(t, actors.Retryable(err))

	v, gerr := h.get(ctx, "rej")
	require.NoError(t, gerr)
	require.Zero(t, v, "a failed handler's changes must be rolled back")

	_, err2 := actors.Call[*testpb.Value](ctx, h.host, ref("rej"), &testpb.Reject{Code: "insufficient_funds"}, actors.WithRequestID("r1"))
	require.Error(t, err2)
	require.Equal(t, err.Error(), err2.Error(), "a retry gets the stored reply")
	require.EqualValues(t, 1, h.n.rejects.Load())

	// The same request ID for a different request is refused, not answered
	// with the first request's reply.
	_, err3 := actors.Call[*testpb.Value](ctx, h.host, ref("rej"), &testpb.Reject{Code: "other"}, actors.WithRequestID("r1"))
	require.ErrorIs(t, err3, actors.ErrBadRequest)
	require.EqualValues(t, 1, h.n.rejects.Load())
}

// Fencing: a fence raised behind the host's back rejects the next write,
// drops the shard, keeps the later state out of the store and gives the
// caller a retryable error.
func TestFencedWriteDropsShard(t *testing.T) {
	var lost atomic.Int64
	h := newHarness(t, func(c *actors.HostConfig, d *actors.HostDeps) {
		d.ShardLost = func(uint32, int64, error) { lost.Add(1) }
	})
	ctx := testCtx(t)
	_, err := h.add(ctx, "fence", 1)
	require.NoError(t, err)
	shard := actors.ShardOf(ref("fence"), h.cfg.Shards)

	require.NoError(t, h.store.Fence(ctx, shard, 2)) // a newer owner appears
	_, err = h.add(ctx, "fence", 100)
	require.ErrorIs(t, err, actors.ErrFenced)
	require.True(t, actors.Retryable(err))
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if lost.Load() != 1 {
			return errorf("OnShardLost called %d times", lost.Load())
		}
		return nil
	})
	_, owned := h.host.Owned()[shard]
	require.False(t, owned, "the fenced shard must be dropped")
	v, _ := h.stored("fence")
	require.EqualValues(t, 1, v, "the rejected write must not be visible")
	require.EqualValues(t, 1, h.host.Stats().Batch.Fenced)

	_, err = h.add(ctx, "fence", 100)
	require.ErrorIs(t, err, actors.ErrNotHere)
	v, _ = h.stored("fence")
	require.EqualValues(t, 1, v)

	// Owning it again at the new epoch works and sees the durable state.
	require.NoError(t, h.host.Own(shard, 2))
	got, err := h.add(ctx, "fence", 1)
	require.NoError(t, err)
	require.EqualValues(t, 2, got.Value)
}

// An activation in a shard whose fence is already higher fails and drops
// the shard without reading or writing. Own fences the shard in the
// background; that fence is held until the call is admitted, so the
// higher fence is met by the host's first Fence, whichever of the
// background fence and the activation makes it.
func TestActivationFencedDropsShard(t *testing.T) {
	const shards = 8
	store := newFenceWatchStore(shards, false) // holds every Fence until unblock
	cfg := actors.DefaultLocalConfig()
	cfg.Shards = shards
	host := startHost(t, cfg, actors.HostDeps{Store: store}, newCounterKind(&guard{}, &counters{}))
	ctx := testCtx(t)
	shard := actors.ShardOf(ref("late"), shards)
	require.NoError(t, host.Own(shard, 1))
	require.NoError(t, store.Store.Fence(ctx, shard, 5)) // a newer owner, not held

	replies := make(chan *ordopb.Reply, 1)
	env, err := actors.Envelope(ref("late"), &testpb.Add{Delta: 1}, "late-1")
	require.NoError(t, err)
	host.Submit(env, func(r *ordopb.Reply) { replies <- r })
	store.unblock()
	r := <-replies
	require.ErrorIs(t, actors.ErrorFromProto(r.GetError()), actors.ErrFenced, "reply %v", r)
	_, owned := host.Owned()[shard]
	require.False(t, owned)
	_, _, loads, _ := store.counts(shard)
	require.Zero(t, loads, "a fenced shard's entity was read")
	saves, _ := store.Stats()
	require.Zero(t, saves, "a fenced shard's entity was written")
}

// The LRU cap bounds active entities (by count) and passivated state survives.
func TestPassivationCapKeepsState(t *testing.T) {
	const cap, n = 10, 100
	h := newHarness(t, func(c *actors.HostConfig, d *actors.HostDeps) { c.MaxActive = cap })
	ctx := testCtx(t)
	for i := 0; i < n; i++ {
		_, err := h.add(ctx, fmt.Sprintf("e%03d", i), int64(i))
		require.NoError(t, err)
	}
	testutil.Eventually(t, 10*time.Second, 5*time.Millisecond, func() error {
		if a := h.host.Stats().Active; a > cap {
			return errorf("%d active > cap %d", a, cap)
		}
		return nil
	})
	require.GreaterOrEqual(t, h.host.Stats().Passivations, uint64(n-cap))
	for i := 0; i < n; i++ {
		v, err := h.get(ctx, fmt.Sprintf("e%03d", i))
		require.NoError(t, err)
		require.EqualValues(t, i, v)
	}
}

// Group commit: writes made while Saves are in flight share the next one.
// With saves held back, 200 entities' writes take at most
// BatchMaxInFlight+1 Save calls (the blocked ones and one more), however
// the goroutines are scheduled.
func TestGroupCommitCoalescesWrites(t *testing.T) {
	h := newHarness(t, nil)
	const entities = 200
	release := h.store.BlockSaves()
	defer release()
	replies := make(chan *ordopb.Reply, entities)
	for i := 0; i < entities; i++ {
		env, _ := actors.Envelope(ref(fmt.Sprintf("g%d", i)), &testpb.Add{Delta: 1}, actors.NewRequestID())
		h.host.Submit(env, func(r *ordopb.Reply) { replies <- r })
	}
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if w := h.host.Stats().Batch.Writes; w < entities {
			return errorf("%d writes reached the batcher", w)
		}
		return nil
	})
	release()
	for i := 0; i < entities; i++ {
		require.Nil(t, (<-replies).GetError())
	}
	st := h.host.Stats().Batch
	t.Logf("writes=%d saves=%d records=%d", st.Writes, st.Saves, st.Records)
	require.EqualValues(t, entities, st.Records)
	require.LessOrEqual(t, st.Saves, uint64(h.cfg.BatchMaxInFlight+1))
	saves, _ := h.store.Stats()
	require.EqualValues(t, st.Saves, saves)
}

// Writes of one entity made while its earlier write is in flight coalesce
// into one record: the newest snapshot covers the older ones.
func TestGroupCommitCoalescesOneEntity(t *testing.T) {
	h := newHarness(t, nil)
	const n = 50
	release := h.store.BlockSaves()
	defer release()
	replies := make(chan *ordopb.Reply, n)
	for i := 0; i < n; i++ {
		env, _ := actors.Envelope(ref("hot"), &testpb.Add{Delta: 1}, actors.NewRequestID())
		h.host.Submit(env, func(r *ordopb.Reply) { replies <- r })
	}
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if w := h.host.Stats().Batch.Writes; w < n {
			return errorf("%d writes reached the batcher", w)
		}
		return nil
	})
	release()
	for i := 0; i < n; i++ {
		require.Nil(t, (<-replies).GetError())
	}
	st := h.host.Stats().Batch
	require.LessOrEqual(t, st.Saves, uint64(2))
	// The first write's record, then one record and one dedup record (the
	// writes filled the record's part of the dedup window) for the rest.
	require.LessOrEqual(t, st.Records, uint64(1+2))
	v, _ := h.stored("hot")
	require.EqualValues(t, n, v)
}

// Batch limits hold: no Save carries more than BatchMaxRecords records.
func TestBatchLimitRecords(t *testing.T) {
	h := newHarness(t, func(c *actors.HostConfig, d *actors.HostDeps) { c.BatchMaxRecords = 4 })
	h.store.DelaySaves(time.Millisecond)
	ctx := testCtx(t)
	var wg sync.WaitGroup
	for i := 0; i < 64; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			if _, err := h.add(ctx, fmt.Sprintf("b%d", i), 1); err != nil {
				t.Error(err)
			}
		}(i)
	}
	wg.Wait()
	st := h.host.Stats().Batch
	require.GreaterOrEqual(t, st.Saves*4, st.Records)
	require.EqualValues(t, 64, st.Records)
}

// Entity-to-entity requests run as continuations and pass the output gate.
func TestEntityToEntityRequest(t *testing.T) {
	h := newHarness(t, nil)
	ctx := testCtx(t)
	_, err := actors.Call[*testpb.Value](ctx, h.host, ref("src"), &testpb.Forward{To: "dst", Delta: 3, RequestId: "fwd-1"})
	require.NoError(t, err)
	testutil.Eventually(t, 10*time.Second, 5*time.Millisecond, func() error {
		v, err := h.get(ctx, "dst")
		if err != nil || v != 3 {
			return errorf("dst=%d err=%v", v, err)
		}
		return nil
	})
	// The continuation's state change is written.
	testutil.Eventually(t, 10*time.Second, 5*time.Millisecond, func() error {
		rec, err := h.store.Load(ctx, "counter", "src")
		if err != nil {
			return err
		}
		var er ordopb.EntityRecord
		var c testpb.Counter
		if err := protoUnmarshal(rec.Data, &er); err != nil {
			return err
		}
		if err := protoUnmarshal(er.State, &c); err != nil {
			return err
		}
		if c.Forwarded != 2 {
			return errorf("forwarded=%d", c.Forwarded)
		}
		return nil
	})
	// Resending with the same ID (as a resumed saga would) applies nothing more.
	_, err = actors.Call[*testpb.Value](ctx, h.host, ref("src"), &testpb.Forward{To: "dst", Delta: 3, RequestId: "fwd-1"})
	require.NoError(t, err)
	testutil.Eventually(t, 10*time.Second, 5*time.Millisecond, func() error {
		rec, _ := h.store.Load(ctx, "counter", "src")
		var er ordopb.EntityRecord
		var c testpb.Counter
		_ = protoUnmarshal(rec.Data, &er)
		_ = protoUnmarshal(er.State, &c)
		if c.Forwarded != 2 {
			return errPending
		}
		return nil
	})
	v, err := h.get(ctx, "dst")
	require.NoError(t, err)
	require.EqualValues(t, 3, v)
}

// Release drains: admitted calls finish, later ones get ErrNotHere, and
// the shard's state is durable when Release returns.
func TestReleaseDrains(t *testing.T) {
	h := newHarness(t, func(c *actors.HostConfig, d *actors.HostDeps) { c.Shards = 1 })
	h.store.DelaySaves(time.Millisecond)
	ctx := testCtx(t)
	const n = 100
	replies := make(chan *ordopb.Reply, n)
	for i := 0; i < n; i++ {
		env, _ := actors.Envelope(ref(fmt.Sprintf("d%d", i%10)), &testpb.Add{Delta: 1}, actors.NewRequestID())
		h.host.Submit(env, func(r *ordopb.Reply) { replies <- r })
	}
	require.NoError(t, h.host.Release(ctx, 0, 1))
	ok := 0
	for i := 0; i < n; i++ {
		r := <-replies
		if r.GetError() == nil {
			ok++
		} else {
			require.Equal(t, ordopb.Code_CODE_NOT_HERE, r.GetError().GetCode())
		}
	}
	require.Equal(t, n, ok, "every call admitted before Release must succeed")
	total := int64(0)
	for i := 0; i < 10; i++ {
		v, _ := h.stored(fmt.Sprintf("d%d", i))
		total += v
	}
	require.EqualValues(t, n, total)
	_, err := h.add(ctx, "d0", 1)
	require.ErrorIs(t, err, actors.ErrNotHere)
	require.Zero(t, h.host.Stats().Active)
}

// Replies that reveal state are withheld while the lease is not valid.
func TestLeaseInvalidWithholdsReplies(t *testing.T) {
	valid := newTestLease()
	h := newHarness(t, func(c *actors.HostConfig, d *actors.HostDeps) { d.Lease = valid })
	ctx := testCtx(t)
	_, err := h.add(ctx, "lease", 1, actors.WithRequestID("l1"))
	require.NoError(t, err)
	valid.Store(false)
	_, err = h.add(ctx, "lease", 1, actors.WithRequestID("l2"))
	require.ErrorIs(t, err, actors.ErrUnavailable)
	_, err = h.get(ctx, "lease")
	require.ErrorIs(t, err, actors.ErrUnavailable)
	valid.Store(true)
	v, err := h.add(ctx, "lease", 1, actors.WithRequestID("l2"))
	require.NoError(t, err)
	require.EqualValues(t, 2, v.Value, "the withheld write was applied once")
}

func TestBadRequests(t *testing.T) {
	h := newHarness(t, nil)
	ctx := testCtx(t)
	cases := []struct {
		name string
		env  *ordopb.Envelope
		code ordopb.Code
	}{
		{"no target", &ordopb.Envelope{RequestId: "x"}, ordopb.Code_CODE_BAD_REQUEST},
		{"empty id", mustEnv(t, actors.Ref{Kind: "counter"}, "x"), ordopb.Code_CODE_BAD_REQUEST},
		{"unknown kind", mustEnv(t, actors.Ref{Kind: "nope", ID: "a"}, "x"), ordopb.Code_CODE_UNKNOWN_KIND},
		{"no request id", mustEnv(t, ref("a"), ""), ordopb.Code_CODE_BAD_REQUEST},
		{"no payload", &ordopb.Envelope{Target: ref("a").Proto(), RequestId: "x"}, ordopb.Code_CODE_BAD_REQUEST},
		{"unknown message", func() *ordopb.Envelope {
			env, _ := actors.Envelope(ref("a"), &testpb.Echo{}, "x")
			return env
		}(), ordopb.Code_CODE_BAD_REQUEST},
		{"undecodable payload", func() *ordopb.Envelope {
			env, _ := actors.Envelope(ref("a"), &testpb.Add{}, "x")
			env.Payload.Value = []byte{0xff, 0xff, 0xff}
			return env
		}(), ordopb.Code_CODE_BAD_REQUEST},
		{"past deadline", func() *ordopb.Envelope {
			env, _ := actors.Envelope(ref("a"), &testpb.Add{}, "x")
			env.DeadlineUnixNano = 1
			return env
		}(), ordopb.Code_CODE_DEADLINE},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := h.host.Invoke(ctx, c.env)
			require.NoError(t, err)
			require.Equal(t, c.code, r.GetError().GetCode(), "reply %v", r)
		})
	}
	v, err := h.get(ctx, "a")
	require.NoError(t, err)
	require.Zero(t, v, "bad requests must change nothing")
}

func mustEnv(t *testing.T, r actors.Ref, id string) *ordopb.Envelope {
	env, err := actors.Envelope(actors.Ref{Kind: "counter", ID: "ok"}, &testpb.Add{Delta: 1}, id)
	require.NoError(t, err)
	env.Target = r.Proto()
	return env
}

func TestErrorsKeepIdentityAcrossTheWire(t *testing.T) {
	for _, sentinel := range []error{actors.ErrUnknownKind, actors.ErrNotHere, actors.ErrFenced, actors.ErrDeadline,
		actors.ErrBadRequest, actors.ErrUnavailable, actors.ErrInternal} {
		wrapped := fmt.Errorf("context: %w", sentinel)
		back := actors.ErrorFromProto(actors.ErrorToProto(wrapped))
		require.ErrorIs(t, back, sentinel)
	}
	fe := &persistence.FencedError{Shard: 3, Have: 1, Want: 2}
	require.ErrorIs(t, actors.ErrorFromProto(actors.ErrorToProto(fe)), actors.ErrFenced)
	he := actors.HandlerError("insufficient_funds", "balance %d < %d", 1, 2)
	back := actors.ErrorFromProto(actors.ErrorToProto(he))
	require.ErrorIs(t, back, actors.ErrHandler)
	var ae *actors.Error
	require.True(t, errors.As(back, &ae))
	require.Equal(t, "insufficient_funds", ae.HandlerCode)
	require.Equal(t, "balance 1 < 2", ae.Message)
	require.ErrorIs(t, actors.ErrorFromProto(actors.ErrorToProto(context.DeadlineExceeded)), context.DeadlineExceeded)
	require.Nil(t, actors.ErrorFromProto(nil))
}

func TestConfigAndKindValidation(t *testing.T) {
	cfg := actors.DefaultHostConfig()
	require.NoError(t, cfg.Validate())
	cfg.Shards = 0
	require.Error(t, cfg.Validate())
	_, err := actors.NewKind("Bad Name", func() *testpb.Counter { return nil })
	require.Error(t, err)
	_, err = actors.NewKind("dup", func() *testpb.Counter { return nil },
		actors.OnRead(func(*ctxC, *testpb.Get) (*testpb.Value, error) { return nil, nil }),
		actors.OnRead(func(*ctxC, *testpb.Get) (*testpb.Value, error) { return nil, nil }))
	require.Error(t, err)
	_, err = actors.NewHost(actors.DefaultHostConfig(), actors.HostDeps{})
	require.Error(t, err)
	_, err = actors.NewRef("counter", string([]byte{0xff}))
	require.ErrorIs(t, err, persistence.ErrInvalid)
	_, err = actors.NewRef("counter", string(make([]byte, persistence.MaxIDLen+1)))
	require.ErrorIs(t, err, persistence.ErrInvalid)
}

// ShardOf is a stable contract: pin a few values.
func TestShardOfIsStable(t *testing.T) {
	require.Equal(t, actors.ShardOf(actors.Ref{Kind: "account", ID: "acct-000001"}, 256),
		actors.ShardOf(actors.Ref{Kind: "account", ID: "acct-000001"}, 256))
	got := []uint32{
		actors.ShardOf(actors.Ref{Kind: "account", ID: "acct-000000"}, 256),
		actors.ShardOf(actors.Ref{Kind: "account", ID: "acct-000001"}, 256),
		actors.ShardOf(actors.Ref{Kind: "transfer", ID: "t-1"}, 256),
	}
	t.Logf("pinned shards: %v", got)
	require.Equal(t, pinnedShards, got)
}

// A stale owner's write that is fenced after the shard was owned again at
// a newer epoch fails alone: the new ownership keeps the shard and writes.
func TestStaleWriteDoesNotTakeNewOwnershipDown(t *testing.T) {
	h := newHarness(t, func(c *actors.HostConfig, d *actors.HostDeps) { c.Shards = 1 })
	ctx := testCtx(t)
	_, err := h.add(ctx, "x", 1)
	require.NoError(t, err)

	release := h.store.BlockSaves()
	defer release()
	saves0, _ := h.store.Stats()
	stale := make(chan *ordopb.Reply, 1)
	env, _ := actors.Envelope(ref("x"), &testpb.Add{Delta: 10}, "stale")
	h.host.Submit(env, func(r *ordopb.Reply) { stale <- r })
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if s, _ := h.store.Stats(); s <= saves0 {
			return errPending
		}
		return nil
	})

	// A newer owner (here: this host again, as after a lost and re-won
	// lease) fences the shard while the stale write is in flight.
	require.NoError(t, h.store.Fence(ctx, 0, 2))
	owned := make(chan error, 1)
	go func() { owned <- h.host.Own(0, 2) }()
	release()
	require.NoError(t, <-owned)
	r := <-stale
	require.True(t, actors.Retryable(actors.ErrorFromProto(r.GetError())), "stale reply %v", r)

	v, err := h.add(ctx, "x", 100)
	require.NoError(t, err)
	require.EqualValues(t, 101, v.Value)
	require.Equal(t, map[uint32]int64{0: 2}, h.host.Owned())
	stored, _ := h.stored("x")
	require.EqualValues(t, 101, stored)
}

// heldRouter holds every routed message until its context ends, as a
// router retrying an unreachable owner does, and records what it saw.
type heldRouter struct {
	mu      sync.Mutex
	ctxs    []context.Context
	senders []actors.Sender
}

func (r *heldRouter) Route(ctx context.Context, env *ordopb.Envelope, from actors.Sender, done func(*ordopb.Reply)) {
	r.mu.Lock()
	r.ctxs = append(r.ctxs, ctx)
	r.senders = append(r.senders, from)
	r.mu.Unlock()
	go func() {
		<-ctx.Done()
		done(&ordopb.Reply{RequestId: env.GetRequestId(), Error: actors.ErrorToProto(ctx.Err())})
	}()
}

func (r *heldRouter) routed() ([]context.Context, []actors.Sender) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]context.Context(nil), r.ctxs...), append([]actors.Sender(nil), r.senders...)
}

// An entity's outgoing message is sent under its shard's ownership: while
// the lease is invalid its Sender says not to (re)send it, and once the
// shard is dropped its context ends, so a stale owner never resends it
// after the shard's next owner has carried the work on.
func TestOutgoingEndsWithItsShard(t *testing.T) {
	router := &heldRouter{}
	valid := newTestLease()
	h := newHarness(t, func(c *actors.HostConfig, d *actors.HostDeps) {
		d.Router = router
		d.Lease = valid
		c.RequestTimeout = time.Hour // only the ownership may end it
	})
	ctx := testCtx(t)
	_, err := actors.Call[*testpb.Value](ctx, h.host, ref("src"), &testpb.Forward{To: "dst", Delta: 1, RequestId: "fwd-1"})
	require.NoError(t, err)
	var sent context.Context
	var from actors.Sender
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if ctxs, senders := router.routed(); len(ctxs) == 1 {
			sent, from = ctxs[0], senders[0]
			return nil
		}
		return errPending
	})
	require.True(t, from.Current())

	changed := from.Changed()
	valid.Store(false)
	require.False(t, from.Current(), "resendable while the lease is invalid")
	<-changed
	changed = from.Changed()
	valid.Store(true)
	<-changed
	require.True(t, from.Current())

	shard := uint32(actors.ShardOf(ref("src"), h.cfg.Shards))
	h.host.Drop(shard, actors.ErrFenced)
	select {
	case <-sent.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the outgoing message outlived its shard's ownership")
	}
	require.False(t, from.Current())
}

// With the host's own router, a message released while the lease is not
// valid waits for it instead of being sent (or failing and being resent in
// a loop), and goes out once the lease is valid again.
func TestOutgoingWaitsForTheLease(t *testing.T) {
	valid := newTestLease()
	h := newHarness(t, func(c *actors.HostConfig, d *actors.HostDeps) { d.Lease = valid })
	ctx := testCtx(t)
	valid.Store(false)
	_, err := actors.Call[*testpb.Value](ctx, h.host, ref("src"), &testpb.Forward{To: "dst", Delta: 5, RequestId: "fwd-lease"})
	require.ErrorIs(t, err, actors.ErrUnavailable, "reply withheld while the lease is invalid")
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if _, seq := h.stored("src"); seq == 0 {
			return errPending
		}
		return nil
	})
	// The forward's write is durable, so its message was released: it must
	// not have reached dst while the lease is invalid.
	require.Zero(t, h.n.adds.Load(), "a message went out while the lease was invalid")
	valid.Store(true)
	testutil.Eventually(t, 10*time.Second, 5*time.Millisecond, func() error {
		if v, _ := h.stored("dst"); v != 5 {
			return errorf("dst=%d", v)
		}
		return nil
	})
}

// Close stops the host without draining: a call whose write is not yet
// durable gets a retryable error at once (its write is never waited
// for), later calls are refused, and Close is idempotent.
func TestCloseStopsWithoutDraining(t *testing.T) {
	h := newHarness(t, nil)
	ctx := testCtx(t)
	_, err := h.add(ctx, "c", 1)
	require.NoError(t, err)
	release := h.store.BlockSaves()
	defer release()
	replies := make(chan *ordopb.Reply, 1)
	env, err := actors.Envelope(ref("c"), &testpb.Add{Delta: 1}, actors.NewRequestID())
	require.NoError(t, err)
	h.host.Submit(env, func(r *ordopb.Reply) { replies <- r })
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if h.host.Stats().Batch.Saves < 2 { // the Add's write is in flight, blocked
			return errPending
		}
		return nil
	})
	closed := make(chan struct{})
	go func() {
		h.host.Close()
		close(closed)
	}()
	rep := recv(t, replies)
	require.Equal(t, ordopb.Code_CODE_NOT_HERE, rep.GetError().GetCode(), "reply: %v", rep)
	release() // the in-flight Save returns; Close waits for it, never for a drain
	<-closed
	h.host.Close()
	_, err = h.add(ctx, "c", 1)
	require.ErrorIs(t, err, actors.ErrUnavailable)
}

// Invoke given up on (its context ended before the reply) leaves its reply
// to no one: the reply, when it comes, reaches no later call, each of which
// gets its own.
func TestInvokeGivenUpOnLeavesNoReplyBehind(t *testing.T) {
	h := newHarness(t, nil)
	ctx := testCtx(t)
	_, err := h.add(ctx, "a", 1)
	require.NoError(t, err)
	before := h.host.Stats().Batch.Saves
	release := h.store.BlockSaves()
	gone, giveUp := context.WithCancel(ctx)
	go func() {
		testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
			if h.host.Stats().Batch.Saves == before {
				return errPending
			}
			return nil
		})
		giveUp()
	}()
	// On this goroutine, so that a waiter it wrongly let go would likely
	// be the next call's (sync.Pool keeps one per P).
	env, err := actors.Envelope(ref("a"), &testpb.Add{Delta: 1}, actors.NewRequestID())
	require.NoError(t, err)
	_, err = h.host.Invoke(gone, env) // its reply waits for the blocked Save
	require.ErrorIs(t, err, context.Canceled)
	release() // the abandoned call's reply is sent now
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if h.host.Stats().Inflight > 0 {
			return errPending
		}
		return nil
	})
	for i := range 50 {
		id := actors.NewRequestID()
		env, err := actors.Envelope(ref("a"), &testpb.Add{Delta: 1}, id)
		require.NoError(t, err)
		r, err := h.host.Invoke(ctx, env)
		require.NoError(t, err)
		require.Equal(t, id, r.GetRequestId(), "call %d got another call's reply", i)
	}
}
