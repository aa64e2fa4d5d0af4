package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/cluster"
	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/ordo-actors/ordo/persistence"
	"github.com/ordo-actors/ordo/persistence/memory"
	"github.com/ordo-actors/ordo/proto/testpb"
	"github.com/stretchr/testify/require"
)

// entitiesOf returns n entity IDs whose shards node owns; it fails the
// test when node owns no shard.
func entitiesOf(tb testing.TB, node *cluster.Node, shards uint32, n int) []string {
	tb.Helper()
	owned := node.Owned()
	if len(owned) == 0 {
		tb.Fatalf("%s owns no shard", node.ID())
	}
	var ids []string
	for i := 0; len(ids) < n; i++ {
		id := fmt.Sprintf("x%d", i)
		if _, ok := owned[actors.ShardOf(counter(id), shards)]; ok {
			ids = append(ids, id)
		}
	}
	return ids
}

// A crashed node's entities serve again elsewhere with their durable
// state, and no write under the crashed node's epochs is accepted after.
func TestCrashFailover(t *testing.T) {
	store := memory.New()
	e := newEnv(t, store, 32)
	e.startN(3)
	e.converged(e.nodes...) // each node holds its share, the victim too
	client := e.dial()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	victim := e.nodes[2]
	ids := entitiesOf(t, victim, e.shards, 50)
	for i, id := range ids {
		_, err := cluster.Call[*testpb.Value](ctx, client, counter(id), &testpb.Add{Delta: int64(i + 1)})
		require.NoError(t, err)
	}
	oldEpochs := victim.Owned()
	start := time.Now()
	e.kill(victim)

	// Every entity answers again, with its durable value.
	for i, id := range ids {
		v, err := cluster.Call[*testpb.Value](ctx, client, counter(id), &testpb.Get{})
		require.NoError(t, err)
		require.EqualValues(t, i+1, v.Value, id)
	}
	t.Logf("all %d entities of the crashed node answered after %v", len(ids), time.Since(start))
	e.settled(e.nodes[:2]...)

	// The new owners fenced every shard: a write under an old epoch fails.
	for shard, epoch := range oldEpochs {
		testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
			if f := store.FenceOf(shard); f <= epoch {
				return fmt.Errorf("shard %d fence %d not above the crashed owner's %d", shard, f, epoch)
			}
			return nil
		})
		out, err := store.Save(ctx, []persistence.Record{{Kind: "counter", ID: "stale", Shard: shard, Epoch: epoch, Data: []byte{}}})
		require.NoError(t, err)
		require.ErrorIs(t, out[shard], persistence.ErrFenced, "shard %d", shard)
	}
}

// Graceful shutdown under load fails no call, and a joining node takes
// its share of shards without failing any.
func TestGracefulShutdownAndJoinUnderLoad(t *testing.T) {
	e := newEnv(t, nil, 32)
	e.startN(3)
	e.settled(e.nodes...)
	client := e.dial()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	var stop atomic.Bool
	var calls, failed atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	expect := map[string]int64{}
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			sender := fmt.Sprintf("w%d", w)
			seqs := map[string]uint64{}
			for i := 0; !stop.Load(); i++ {
				id := fmt.Sprintf("load-%d-%d", w, i%20)
				seqs[id]++
				v, err := cluster.Call[*testpb.Value](ctx, client, counter(id), &testpb.Add{Delta: 1, Sender: sender, Seq: seqs[id]})
				calls.Add(1)
				if err != nil {
					failed.Add(1)
					t.Errorf("call failed: %v", err)
					return
				}
				// Per-caller FIFO across moves: each add follows the previous one.
				if v.PrevSeq != seqs[id]-1 {
					t.Errorf("%s: seq %d applied after %d", id, seqs[id], v.PrevSeq)
				}
				mu.Lock()
				expect[id]++
				mu.Unlock()
			}
		}(w)
	}
	waitCalls := func(n int64) {
		base := calls.Load()
		testutil.Eventually(t, 30*time.Second, 10*time.Millisecond, func() error {
			if calls.Load() < base+n {
				return errors.New("load not progressing")
			}
			return nil
		})
	}
	waitCalls(100)

	// A 4th node joins and takes shards through handoffs.
	joined := e.start(e.config("n4"))
	e.settled(e.nodes...)
	testutil.Eventually(t, 30*time.Second, 20*time.Millisecond, func() error {
		if len(joined.Owned()) == 0 {
			return errors.New("the new node owns nothing")
		}
		return nil
	})
	waitCalls(100)

	// Node 1 leaves gracefully.
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	require.NoError(t, e.nodes[0].Shutdown(sctx))
	scancel()
	e.settled(e.nodes[1:]...)
	waitCalls(100)
	stop.Store(true)
	wg.Wait()
	require.Zero(t, failed.Load())
	t.Logf("%d calls, none failed", calls.Load())

	for id, n := range expect {
		v, err := cluster.Call[*testpb.Value](ctx, client, counter(id), &testpb.Get{})
		require.NoError(t, err)
		require.Equal(t, n, v.Value, id)
	}
}

// A node restarted right after a crash, under the same ID, waits in Start
// for its previous lease to end instead of failing with ErrNodeIDInUse,
// and then serves its entities' durable state.
func TestRestartAfterCrashWaitsForTheOldLease(t *testing.T) {
	store := memory.New()
	e := newEnv(t, store, 4)
	n1 := e.start(e.config("n1"))
	e.settled(n1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err := cluster.Call[*testpb.Value](ctx, n1, counter("a"), &testpb.Add{Delta: 3})
	require.NoError(t, err)
	e.kill(n1) // the registration stays until the lease ends: nobody revokes it

	cfg := e.config("n1")
	cfg.Join = nil
	again := e.start(cfg)
	e.settled(again)
	v, err := cluster.Call[*testpb.Value](ctx, again, counter("a"), &testpb.Get{})
	require.NoError(t, err)
	require.EqualValues(t, 3, v.Value)
}
