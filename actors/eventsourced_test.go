package actors_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/ordo-actors/ordo/persistence"
	"github.com/ordo-actors/ordo/persistence/memory"
	"github.com/ordo-actors/ordo/proto/ordopb"
	"github.com/ordo-actors/ordo/proto/testpb"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

type esCtx = actors.Context[*testpb.Counter]

// esCounter is an event-sourced counter: Add emits Added, Arm emits count
// Addeds of delta, Reject emits and then fails (or, with code "panic",
// panics), Echo is a read handler that emits (a misuse), Get reads.
// applies counts the calls of Apply, from Emit and from replays.
type esCounter struct {
	applies atomic.Int64
}

func (ec *esCounter) apply(s *testpb.Counter, ev proto.Message) error {
	ec.applies.Add(1)
	switch ev := ev.(type) {
	case *testpb.Added:
		s.Value += ev.Delta
		s.Ballast = append(s.Ballast, ev.Ballast...)
	case *testpb.Reset:
		s.Value = 0
	default:
		return fmt.Errorf("unexpected event %T", ev)
	}
	return nil
}

func (ec *esCounter) kind(es actors.EventSourcing[*testpb.Counter]) *actors.KindOf[*testpb.Counter] {
	if es.Apply == nil {
		es.Apply = ec.apply
	}
	if es.Events == nil {
		es.Events = []proto.Message{(*testpb.Added)(nil), (*testpb.Reset)(nil)}
	}
	return actors.MustKind("counter", func() *testpb.Counter { return new(testpb.Counter) },
		actors.EventSourced(es),
		actors.On(func(c *esCtx, m *testpb.Add) (*testpb.Value, error) {
			if m.Delta == 0 {
				c.Emit(&testpb.Reset{})
			} else {
				c.Emit(&testpb.Added{Delta: m.Delta, Ballast: make([]byte, m.Ballast)})
			}
			return &testpb.Value{Value: c.State.Value}, nil
		}),
		actors.On(func(c *esCtx, m *testpb.Arm) (*testpb.Value, error) {
			for range m.Count {
				c.Emit(&testpb.Added{Delta: m.Delta})
			}
			return &testpb.Value{Value: c.State.Value}, nil
		}),
		actors.On(func(c *esCtx, m *testpb.Reject) (*testpb.Value, error) {
			c.Emit(&testpb.Added{Delta: 1000})
			if m.Code == "panic" {
				panic("after an emit")
			}
			return nil, actors.HandlerError(m.Code, "rejected after emitting, value %d", c.State.Value)
		}),
		actors.OnRead(func(c *esCtx, _ *testpb.Echo) (*testpb.Value, error) {
			c.Emit(&testpb.Added{Delta: 1})
			return &testpb.Value{Value: c.State.Value}, nil
		}),
		actors.OnRead(func(c *esCtx, _ *testpb.Get) (*testpb.Value, error) {
			return &testpb.Value{Value: c.State.Value}, nil
		}),
	)
}

const esShards = 4

// esHost starts a host of kinds over store owning every shard at epoch;
// it is shut down at cleanup (the store is left open).
func esHost(t *testing.T, store persistence.Store, epoch int64, tweak func(*actors.HostConfig, *actors.HostDeps), kinds ...actors.Kind) *actors.Host {
	t.Helper()
	cfg := actors.DefaultLocalConfig()
	cfg.Shards = esShards
	cfg.Logger = testutil.Logger()
	deps := actors.HostDeps{Store: store}
	if tweak != nil {
		tweak(&cfg, &deps)
	}
	h, err := actors.NewHost(cfg, deps, kinds...)
	require.NoError(t, err)
	require.NoError(t, h.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := h.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	for s := range uint32(cfg.Shards) {
		require.NoError(t, h.Own(s, epoch))
	}
	return h
}

// kill stops h as a crash would: its shards are dropped, so nothing more
// is written (no passivation, no snapshot on the way out).
func kill(t *testing.T, h *actors.Host) {
	t.Helper()
	h.DropAll(errors.New("killed"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, h.Shutdown(ctx))
}

func esAdd(ctx context.Context, h *actors.Host, id string, delta int64, opts ...actors.CallOption) (int64, error) {
	v, err := actors.Call[*testpb.Value](ctx, h, ref(id), &testpb.Add{Delta: delta}, opts...)
	return v.GetValue(), err
}

func esGet(ctx context.Context, h *actors.Host, id string) (int64, error) {
	v, err := actors.Call[*testpb.Value](ctx, h, ref(id), &testpb.Get{})
	return v.GetValue(), err
}

// record returns the stored record of counter id.
func record(t *testing.T, store persistence.Store, id string) *ordopb.EntityRecord {
	t.Helper()
	rec, err := store.Load(context.Background(), "counter", id)
	require.NoError(t, err)
	var er ordopb.EntityRecord
	require.NoError(t, proto.Unmarshal(rec.Data, &er))
	return &er
}

// journal returns every event of counter id, decoded by kind.
func journal(t *testing.T, j persistence.Journal, kind *actors.KindOf[*testpb.Counter], id string) []proto.Message {
	t.Helper()
	evs, err := j.ReadEvents(context.Background(), "counter", id, 0, 100_000)
	require.NoError(t, err)
	out := make([]proto.Message, len(evs))
	for i, ev := range evs {
		require.EqualValues(t, i+1, ev.Seq)
		m, err := kind.DecodeEvent(ev.Data)
		require.NoError(t, err)
		out[i] = m
	}
	return out
}

// Replay equals live state: random adds, resets and rejected runs on a
// few counters; the value every reply and read saw equals the fold of the
// journal, and the state a new host rebuilds (snapshot plus replay, and a
// full replay under a new snapshot version).
func TestEventSourcedReplayEqualsLiveState(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 7))
	store := memory.New()
	defer store.Close()
	var ec esCounter
	kind := ec.kind(actors.EventSourcing[*testpb.Counter]{SnapshotEvery: 7})
	h1 := esHost(t, store, 1, nil, kind)
	ctx := testCtx(t)

	ids := []string{"a", "b", "c"}
	live := map[string]int64{}
	for i := range 300 {
		id := ids[rng.IntN(len(ids))]
		switch r := rng.IntN(10); {
		case r == 0:
			_, err := actors.Call[*testpb.Value](ctx, h1, ref(id), &testpb.Reject{Code: "no"})
			require.ErrorIs(t, err, actors.ErrHandler)
		case r == 1:
			v, err := esAdd(ctx, h1, id, 0)
			require.NoError(t, err)
			live[id] = 0
			require.Zero(t, v)
		default:
			d := rng.Int64N(100) - 30
			if d == 0 {
				d = 1
			}
			v, err := esAdd(ctx, h1, id, d, actors.WithRequestID(fmt.Sprintf("op-%d", i)))
			require.NoError(t, err)
			live[id] += d
			require.Equal(t, live[id], v)
		}
	}
	for _, id := range ids {
		v, err := esGet(ctx, h1, id)
		require.NoError(t, err)
		require.Equal(t, live[id], v, "live %s", id)
		folded := new(testpb.Counter)
		for _, ev := range journal(t, store, kind, id) {
			require.NoError(t, ec.apply(folded, ev))
		}
		require.Equal(t, live[id], folded.Value, "fold of the journal of %s", id)
	}
	kill(t, h1)

	// Snapshot plus replay.
	h2 := esHost(t, store, 2, nil, kind)
	for _, id := range ids {
		v, err := esGet(ctx, h2, id)
		require.NoError(t, err)
		require.Equal(t, live[id], v, "%s after a restart", id)
	}
	kill(t, h2)

	// The whole journal, under a new snapshot version.
	var ec3 esCounter
	h3 := esHost(t, store, 3, nil, ec3.kind(actors.EventSourcing[*testpb.Counter]{SnapshotEvery: 7, SnapshotVersion: 2}))
	for _, id := range ids {
		v, err := esGet(ctx, h3, id)
		require.NoError(t, err)
		require.Equal(t, live[id], v, "%s rebuilt from the journal", id)
	}
	var total int
	for _, id := range ids {
		total += len(journal(t, store, kind, id))
	}
	require.EqualValues(t, total, ec3.applies.Load(), "a new version replays every event")
}

// A host killed between snapshots: the record holds the snapshot of the
// last multiple of SnapshotEvery and the journal the events after it; a
// new owner replays only those.
func TestEventSourcedSnapshotAndReplayAfterKill(t *testing.T) {
	store := memory.New()
	defer store.Close()
	var ec esCounter
	kind := ec.kind(actors.EventSourcing[*testpb.Counter]{SnapshotEvery: 10})
	h1 := esHost(t, store, 1, nil, kind)
	ctx := testCtx(t)
	for i := range 25 {
		_, err := esAdd(ctx, h1, "k", int64(i+1))
		require.NoError(t, err)
	}
	kill(t, h1)
	rec := record(t, store, "k")
	require.EqualValues(t, 20, rec.SnapshotSeq)
	require.EqualValues(t, 25, rec.LastEvent)
	require.EqualValues(t, 1, rec.SnapshotVersion)
	require.Empty(t, rec.State, "the record holds no state")
	srec, err := store.Load(context.Background(), "counter"+actors.SnapshotKindSuffix, "k")
	require.NoError(t, err)
	var sr ordopb.EntityRecord
	require.NoError(t, proto.Unmarshal(srec.Data, &sr))
	require.EqualValues(t, 20, sr.SnapshotSeq)
	var snap testpb.Counter
	require.NoError(t, proto.Unmarshal(sr.State, &snap))
	require.EqualValues(t, 20*21/2, snap.Value, "the snapshot is the state as of event 20")

	before := ec.applies.Load()
	h2 := esHost(t, store, 2, nil, kind)
	v, err := esGet(ctx, h2, "k")
	require.NoError(t, err)
	require.EqualValues(t, 25*26/2, v)
	require.EqualValues(t, 5, ec.applies.Load()-before, "events replayed")

	// The new owner goes on from event 26.
	v, err = esAdd(ctx, h2, "k", 100)
	require.NoError(t, err)
	require.EqualValues(t, 25*26/2+100, v)
	require.Len(t, journal(t, store, kind, "k"), 26)
}

// Passivation stores a snapshot of the events since the last one; the
// next activation replays nothing. A graceful shutdown does the same.
func TestEventSourcedSnapshotOnPassivation(t *testing.T) {
	store := memory.New()
	defer store.Close()
	var ec esCounter
	kind := ec.kind(actors.EventSourcing[*testpb.Counter]{})
	h := esHost(t, store, 1, func(c *actors.HostConfig, d *actors.HostDeps) { c.IdleTimeout = 50 * time.Millisecond }, kind)
	ctx := testCtx(t)
	for range 5 {
		_, err := esAdd(ctx, h, "p", 2)
		require.NoError(t, err)
	}
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		if n := h.Stats().Passivations; n == 0 {
			return errPending
		}
		return nil
	})
	rec := record(t, store, "p")
	require.EqualValues(t, 5, rec.SnapshotSeq)
	require.EqualValues(t, 5, rec.LastEvent)
	before := ec.applies.Load()
	v, err := esGet(ctx, h, "p")
	require.NoError(t, err)
	require.EqualValues(t, 10, v)
	require.EqualValues(t, 0, ec.applies.Load()-before, "nothing to replay after a passivation snapshot")

	_, err = esAdd(ctx, h, "p", 1)
	require.NoError(t, err)
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, h.Shutdown(sctx))
	rec = record(t, store, "p")
	require.EqualValues(t, 6, rec.SnapshotSeq, "the release stored a snapshot")
}

// A run's events go with the run: a handler error, a panic, a read
// handler's emit, or a run over BatchMaxEvents leave no event and the
// state as before; a retried request emits nothing again.
func TestEventSourcedRollbackAndDedup(t *testing.T) {
	store := memory.New()
	defer store.Close()
	var ec esCounter
	kind := ec.kind(actors.EventSourcing[*testpb.Counter]{})
	h := esHost(t, store, 1, func(c *actors.HostConfig, d *actors.HostDeps) { c.BatchMaxEvents = 5 }, kind)
	ctx := testCtx(t)

	v, err := esAdd(ctx, h, "r", 3, actors.WithRequestID("once"))
	require.NoError(t, err)
	require.EqualValues(t, 3, v)
	v, err = esAdd(ctx, h, "r", 3, actors.WithRequestID("once"))
	require.NoError(t, err)
	require.EqualValues(t, 3, v, "a retry gets the stored reply")

	_, err = actors.Call[*testpb.Value](ctx, h, ref("r"), &testpb.Reject{Code: "nope"})
	require.ErrorIs(t, err, actors.ErrHandler)
	require.Contains(t, err.Error(), "value 1003", "the handler saw its event")
	_, err = actors.Call[*testpb.Value](ctx, h, ref("r"), &testpb.Reject{Code: "panic"})
	require.ErrorIs(t, err, actors.ErrInternal)
	_, err = actors.Call[*testpb.Value](ctx, h, ref("r"), &testpb.Echo{})
	require.ErrorIs(t, err, actors.ErrInternal)
	require.Contains(t, err.Error(), "emitted events")
	_, err = actors.Call[*testpb.Value](ctx, h, ref("r"), &testpb.Arm{Count: 6, Delta: 1})
	require.ErrorIs(t, err, actors.ErrTooLarge)
	armed, err := actors.Call[*testpb.Value](ctx, h, ref("r"), &testpb.Arm{Count: 5, Delta: 1})
	require.NoError(t, err)
	require.EqualValues(t, 8, armed.Value)

	v, err = esGet(ctx, h, "r")
	require.NoError(t, err)
	require.EqualValues(t, 8, v)
	evs := journal(t, store, kind, "r")
	require.Len(t, evs, 6)
	for _, ev := range evs {
		require.NotEqual(t, int64(1000), ev.(*testpb.Added).Delta, "a rolled-back event was stored")
	}
}

// Emit in a kind that is not event-sourced, or of an undeclared type,
// panics: the run is rolled back and answered with ErrInternal.
func TestEmitMisuse(t *testing.T) {
	plain := actors.MustKind("plain", func() *testpb.Counter { return new(testpb.Counter) },
		actors.On(func(c *esCtx, m *testpb.Add) (*testpb.Value, error) {
			c.Emit(&testpb.Added{Delta: m.Delta})
			return &testpb.Value{}, nil
		}))
	odd := actors.MustKind("odd", func() *testpb.Counter { return new(testpb.Counter) },
		actors.EventSourced(actors.EventSourcing[*testpb.Counter]{Events: []proto.Message{(*testpb.Reset)(nil)},
			Apply: func(*testpb.Counter, proto.Message) error { return nil }}),
		actors.On(func(c *esCtx, m *testpb.Add) (*testpb.Value, error) {
			c.Emit(&testpb.Added{Delta: m.Delta})
			return &testpb.Value{}, nil
		}))
	store := memory.New()
	defer store.Close()
	h := esHost(t, store, 1, nil, plain, odd)
	ctx := testCtx(t)
	_, err := actors.Call[*testpb.Value](ctx, h, actors.Ref{Kind: "plain", ID: "x"}, &testpb.Add{Delta: 1})
	require.ErrorIs(t, err, actors.ErrInternal)
	require.Contains(t, err.Error(), "not event-sourced")
	_, err = actors.Call[*testpb.Value](ctx, h, actors.Ref{Kind: "odd", ID: "x"}, &testpb.Add{Delta: 1})
	require.ErrorIs(t, err, actors.ErrInternal)
	require.Contains(t, err.Error(), "does not declare event type ordo.test.v1.Added")
}

func TestEventSourcedDeclarations(t *testing.T) {
	apply := func(*testpb.Counter, proto.Message) error { return nil }
	for name, es := range map[string]actors.EventSourcing[*testpb.Counter]{
		"nil Apply":           {Events: []proto.Message{(*testpb.Added)(nil)}},
		"no event types":      {Apply: apply},
		"declared twice":      {Apply: apply, Events: []proto.Message{(*testpb.Added)(nil), &testpb.Added{}}},
		"nil event type":      {Apply: apply, Events: []proto.Message{nil}},
		"SnapshotEvery -1 is": {Apply: apply, Events: []proto.Message{(*testpb.Added)(nil)}, SnapshotEvery: -1},
	} {
		_, err := actors.NewKind("k", func() *testpb.Counter { return new(testpb.Counter) }, actors.EventSourced(es))
		require.Error(t, err, name)
	}
	ok := actors.EventSourcing[*testpb.Counter]{Apply: apply, Events: []proto.Message{(*testpb.Added)(nil)}}
	_, err := actors.NewKind("k", func() *testpb.Counter { return new(testpb.Counter) }, actors.EventSourced(ok), actors.EventSourced(ok))
	require.ErrorContains(t, err, "twice")
}

// stateOnly hides a store's journal.
type stateOnly struct{ persistence.Store }

func TestNewHostRefusesEventSourcedKindWithoutJournal(t *testing.T) {
	var ec esCounter
	store := memory.New()
	defer store.Close()
	_, err := actors.NewHost(actors.DefaultLocalConfig(), actors.HostDeps{Store: stateOnly{store}}, ec.kind(actors.EventSourcing[*testpb.Counter]{}))
	require.ErrorContains(t, err, "keeps no journal")
}

// A stored event of a type the kind no longer declares fails the
// activation with ErrInternal naming it; the entity answers nothing from
// a state it could not rebuild.
func TestEventSourcedUnknownEventType(t *testing.T) {
	store := memory.New()
	defer store.Close()
	var ec esCounter
	h1 := esHost(t, store, 1, nil, ec.kind(actors.EventSourcing[*testpb.Counter]{}))
	ctx := testCtx(t)
	_, err := esAdd(ctx, h1, "u", 5)
	require.NoError(t, err)
	_, err = esAdd(ctx, h1, "u", 0) // a Reset
	require.NoError(t, err)
	kill(t, h1)

	var ec2 esCounter
	h2 := esHost(t, store, 2, nil, ec2.kind(actors.EventSourcing[*testpb.Counter]{Events: []proto.Message{(*testpb.Added)(nil)}}))
	for range 2 { // every activation fails the same way
		_, err = esGet(ctx, h2, "u")
		require.ErrorIs(t, err, actors.ErrInternal)
		require.Contains(t, err.Error(), "event 2 of counter/u")
		require.Contains(t, err.Error(), "type ordo.test.v1.Reset, which the kind does not declare")
	}
}

// An event type that gained a field: events stored before decode with it
// unset, under either form of type URL.
func TestEventSourcedEventGainsField(t *testing.T) {
	store := memory.New()
	defer store.Close()
	ctx := testCtx(t)
	f := actors.Ref{Kind: "counter", ID: "f"}
	shard := actors.ShardOf(f, esShards)
	require.NoError(t, store.Fence(ctx, shard, 1))
	// Two events as an older Added (delta only) encoded them, the second
	// under a full type URL.
	old := func(url string, delta int64) []byte {
		v := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), uint64(delta))
		b, err := proto.Marshal(&anypb.Any{TypeUrl: url, Value: v})
		require.NoError(t, err)
		return b
	}
	data, err := proto.Marshal(&ordopb.EntityRecord{Seq: 2, Epoch: 1, LastEvent: 2, SnapshotVersion: 1})
	require.NoError(t, err)
	out, err := store.Save(ctx, []persistence.Record{{Kind: "counter", ID: "f", Shard: shard, Epoch: 1, Data: data,
		Events: []persistence.Event{{Seq: 1, Data: old("ordo.test.v1.Added", 4)}, {Seq: 2, Data: old("type.googleapis.com/ordo.test.v1.Added", 5)}}}})
	require.NoError(t, err)
	require.NoError(t, out[shard])

	var notes []string
	var ec esCounter
	kind := ec.kind(actors.EventSourcing[*testpb.Counter]{Apply: func(s *testpb.Counter, ev proto.Message) error {
		a := ev.(*testpb.Added)
		notes = append(notes, a.Note) // the entity's goroutine only
		s.Value += a.Delta
		return nil
	}})
	h := esHost(t, store, 2, nil, kind)
	v, err := esGet(ctx, h, "f")
	require.NoError(t, err)
	require.EqualValues(t, 9, v)
	require.Equal(t, []string{"", ""}, notes)
}

// A new SnapshotVersion: the stored snapshot is discarded, the state
// rebuilt from event 1 with the new Apply, and the next write stores a
// snapshot of the new version. With DeleteEvents the journal no longer
// holds event 1: the activation fails clearly instead.
func TestEventSourcedSnapshotVersion(t *testing.T) {
	ledger := func(version uint32, deleteEvents bool, tenths bool) *actors.KindOf[*testpb.Ledger] {
		return actors.MustKind("counter", func() *testpb.Ledger { return new(testpb.Ledger) },
			actors.EventSourced(actors.EventSourcing[*testpb.Ledger]{
				Events:          []proto.Message{(*testpb.Added)(nil)},
				SnapshotEvery:   3,
				SnapshotVersion: version,
				DeleteEvents:    deleteEvents,
				Apply: func(s *testpb.Ledger, ev proto.Message) error {
					if tenths {
						s.BalanceTenths += 10 * ev.(*testpb.Added).Delta
					} else {
						s.Balance += ev.(*testpb.Added).Delta
					}
					s.Applied++
					return nil
				},
			}),
			actors.On(func(c *actors.Context[*testpb.Ledger], m *testpb.Add) (*testpb.Ledger, error) {
				c.Emit(&testpb.Added{Delta: m.Delta})
				return c.State, nil
			}),
			actors.OnRead(func(c *actors.Context[*testpb.Ledger], _ *testpb.Get) (*testpb.Ledger, error) {
				return c.State, nil
			}))
	}
	ctx := testCtx(t)
	for _, deleteEvents := range []bool{false, true} {
		t.Run(fmt.Sprintf("DeleteEvents=%v", deleteEvents), func(t *testing.T) {
			store := memory.New()
			defer store.Close()
			h1 := esHost(t, store, 1, nil, ledger(1, deleteEvents, false))
			for i := range 10 {
				_, err := actors.Call[*testpb.Ledger](ctx, h1, ref("v"), &testpb.Add{Delta: int64(i + 1)})
				require.NoError(t, err)
			}
			kill(t, h1)
			rec := record(t, store, "v")
			require.EqualValues(t, 9, rec.SnapshotSeq)
			evs, err := store.ReadEvents(ctx, "counter", "v", 0, 100)
			require.NoError(t, err)
			if deleteEvents {
				// The snapshot at 9 deleted the events before it but the
				// last, which the store keeps.
				require.EqualValues(t, 9, evs[0].Seq, "the events the snapshot covers are deleted")
			} else {
				require.Len(t, evs, 10)
			}

			h2 := esHost(t, store, 2, nil, ledger(2, deleteEvents, true))
			l, err := actors.Call[*testpb.Ledger](ctx, h2, ref("v"), &testpb.Get{})
			if deleteEvents {
				require.ErrorIs(t, err, actors.ErrInternal)
				require.Contains(t, err.Error(), "has event 9 where event 1 was expected")
				require.Contains(t, err.Error(), "snapshot has version 1, the kind 2")
				return
			}
			require.NoError(t, err)
			require.EqualValues(t, 550, l.BalanceTenths)
			require.Zero(t, l.Balance, "nothing of the old snapshot")
			require.EqualValues(t, 10, l.Applied)
			_, err = actors.Call[*testpb.Ledger](ctx, h2, ref("v"), &testpb.Add{Delta: 1})
			require.NoError(t, err)
			rec = record(t, store, "v")
			require.EqualValues(t, 2, rec.SnapshotVersion)
			require.EqualValues(t, 11, rec.SnapshotSeq)
		})
	}
}

// A state-based kind that becomes event-sourced: its records load as the
// snapshot at event 0.
func TestStateBasedKindBecomesEventSourced(t *testing.T) {
	store := memory.New()
	defer store.Close()
	ctx := testCtx(t)
	h1 := esHost(t, store, 1, nil, newCounterKind(&guard{}, &counters{}))
	_, err := actors.Call[*testpb.Value](ctx, h1, ref("m"), &testpb.Add{Delta: 42})
	require.NoError(t, err)
	kill(t, h1)
	var ec esCounter
	kind := ec.kind(actors.EventSourcing[*testpb.Counter]{})
	h2 := esHost(t, store, 2, nil, kind)
	v, err := esAdd(ctx, h2, "m", 1)
	require.NoError(t, err)
	require.EqualValues(t, 43, v)
	require.Len(t, journal(t, store, kind, "m"), 1)
	kill(t, h2)
	rec := record(t, store, "m")
	require.EqualValues(t, 1, rec.SnapshotSeq, "the first write stored the adopted state as a snapshot")
	h3 := esHost(t, store, 3, nil, kind)
	v, err = esGet(ctx, h3, "m")
	require.NoError(t, err)
	require.EqualValues(t, 43, v)
}

// A state over MaxStateBytes is not snapshotted (a warning says so): the
// entity goes on, and its activation replays from the last snapshot.
func TestEventSourcedSnapshotOverMaxStateBytes(t *testing.T) {
	store := memory.New()
	defer store.Close()
	var ec esCounter
	kind := ec.kind(actors.EventSourcing[*testpb.Counter]{SnapshotEvery: 1})
	logs := testutil.NewRecorder()
	h1 := esHost(t, store, 1, func(c *actors.HostConfig, d *actors.HostDeps) {
		c.MaxStateBytes = 1000
		c.Logger = slog.New(logs)
	}, kind)
	ctx := testCtx(t)
	for range 4 {
		_, err := actors.Call[*testpb.Value](ctx, h1, ref("big"), &testpb.Add{Delta: 1, Ballast: 400})
		require.NoError(t, err)
	}
	kill(t, h1)
	rec := record(t, store, "big")
	require.EqualValues(t, 2, rec.SnapshotSeq, "the last snapshot under 1000 bytes")
	require.EqualValues(t, 4, rec.LastEvent)
	warned := 0
	for _, line := range logs.Above(slog.LevelInfo) {
		if strings.Contains(line, "exceed MaxStateBytes") {
			warned++
		}
	}
	require.Equal(t, 1, warned, "warned once per activation")
	h2 := esHost(t, store, 2, nil, kind)
	v, err := esGet(ctx, h2, "big")
	require.NoError(t, err)
	require.EqualValues(t, 4, v)
}

// eventCountingStore records, for each Save, the events of each shard's group
// and of each record.
type eventCountingStore struct {
	*memory.Store
	mu                        sync.Mutex
	saves                     int
	maxGroupEvents, maxEvents int
	bytes                     int64
}

func (s *eventCountingStore) Save(ctx context.Context, recs []persistence.Record) (map[uint32]error, error) {
	s.mu.Lock()
	s.saves++
	group := map[uint32]int{}
	for _, r := range recs {
		group[r.Shard] += len(r.Events)
		s.maxEvents = max(s.maxEvents, len(r.Events))
		s.bytes += int64(len(r.Data))
		for _, e := range r.Events {
			s.bytes += int64(len(e.Data))
		}
	}
	for _, n := range group {
		s.maxGroupEvents = max(s.maxGroupEvents, n)
	}
	s.mu.Unlock()
	return s.Store.Save(ctx, recs)
}

// Writes coalesced while a Save is in flight keep every event, in order;
// an entity's queued events beyond BatchMaxEvents go in later Saves, and
// no shard's group carries more.
func TestEventSourcedCoalescingKeepsEvents(t *testing.T) {
	mem := memory.New()
	defer mem.Close()
	store := &eventCountingStore{Store: mem}
	var ec esCounter
	kind := ec.kind(actors.EventSourcing[*testpb.Counter]{SnapshotEvery: 8})
	h := esHost(t, store, 1, func(c *actors.HostConfig, d *actors.HostDeps) { c.BatchMaxEvents = 4 }, kind)
	ctx := testCtx(t)
	// Entities of one shard, activated before the Saves block.
	var ids []string
	for i := 0; len(ids) < 4; i++ {
		if id := fmt.Sprintf("w%d", i); actors.ShardOf(ref(id), esShards) == actors.ShardOf(ref("w0"), esShards) {
			ids = append(ids, id)
			_, err := esAdd(ctx, h, id, 1)
			require.NoError(t, err)
		}
	}
	writes := h.Stats().Batch.Writes

	release := mem.BlockSaves()
	defer release()
	var wg sync.WaitGroup
	submit := func(id string, n int) {
		env, err := actors.Envelope(ref(id), &testpb.Add{Delta: 1}, fmt.Sprintf("%s-%d", id, n))
		require.NoError(t, err)
		wg.Add(1)
		h.Submit(env, func(r *ordopb.Reply) {
			defer wg.Done()
			if r.GetError() != nil {
				t.Errorf("add %s #%d: %v", id, n, r.GetError())
			}
		})
	}
	submit(ids[0], 0) // its Save blocks
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if h.Stats().Batch.Saves == 0 || h.Stats().Batch.Writes < writes+1 {
			return errPending
		}
		return nil
	})
	for n := 1; n <= 20; n++ {
		submit(ids[0], n)
	}
	for _, id := range ids[1:] {
		for n := range 3 {
			submit(id, n)
		}
	}
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if w := h.Stats().Batch.Writes; w < writes+30 {
			return fmt.Errorf("%d writes submitted", w-writes)
		}
		return nil
	})
	release()
	wg.Wait()

	require.Len(t, journal(t, store, kind, ids[0]), 22)
	v, err := esGet(ctx, h, ids[0])
	require.NoError(t, err)
	require.EqualValues(t, 22, v)
	for _, id := range ids[1:] {
		require.Len(t, journal(t, store, kind, id), 4)
	}
	store.mu.Lock()
	defer store.mu.Unlock()
	require.LessOrEqual(t, store.maxGroupEvents, 4)
	require.LessOrEqual(t, store.maxEvents, 4)
	require.GreaterOrEqual(t, h.Stats().Batch.Saves-uint64(len(ids)), uint64(1+20/4), "Saves after the block")
}

// hookedStore calls onSave, when set, before each Save.
type hookedStore struct {
	*memory.Store
	onSave atomic.Pointer[func([]persistence.Record)]
}

func (s *hookedStore) Save(ctx context.Context, recs []persistence.Record) (map[uint32]error, error) {
	if f := s.onSave.Load(); f != nil {
		(*f)(recs)
	}
	return s.Store.Save(ctx, recs)
}

// The store refuses a group of several records as too large: each is
// saved again in smaller groups, events included, and an entity whose
// newer write was queued meanwhile keeps both writes' events, in order.
func TestEventSourcedTooLargeGroupSplit(t *testing.T) {
	mem := memory.New()
	defer mem.Close()
	store := &hookedStore{Store: mem}
	var ec esCounter
	kind := ec.kind(actors.EventSourcing[*testpb.Counter]{})
	h := esHost(t, store, 1, func(c *actors.HostConfig, d *actors.HostDeps) { c.Shards = 1 }, kind)
	ctx := testCtx(t)
	mem.LimitSaves(0, 4) // records and events of a shard's group: one record and its two events fit
	arm := func(id string) (*testpb.Value, error) {
		return actors.Call[*testpb.Value](ctx, h, ref(id), &testpb.Arm{Count: 2, Delta: 1})
	}
	ids := []string{"g0", "g1", "g2", "g3"}
	for _, id := range ids {
		_, err := arm(id)
		require.NoError(t, err)
	}
	var wg sync.WaitGroup
	async := func(id string) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := arm(id); err != nil {
				t.Errorf("%s: %v", id, err)
			}
		}()
	}
	waitWrites := func(n uint64) {
		testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
			if h.Stats().Batch.Writes < n {
				return errPending
			}
			return nil
		})
	}
	release := mem.BlockSaves()
	defer release()
	writes := h.Stats().Batch.Writes
	async("g0") // in flight, blocked
	waitWrites(writes + 1)
	for _, id := range ids[1:] {
		async(id)
	}
	waitWrites(writes + 4)
	// While the group of three is in flight (and refused), g1 writes again.
	var once sync.Once
	hook := func(recs []persistence.Record) {
		if len(recs) < 3 {
			return
		}
		once.Do(func() {
			async("g1")
			waitWrites(writes + 5)
		})
	}
	store.onSave.Store(&hook)
	release()
	wg.Wait()
	for _, id := range ids {
		want := 4
		if id == "g1" {
			want = 6
		}
		require.Len(t, journal(t, mem, kind, id), want, id)
		v, err := esGet(ctx, h, id)
		require.NoError(t, err)
		require.EqualValues(t, want, v, id)
	}
	require.Zero(t, h.Stats().Batch.TooLarge, "no record was refused alone")
}

// An event the store refuses as out of sequence (here, one written
// behind the owner's back under its epoch) drops the shard, as a write
// of unknown outcome does, and the call fails retryably.
func TestEventSourcedSequenceErrorDropsShard(t *testing.T) {
	store := memory.New()
	defer store.Close()
	var ec esCounter
	lost := make(chan error, 1)
	logs := testutil.NewRecorder()
	h := esHost(t, store, 1, func(c *actors.HostConfig, d *actors.HostDeps) {
		d.ShardLost = func(_ uint32, _ int64, err error) {
			select {
			case lost <- err:
			default:
			}
		}
		c.Logger = slog.New(logs)
	}, ec.kind(actors.EventSourcing[*testpb.Counter]{}))
	ctx := testCtx(t)
	_, err := esAdd(ctx, h, "s", 1)
	require.NoError(t, err)
	shard := actors.ShardOf(ref("s"), esShards)
	out, err := store.Save(ctx, []persistence.Record{{Kind: "stray", ID: "s", Shard: shard, Epoch: 1, Data: []byte{}}})
	require.NoError(t, err)
	require.NoError(t, out[shard])
	rec, err := store.Load(ctx, "counter", "s")
	require.NoError(t, err)
	stray, err := proto.Marshal(&anypb.Any{TypeUrl: "ordo.test.v1.Added", Value: nil})
	require.NoError(t, err)
	rec.Events = []persistence.Event{{Seq: 2, Data: stray}}
	out, err = store.Save(ctx, []persistence.Record{rec})
	require.NoError(t, err)
	require.NoError(t, out[shard])

	_, err = esAdd(ctx, h, "s", 1)
	require.True(t, actors.Retryable(err), "%v", err)
	select {
	case err := <-lost:
		require.ErrorContains(t, err, "events of counter/s start at seq 2, the journal ends at 2")
	case <-ctx.Done():
		t.Fatal("the shard was not lost")
	}
	require.NotContains(t, h.Owned(), shard)
	var logged bool
	for _, line := range logs.Above(slog.LevelWarn) {
		logged = logged || strings.Contains(line, "out of sequence")
	}
	require.True(t, logged, "the refusal is logged as an error")
}

// A stored event is a google.protobuf.Any whose type URL is the event's
// full name and whose value is the event, deterministic.
func TestEventSourcedEventEncoding(t *testing.T) {
	store := memory.New()
	defer store.Close()
	var ec esCounter
	kind := ec.kind(actors.EventSourcing[*testpb.Counter]{})
	h := esHost(t, store, 1, nil, kind)
	ctx := testCtx(t)
	_, err := esAdd(ctx, h, "enc", 7)
	require.NoError(t, err)
	_, err = esAdd(ctx, h, "enc", 0)
	require.NoError(t, err)
	evs, err := store.ReadEvents(ctx, "counter", "enc", 1, 10)
	require.NoError(t, err)
	require.Len(t, evs, 2)
	for i, ev := range []proto.Message{&testpb.Added{Delta: 7, Ballast: []byte{}}, &testpb.Reset{}} {
		value, err := proto.MarshalOptions{Deterministic: true}.Marshal(ev)
		require.NoError(t, err)
		want, err := proto.Marshal(&anypb.Any{TypeUrl: string(ev.ProtoReflect().Descriptor().FullName()), Value: value})
		require.NoError(t, err)
		require.Equal(t, want, evs[i].Data, "event %d", i+1)
	}
}

// With tracing on, the host wraps its store; an event-sourced kind still
// reaches the journal, and its snapshot's load is traced like its record's.
func TestEventSourcedWithTracing(t *testing.T) {
	exp, tp := newTracer(t)
	store := memory.New()
	defer store.Close()
	var ec esCounter
	kind := ec.kind(actors.EventSourcing[*testpb.Counter]{SnapshotEvery: 2})
	tracing := func(c *actors.HostConfig, _ *actors.HostDeps) { c.Tracer = tp.Tracer(actors.TracerName) }
	h1 := esHost(t, store, 1, tracing, kind)
	ctx := testCtx(t)
	for range 3 {
		_, err := esAdd(ctx, h1, "tr", 1)
		require.NoError(t, err)
	}
	kill(t, h1)
	exp.Reset()
	h2 := esHost(t, store, 2, tracing, kind)
	v, err := esGet(ctx, h2, "tr")
	require.NoError(t, err)
	require.EqualValues(t, 3, v)
	var kinds []string
	for _, s := range named(exp.GetSpans(), "ordo.store.load") {
		kinds = append(kinds, attr(s, "ordo.kind"))
	}
	require.ElementsMatch(t, []string{"counter", "counter" + actors.SnapshotKindSuffix}, kinds)
}

// LoadRecord rebuilds an event-sourced entity's state from its snapshot
// and journal, without activating it.
func TestEventSourcedLoadRecord(t *testing.T) {
	store := memory.New()
	defer store.Close()
	var ec esCounter
	kind := ec.kind(actors.EventSourcing[*testpb.Counter]{SnapshotEvery: 3})
	h := esHost(t, store, 1, nil, kind)
	ctx := testCtx(t)
	for i := range 5 {
		_, err := esAdd(ctx, h, "lr", int64(i+1))
		require.NoError(t, err)
	}
	rec, err := h.LoadRecord(ctx, ref("lr"))
	require.NoError(t, err)
	require.True(t, rec.Found)
	require.EqualValues(t, 15, rec.State.(*testpb.Counter).Value)
	require.EqualValues(t, 3, rec.SnapshotSeq)
	require.EqualValues(t, 5, rec.LastEvent)
	require.Positive(t, rec.StateSize)
	rec, err = h.LoadRecord(ctx, ref("never"))
	require.NoError(t, err)
	require.False(t, rec.Found)
}

// A durable reminder of an event-sourced entity is written with its
// record, which its next owner loads, and the run its firing makes emits
// like any run.
func TestEventSourcedReminders(t *testing.T) {
	store := memory.New()
	defer store.Close()
	var ec esCounter
	kind := actors.MustKind("counter", func() *testpb.Counter { return new(testpb.Counter) },
		actors.EventSourced(actors.EventSourcing[*testpb.Counter]{
			Events: []proto.Message{(*testpb.Added)(nil)}, Apply: ec.apply}),
		actors.On(func(c *esCtx, m *testpb.Remind) (*testpb.Value, error) {
			if err := c.SetReminder(m.Name, time.Unix(0, m.DueUnixNano), 0, &testpb.Tick{Delta: m.Delta}); err != nil {
				return nil, err
			}
			return &testpb.Value{Value: c.State.Value}, nil
		}),
		actors.On(func(c *esCtx, m *testpb.Tick) (*testpb.Value, error) {
			c.Emit(&testpb.Added{Delta: m.Delta})
			return &testpb.Value{Value: c.State.Value}, nil
		}),
		actors.OnRead(func(c *esCtx, _ *testpb.Get) (*testpb.Value, error) {
			return &testpb.Value{Value: c.State.Value}, nil
		}))
	tick := func(c *actors.HostConfig, _ *actors.HostDeps) { c.ReminderTick = 5 * time.Millisecond }
	h1 := esHost(t, store, 1, tick, kind)
	ctx := testCtx(t)
	due := time.Now().Add(time.Hour)
	_, err := actors.Call[*testpb.Value](ctx, h1, ref("rm"), &testpb.Remind{Name: "r", DueUnixNano: due.UnixNano(), Delta: 7})
	require.NoError(t, err)
	kill(t, h1)
	require.Len(t, record(t, store, "rm").Reminders, 1, "the reminder is in the record")

	// The next owner fires it once it is due (brought forward here).
	h2 := esHost(t, store, 2, tick, kind)
	_, err = actors.Call[*testpb.Value](ctx, h2, ref("rm"), &testpb.Remind{Name: "r", DueUnixNano: time.Now().UnixNano(), Delta: 7})
	require.NoError(t, err)
	testutil.Eventually(t, 10*time.Second, 5*time.Millisecond, func() error {
		if v, err := esGet(ctx, h2, "rm"); err != nil || v != 7 {
			return fmt.Errorf("value %d (%v)", v, err)
		}
		return nil
	})
	require.Len(t, journal(t, store, kind, "rm"), 1)
}

// shadowKind is an event-sourced account whose Apply keeps parts of its
// events in the state and changes them in place later, which the state's
// rollback point must not share: Added with Ballast makes the event's
// bytes the state's, one without adds Delta to the first of them in place
// (and to the balance); Note "fill" adds Delta entries to Pending. Add
// emits Added{Delta, Ballast: Ballast bytes of 5, Note: Sender}; Reject
// emits Added{Delta: 1} and fails; Get reads the first ballast byte and
// the balance (as byte*1000 + balance) and the pending entries.
func shadowKind() *actors.KindOf[*testpb.Ledger] {
	return actors.MustKind("ledger", func() *testpb.Ledger { return new(testpb.Ledger) },
		actors.EventSourced(actors.EventSourcing[*testpb.Ledger]{
			Events: []proto.Message{(*testpb.Added)(nil)},
			Apply: func(s *testpb.Ledger, ev proto.Message) error {
				a := ev.(*testpb.Added)
				switch {
				case a.Note == "fill":
					if s.Pending == nil {
						s.Pending = make(map[string]int64)
					}
					for i := range a.Delta {
						s.Pending[fmt.Sprintf("t%d", i)] = i
					}
					return nil
				case a.Ballast != nil:
					s.Ballast = a.Ballast
				case len(s.Ballast) > 0:
					s.Ballast[0] += byte(a.Delta)
				}
				s.Balance += a.Delta
				return nil
			},
		}),
		actors.On(func(c *ledgerCtx, m *testpb.Add) (*testpb.Value, error) {
			ev := &testpb.Added{Delta: m.Delta, Note: m.Sender}
			if m.Ballast > 0 {
				ev.Ballast = bytes.Repeat([]byte{5}, int(m.Ballast))
			}
			c.Emit(ev)
			return &testpb.Value{Value: c.State.Balance}, nil
		}),
		actors.On(func(c *ledgerCtx, _ *testpb.Reject) (*testpb.Value, error) {
			c.Emit(&testpb.Added{Delta: 1})
			return nil, actors.HandlerError("no", "rejected after emitting")
		}),
		actors.OnRead(func(c *ledgerCtx, _ *testpb.Get) (*testpb.Value, error) {
			v := c.State.Balance
			if len(c.State.Ballast) > 0 {
				v += 1000 * int64(c.State.Ballast[0])
			}
			return &testpb.Value{Value: v, PrevSeq: uint64(len(c.State.Pending))}, nil
		}))
}

// A rolled-back run restores the state as of the last run kept, even when
// Apply keeps an event's bytes in the state and a later event changes them
// in place: the rollback point holds copies of its own.
func TestEventSourcedRollbackPointSharesNothing(t *testing.T) {
	store := memory.New()
	defer store.Close()
	h := esHost(t, store, 1, nil, shadowKind())
	ctx := testCtx(t)
	r := actors.Ref{Kind: "ledger", ID: "a"}
	get := func() int64 {
		t.Helper()
		v, err := actors.Call[*testpb.Value](ctx, h, r, &testpb.Get{})
		require.NoError(t, err)
		return v.Value
	}
	reject := func() {
		t.Helper()
		_, err := actors.Call[*testpb.Value](ctx, h, r, &testpb.Reject{})
		require.ErrorIs(t, err, actors.ErrHandler)
	}
	_, err := actors.Call[*testpb.Value](ctx, h, r, &testpb.Add{Delta: 1, Ballast: 1})
	require.NoError(t, err)
	require.EqualValues(t, 5001, get())
	reject()
	require.EqualValues(t, 5001, get(), "the rejected run's event changed the rollback point")
	_, err = actors.Call[*testpb.Value](ctx, h, r, &testpb.Add{Delta: 2})
	require.NoError(t, err)
	require.EqualValues(t, 7003, get())
	reject()
	reject()
	require.EqualValues(t, 7003, get())
}

// A run's events cost what applying them costs, not a copy of the state:
// writes to an account holding 10,000 pending entries allocate as few
// times as writes to an empty one. Counted with the entity active, its
// rollback point made, and outside snapshot writes (SnapshotEvery 1000).
func TestEmitCostsNoCopyOfTheState(t *testing.T) {
	store := memory.New()
	defer store.Close()
	h := esHost(t, store, 1, nil, shadowKind())
	ctx := testCtx(t)
	allocs := func(id string, fill int64) float64 {
		r := actors.Ref{Kind: "ledger", ID: id}
		if fill > 0 {
			_, err := actors.Call[*testpb.Value](ctx, h, r, &testpb.Add{Delta: fill, Sender: "fill"})
			require.NoError(t, err)
		}
		for range 3 {
			_, err := actors.Call[*testpb.Value](ctx, h, r, &testpb.Add{Delta: 1})
			require.NoError(t, err)
		}
		v, err := actors.Call[*testpb.Value](ctx, h, r, &testpb.Get{})
		require.NoError(t, err)
		require.EqualValues(t, fill, v.PrevSeq)
		return testing.AllocsPerRun(50, func() {
			if _, err := actors.Call[*testpb.Value](ctx, h, r, &testpb.Add{Delta: 1}); err != nil {
				t.Error(err)
			}
		})
	}
	small, large := allocs("small", 0), allocs("large", 10_000)
	t.Logf("allocations per write: %.0f with an empty state, %.0f with 10,000 entries", small, large)
	require.Less(t, large, small+50, "a write to the large state allocates per entry")
}
