package actors

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/ordo-actors/ordo/persistence"
	"github.com/ordo-actors/ordo/persistence/memory"
	"github.com/stretchr/testify/require"
)

// gatedStore holds every read until the gate opens and records the size
// of each read.
type gatedStore struct {
	*memory.Store
	gate chan struct{}

	mu      sync.Mutex
	waiting int
	sizes   []int // 1 for Load, len(keys) for LoadMany
}

func (g *gatedStore) wait(n int) {
	g.mu.Lock()
	g.waiting++
	g.sizes = append(g.sizes, n)
	g.mu.Unlock()
	<-g.gate
}

func (g *gatedStore) Load(ctx context.Context, kind, id string) (persistence.Record, error) {
	g.wait(1)
	return g.Store.Load(ctx, kind, id)
}

func (g *gatedStore) LoadMany(ctx context.Context, keys []persistence.Key) (map[persistence.Key]persistence.Record, error) {
	g.wait(len(keys))
	return g.Store.LoadMany(ctx, keys)
}

// Loads that arrive while the in-flight reads run go to the store together
// in one LoadMany, and every caller gets its own record (or ErrNotFound).
func TestLoaderCoalescesReads(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	defer mem.Close()
	require.NoError(t, mem.Fence(ctx, 0, 1))
	var recs []persistence.Record
	for i := 0; i < 40; i += 2 {
		recs = append(recs, persistence.Record{Kind: "k", ID: fmt.Sprint(i), Shard: 0, Epoch: 1, Data: []byte(fmt.Sprint("v", i))})
	}
	out, err := mem.Save(ctx, recs)
	require.NoError(t, err)
	require.NoError(t, out[0])

	g := &gatedStore{Store: mem, gate: make(chan struct{})}
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	l := newLoader(hctx, g, g, 10*time.Second)

	type result struct {
		id   string
		data string
		err  error
	}
	results := make(chan result, 64)
	get := func(id string) {
		rec, err := l.load(ctx, "k", id)
		results <- result{id, string(rec.Data), err}
	}
	// Two reads take the slots and wait at the gate, one after the other:
	// started together, the first to drain could take both in one read.
	atGate := func(n int) {
		testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
			g.mu.Lock()
			defer g.mu.Unlock()
			if g.waiting < n {
				return fmt.Errorf("%d reads at the gate, want %d", g.waiting, n)
			}
			return nil
		})
	}
	go get("0")
	atGate(1)
	go get("1")
	atGate(maxLoadsInFlight)
	// 40 more queue behind them, ID 7 twice.
	for i := 2; i < 41; i++ {
		go get(fmt.Sprint(i))
	}
	go get("7")
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		l.mu.Lock()
		defer l.mu.Unlock()
		if len(l.queue) < 40 {
			return fmt.Errorf("%d loads queued", len(l.queue))
		}
		return nil
	})
	close(g.gate)

	got := map[string][]result{}
	for range 42 {
		r := <-results
		got[r.id] = append(got[r.id], r)
	}
	for i := range 41 {
		id := fmt.Sprint(i)
		for _, r := range got[id] {
			if i%2 == 0 && i < 40 {
				require.NoError(t, r.err, id)
				require.Equal(t, fmt.Sprint("v", i), r.data)
			} else {
				require.ErrorIs(t, r.err, persistence.ErrNotFound, id)
			}
		}
	}
	require.Len(t, got["7"], 2)

	g.mu.Lock()
	sizes := slices.Clone(g.sizes)
	g.mu.Unlock()
	slices.Sort(sizes)
	// The two first reads alone, the 40 queued loads (39 keys) in one.
	require.Equal(t, []int{1, 1, 39}, sizes)
	reads, records := l.stats()
	require.EqualValues(t, 3, reads)
	require.EqualValues(t, 42, records)
}

// Two callers of one key get records that do not share Data.
func TestLoaderCopiesSharedRecords(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	defer mem.Close()
	require.NoError(t, mem.Fence(ctx, 0, 1))
	out, err := mem.Save(ctx, []persistence.Record{{Kind: "k", ID: "a", Epoch: 1, Data: []byte("abc")}})
	require.NoError(t, err)
	require.NoError(t, out[0])
	l := newLoader(ctx, mem, mem, time.Second)
	a, b := &loadReq{ctx: ctx, key: persistence.Key{Kind: "k", ID: "a"}, done: make(chan struct{})},
		&loadReq{ctx: ctx, key: persistence.Key{Kind: "k", ID: "a"}, done: make(chan struct{})}
	l.read([]*loadReq{a, b})
	require.NoError(t, a.err)
	require.NoError(t, b.err)
	a.rec.Data[0] = 'x'
	require.Equal(t, "abc", string(b.rec.Data))
}

// A failed read fails every load that rode on it; a caller whose context
// ends stops waiting.
func TestLoaderErrors(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	l := newLoader(ctx, mem, mem, time.Second)
	require.NoError(t, mem.Close())
	a, b := &loadReq{ctx: ctx, key: persistence.Key{Kind: "k", ID: "a"}, done: make(chan struct{})},
		&loadReq{ctx: ctx, key: persistence.Key{Kind: "k", ID: "b"}, done: make(chan struct{})}
	l.read([]*loadReq{a, b})
	require.ErrorIs(t, a.err, persistence.ErrClosed)
	require.ErrorIs(t, b.err, persistence.ErrClosed)

	g := &gatedStore{Store: memory.New(), gate: make(chan struct{})}
	defer g.Close()
	l = newLoader(ctx, g, g, time.Second)
	leaders := make(chan error, maxLoadsInFlight)
	for i := range maxLoadsInFlight {
		go func() {
			_, err := l.load(ctx, "k", fmt.Sprint("lead", i))
			leaders <- err
		}()
	}
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.waiting < maxLoadsInFlight {
			return errors.New("reads not at the gate")
		}
		return nil
	})
	// Both read slots are taken: this load queues, and gives up with its
	// context while the reads still wait.
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := l.load(cctx, "k", "follower")
		done <- err
	}()
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		l.mu.Lock()
		defer l.mu.Unlock()
		if len(l.queue) == 0 {
			return errors.New("not queued")
		}
		return nil
	})
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	close(g.gate)
	for range maxLoadsInFlight {
		require.ErrorIs(t, <-leaders, persistence.ErrNotFound)
	}
}
