package actors_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/ordo-actors/ordo/persistence"
	"github.com/ordo-actors/ordo/persistence/memory"
	"github.com/ordo-actors/ordo/proto/testpb"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// sums is a read model: the sum of each counter's Addeds, built from a
// projection, with every delivery recorded.
type sums struct {
	mu        sync.Mutex
	last      map[actors.Ref]uint64
	sum       map[actors.Ref]int64
	delivered int
	dups      int
}

func (s *sums) handle(_ context.Context, evs []actors.JournalEvent) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last == nil {
		s.last, s.sum = map[actors.Ref]uint64{}, map[actors.Ref]int64{}
	}
	for _, ev := range evs {
		s.delivered++
		switch last := s.last[ev.Ref]; {
		case ev.Seq <= last:
			s.dups++ // at least once: seen already
			continue
		case ev.Seq != last+1:
			return fmt.Errorf("%s: event %d after %d", ev.Ref, ev.Seq, last)
		}
		s.last[ev.Ref] = ev.Seq
		if a, ok := ev.Event.(*testpb.Added); ok {
			s.sum[ev.Ref] += a.Delta
		}
	}
	return nil
}

func (s *sums) of(id string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sum[ref(id)]
}

func followCfg(name string) actors.FollowConfig {
	cfg := actors.DefaultFollowConfig()
	cfg.Name = name
	cfg.Page = 7
	cfg.Poll = 5 * time.Millisecond
	cfg.UntilCaughtUp = true
	return cfg
}

// A projection over the kind's journal sees every event once per
// entity, in Seq order, and resumes from its stored offset.
func TestFollowKind(t *testing.T) {
	store := memory.New()
	defer store.Close()
	var ec esCounter
	kind := ec.kind(actors.EventSourcing[*testpb.Counter]{SnapshotEvery: 5})
	h := esHost(t, store, 1, nil, kind)
	ctx := testCtx(t)
	want := map[string]int64{}
	addN := func(n int) {
		for i := range n {
			id := fmt.Sprintf("c%d", i%5)
			_, err := esAdd(ctx, h, id, int64(i))
			require.NoError(t, err)
			want[id] += int64(i)
		}
	}
	addN(40)
	var (
		m    sums
		offs actors.MemoryOffsets
	)
	require.NoError(t, actors.Follow(ctx, store, kind, &offs, followCfg("sums"), m.handle))
	for id, w := range want {
		require.Equal(t, w, m.of(id), id)
	}
	require.Equal(t, 40, m.delivered)
	off, err := offs.LoadOffset(ctx, "sums")
	require.NoError(t, err)
	require.NotEmpty(t, off)

	addN(13)
	require.NoError(t, actors.Follow(ctx, store, kind, &offs, followCfg("sums"), m.handle))
	for id, w := range want {
		require.Equal(t, w, m.of(id), id)
	}
	require.Equal(t, 53, m.delivered, "resumed from the stored offset")
	require.Zero(t, m.dups)
}

// A handler that fails stops the projection without storing the page's
// offset: the next Follow delivers the page again (at least once), and
// nothing is lost.
func TestFollowAtLeastOnce(t *testing.T) {
	store := memory.New()
	defer store.Close()
	var ec esCounter
	kind := ec.kind(actors.EventSourcing[*testpb.Counter]{})
	h := esHost(t, store, 1, nil, kind)
	ctx := testCtx(t)
	for i := range 20 {
		_, err := esAdd(ctx, h, "a", int64(i+1))
		require.NoError(t, err)
	}
	var (
		m     sums
		offs  actors.MemoryOffsets
		pages int
	)
	boom := errors.New("boom")
	crashing := func(ctx context.Context, evs []actors.JournalEvent) error {
		pages++
		if err := m.handle(ctx, evs); err != nil {
			return err
		}
		if pages == 2 {
			return boom // handled, but the offset is not stored
		}
		return nil
	}
	require.ErrorIs(t, actors.Follow(ctx, store, kind, &offs, followCfg("p"), crashing), boom)
	require.Equal(t, 14, m.delivered)
	require.NoError(t, actors.Follow(ctx, store, kind, &offs, followCfg("p"), m.handle))
	require.Equal(t, 7, m.dups, "the failed page again")
	require.EqualValues(t, 20*21/2, m.of("a"))
}

// A projection of one entity reads its journal only, and resumes from
// the last Seq it handled.
func TestFollowEntity(t *testing.T) {
	store := memory.New()
	defer store.Close()
	var ec esCounter
	kind := ec.kind(actors.EventSourcing[*testpb.Counter]{})
	h := esHost(t, store, 1, nil, kind)
	ctx := testCtx(t)
	for i := range 10 {
		_, err := esAdd(ctx, h, fmt.Sprintf("e%d", i%2), 1)
		require.NoError(t, err)
	}
	var (
		m    sums
		offs actors.MemoryOffsets
	)
	cfg := followCfg("e1")
	cfg.ID = "e1"
	require.NoError(t, actors.Follow(ctx, store, kind, &offs, cfg, m.handle))
	require.Equal(t, 5, m.delivered)
	require.EqualValues(t, 5, m.of("e1"))
	require.Zero(t, m.of("e0"))
	off, err := offs.LoadOffset(ctx, "e1")
	require.NoError(t, err)
	require.Equal(t, persistence.Offset("5"), off)
	_, err = esAdd(ctx, h, "e1", 10)
	require.NoError(t, err)
	require.NoError(t, actors.Follow(ctx, store, kind, &offs, cfg, m.handle))
	require.Equal(t, 6, m.delivered)
	require.EqualValues(t, 15, m.of("e1"))
}

// Without UntilCaughtUp a projection polls for new events until its
// context ends.
func TestFollowPolls(t *testing.T) {
	store := memory.New()
	defer store.Close()
	var ec esCounter
	kind := ec.kind(actors.EventSourcing[*testpb.Counter]{})
	h := esHost(t, store, 1, nil, kind)
	ctx := testCtx(t)
	var (
		m    sums
		offs actors.MemoryOffsets
	)
	cfg := followCfg("live")
	cfg.UntilCaughtUp = false
	fctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- actors.Follow(fctx, store, kind, &offs, cfg, m.handle) }()
	for i := range 5 {
		_, err := esAdd(ctx, h, "live", 2)
		require.NoError(t, err)
		testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
			if got := m.of("live"); got != int64(2*(i+1)) {
				return fmt.Errorf("projected %d", got)
			}
			return nil
		})
	}
	stop()
	require.ErrorIs(t, <-done, context.Canceled)
}

// An event the kind cannot decode stops the projection with an error
// naming it; the config is validated.
func TestFollowErrors(t *testing.T) {
	store := memory.New()
	defer store.Close()
	var ec esCounter
	kind := ec.kind(actors.EventSourcing[*testpb.Counter]{})
	ctx := testCtx(t)
	require.NoError(t, store.Fence(ctx, 0, 1))
	bad, err := proto.Marshal(&anypb.Any{TypeUrl: "ordo.test.v1.Value"})
	require.NoError(t, err)
	out, err := store.Save(ctx, []persistence.Record{{Kind: "counter", ID: "z", Shard: 0, Epoch: 1, Data: []byte{},
		Events: []persistence.Event{{Seq: 1, Data: bad}}}})
	require.NoError(t, err)
	require.NoError(t, out[0])
	var m sums
	err = actors.Follow(ctx, store, kind, &actors.MemoryOffsets{}, followCfg("bad"), m.handle)
	require.ErrorContains(t, err, "event 1 of counter/z")
	require.ErrorContains(t, err, "type ordo.test.v1.Value, which the kind does not declare")

	cfg := followCfg("")
	require.ErrorContains(t, actors.Follow(ctx, store, kind, &actors.MemoryOffsets{}, cfg, m.handle), "Name")
	cfg = followCfg("x")
	cfg.ID = "z"
	offs := &actors.MemoryOffsets{}
	require.NoError(t, offs.SaveOffset(ctx, "x", "nonsense"))
	require.ErrorContains(t, actors.Follow(ctx, store, kind, offs, cfg, m.handle), "not an event Seq")
}
