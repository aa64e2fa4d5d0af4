package actors_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
	"google.golang.org/protobuf/proto"
)

// behind marks an Add (its Sender) whose run writes behind.
const behind = "behind"

// wbKind is a counter whose Add writes behind when its Sender is behind;
// Reject changes the state and fails; Get reads. runs counts Add runs.
func wbKind(runs *atomic.Int64) *actors.KindOf[*testpb.Counter] {
	return actors.MustKind("counter", func() *testpb.Counter { return new(testpb.Counter) },
		actors.On(func(c *ctxC, m *testpb.Add) (*testpb.Value, error) {
			runs.Add(1)
			if m.Sender == behind {
				c.WriteBehind()
			}
			c.State.Value += m.Delta
			return &testpb.Value{Value: c.State.Value}, nil
		}),
		actors.On(func(c *ctxC, m *testpb.Reject) (*testpb.Value, error) {
			c.State.Value += 1000
			return nil, actors.HandlerError(m.Code, "rejected")
		}),
		// Forward sends an Add, written behind, to another counter.
		actors.On(func(c *ctxC, m *testpb.Forward) (*testpb.Value, error) {
			c.State.Forwarded++
			actors.Request(c, actors.Ref{Kind: "counter", ID: m.To}, &testpb.Add{Delta: m.Delta, Sender: behind}, m.RequestId,
				func(*ctxC, *testpb.Value, error) {})
			return &testpb.Value{Value: c.State.Value}, nil
		}),
		actors.OnRead(func(c *ctxC, _ *testpb.Get) (*testpb.Value, error) {
			c.WriteBehind() // no effect in a read
			return &testpb.Value{Value: c.State.Value}, nil
		}),
	)
}

// wbEventKind is the event-sourced counter of these tests: Add emits one
// Added, Arm count of them, each behind when the message's Sender (Arm:
// its Name) is behind.
func wbEventKind() *actors.KindOf[*testpb.Counter] {
	return actors.MustKind("counter", func() *testpb.Counter { return new(testpb.Counter) },
		actors.EventSourced(actors.EventSourcing[*testpb.Counter]{
			Events: []proto.Message{(*testpb.Added)(nil)},
			Apply: func(s *testpb.Counter, ev proto.Message) error {
				s.Value += ev.(*testpb.Added).Delta
				return nil
			},
		}),
		actors.On(func(c *esCtx, m *testpb.Add) (*testpb.Value, error) {
			if m.Sender == behind {
				c.WriteBehind()
			}
			c.Emit(&testpb.Added{Delta: m.Delta})
			return &testpb.Value{Value: c.State.Value}, nil
		}),
		actors.On(func(c *esCtx, m *testpb.Arm) (*testpb.Value, error) {
			if m.Name == behind {
				c.WriteBehind()
			}
			for range m.Count {
				c.Emit(&testpb.Added{Delta: m.Delta})
			}
			return &testpb.Value{Value: c.State.Value}, nil
		}),
		actors.OnRead(func(c *esCtx, _ *testpb.Get) (*testpb.Value, error) {
			return &testpb.Value{Value: c.State.Value}, nil
		}),
	)
}

type wbHarness struct {
	t     *testing.T
	store *memory.Store
	host  *actors.Host
	runs  atomic.Int64
	cfg   actors.HostConfig
}

func newWB(t *testing.T, eventSourced bool, tweak func(*actors.HostConfig)) *wbHarness {
	t.Helper()
	w := &wbHarness{t: t, store: memory.New()}
	w.cfg = actors.DefaultLocalConfig()
	w.cfg.Shards = 4
	if tweak != nil {
		tweak(&w.cfg)
	}
	kind := wbKind(&w.runs)
	if eventSourced {
		kind = wbEventKind()
	}
	w.host = startHost(t, w.cfg, actors.HostDeps{Store: w.store}, kind)
	ownAll(t, w.host, w.cfg.Shards)
	return w
}

func (w *wbHarness) add(id string, delta int64, written bool, opts ...actors.CallOption) int64 {
	w.t.Helper()
	m := &testpb.Add{Delta: delta}
	if !written {
		m.Sender = behind
	}
	v, err := actors.Call[*testpb.Value](testCtx(w.t), w.host, ref(id), m, opts...)
	require.NoError(w.t, err)
	return v.GetValue()
}

func (w *wbHarness) get(id string) int64 {
	w.t.Helper()
	v, err := actors.Call[*testpb.Value](testCtx(w.t), w.host, ref(id), &testpb.Get{})
	require.NoError(w.t, err)
	return v.GetValue()
}

// stored returns the counter's durable record (the zero record when it
// has none) and, for a state-based counter, its value.
func (w *wbHarness) stored(id string) (*ordopb.EntityRecord, int64) {
	w.t.Helper()
	rec, err := w.store.Load(context.Background(), "counter", id)
	if errors.Is(err, persistence.ErrNotFound) {
		return &ordopb.EntityRecord{}, 0
	}
	require.NoError(w.t, err)
	var er ordopb.EntityRecord
	require.NoError(w.t, proto.Unmarshal(rec.Data, &er))
	var c testpb.Counter
	require.NoError(w.t, proto.Unmarshal(er.State, &c))
	return &er, c.Value
}

const (
	written = true
	unsaved = false
)

// A run written behind makes no write: the next write saves it with its
// own changes, and its reply does not wait.
func TestWriteBehindSavesWithTheNextWrite(t *testing.T) {
	w := newWB(t, false, nil)
	require.EqualValues(t, 5, w.add("a", 5, written))
	rec, v := w.stored("a")
	require.EqualValues(t, 1, rec.Seq)
	require.EqualValues(t, 5, v)

	require.EqualValues(t, 8, w.add("a", 3, unsaved))
	rec, v = w.stored("a")
	require.EqualValues(t, 1, rec.Seq, "a run written behind makes no write")
	require.EqualValues(t, 5, v)
	rt, err := w.host.Runtime(testCtx(t), ref("a"))
	require.NoError(t, err)
	require.Equal(t, 1, rt.Actor.Behind)

	require.EqualValues(t, 10, w.add("a", 2, written))
	rec, v = w.stored("a")
	require.EqualValues(t, 2, rec.Seq, "one write saves both runs")
	require.EqualValues(t, 10, v)
	require.Len(t, rec.Recent, 3, "with the dedup entry of the run written behind")
	rt, err = w.host.Runtime(testCtx(t), ref("a"))
	require.NoError(t, err)
	require.Zero(t, rt.Actor.Behind)
}

// A read sees the changes written behind only once they are durable: it
// writes them before it answers.
func TestWriteBehindReadWritesFirst(t *testing.T) {
	w := newWB(t, false, nil)
	require.EqualValues(t, 3, w.add("r", 3, unsaved))
	rec, _ := w.stored("r")
	require.EqualValues(t, 0, rec.Seq)
	require.EqualValues(t, 3, w.get("r"))
	rec, v := w.stored("r")
	require.EqualValues(t, 1, rec.Seq)
	require.EqualValues(t, 3, v, "the read answered after the write that saves what it saw")
	require.EqualValues(t, 3, w.get("r"))
	rec, _ = w.stored("r")
	require.EqualValues(t, 1, rec.Seq, "a read with nothing behind writes nothing")
}

// A crash loses what was written behind: the entity restarts from its
// last durable state, and the same request, retried, runs again. Before
// the crash a retry is answered from the dedup window.
func TestWriteBehindLostOnCrash(t *testing.T) {
	w := newWB(t, false, nil)
	require.EqualValues(t, 4, w.add("c", 4, written))
	require.EqualValues(t, 7, w.add("c", 3, unsaved, actors.WithRequestID("r1")))
	require.EqualValues(t, 7, w.add("c", 3, unsaved, actors.WithRequestID("r1")))
	require.EqualValues(t, 2, w.runs.Load(), "a retry before the crash is a duplicate")

	w.host.DropAll(errors.New("crashed"))
	for s := range w.cfg.Shards {
		require.NoError(t, w.host.Own(s, 2))
	}
	require.EqualValues(t, 4, w.get("c"), "the run written behind was lost with the crash")
	require.EqualValues(t, 7, w.add("c", 3, unsaved, actors.WithRequestID("r1")))
	require.EqualValues(t, 3, w.runs.Load(), "the retry after the crash ran again")
}

// Passivation and a graceful release save what was written behind.
func TestWriteBehindSavedOnPassivationAndRelease(t *testing.T) {
	w := newWB(t, false, func(c *actors.HostConfig) { c.IdleTimeout = 50 * time.Millisecond })
	require.EqualValues(t, 3, w.add("p", 3, unsaved))
	testutil.Eventually(t, 10*time.Second, 5*time.Millisecond, func() error {
		if w.host.Stats().Passivations == 0 {
			return errPending
		}
		return nil
	})
	rec, v := w.stored("p")
	require.EqualValues(t, 1, rec.Seq)
	require.EqualValues(t, 3, v)

	require.EqualValues(t, 5, w.add("p", 2, unsaved))
	shard := actors.ShardOf(ref("p"), w.cfg.Shards)
	require.NoError(t, w.host.Release(testCtx(t), shard, 1))
	rec, v = w.stored("p")
	require.EqualValues(t, 2, rec.Seq)
	require.EqualValues(t, 5, v)
}

// A later run that fails rolls back to the state the run written behind
// left, not to the last written one.
func TestWriteBehindSurvivesARolledBackRun(t *testing.T) {
	w := newWB(t, false, nil)
	require.EqualValues(t, 3, w.add("b", 3, unsaved))
	_, err := actors.Call[*testpb.Value](testCtx(t), w.host, ref("b"), &testpb.Reject{Code: "no"})
	require.ErrorIs(t, err, actors.ErrHandler)
	require.EqualValues(t, 3, w.get("b"))
	_, v := w.stored("b")
	require.EqualValues(t, 3, v)
}

// An entity keeps at most 32 runs behind: the next one writes.
func TestWriteBehindIsBounded(t *testing.T) {
	w := newWB(t, false, nil)
	for i := range 32 {
		require.EqualValues(t, i+1, w.add("n", 1, unsaved))
	}
	rec, _ := w.stored("n")
	require.EqualValues(t, 0, rec.Seq)
	require.EqualValues(t, 33, w.add("n", 1, unsaved))
	rec, v := w.stored("n")
	require.EqualValues(t, 1, rec.Seq, "the 33rd run written behind writes")
	require.EqualValues(t, 33, v)
}

// An event-sourced entity's events written behind go to the journal with
// the next write, before its own, in order.
func TestWriteBehindEventsKeepTheirOrder(t *testing.T) {
	w := newWB(t, true, nil)
	require.EqualValues(t, 1, w.add("e", 1, written))
	require.EqualValues(t, 3, w.add("e", 2, unsaved))
	require.EqualValues(t, 7, w.add("e", 4, unsaved))
	rec, _ := w.stored("e")
	require.EqualValues(t, 1, rec.LastEvent, "runs written behind append nothing")
	require.EqualValues(t, 15, w.add("e", 8, written))
	rec, _ = w.stored("e")
	require.EqualValues(t, 4, rec.LastEvent)
	require.EqualValues(t, 2, rec.Seq, "one write for the three runs")

	evs, err := w.store.ReadEvents(context.Background(), "counter", "e", 0, 100)
	require.NoError(t, err)
	var deltas []int64
	for i, ev := range evs {
		require.EqualValues(t, i+1, ev.Seq)
		m, err := wbEventKind().DecodeEvent(ev.Data)
		require.NoError(t, err)
		deltas = append(deltas, m.(*testpb.Added).Delta)
	}
	require.Equal(t, []int64{1, 2, 4, 8}, deltas)

	// More than 8 events behind: the run writes.
	v, err := actors.Call[*testpb.Value](testCtx(t), w.host, ref("e"), &testpb.Arm{Name: behind, Count: 9, Delta: 1})
	require.NoError(t, err)
	require.EqualValues(t, 24, v.GetValue())
	rec, _ = w.stored("e")
	require.EqualValues(t, 13, rec.LastEvent)
}

// A co-located receiver that writes behind a message still never writes
// before its sender: the sender's write does not wait for it (it makes
// none), and the receiver's next write, which saves the message's
// changes, waits for the sender's to be durable. Here the sender's Save
// is held in the store while the receiver writes, and Saves may run in
// parallel.
func TestWriteBehindColocatedNeverPrecedesItsSender(t *testing.T) {
	st := &orderStore{Store: memory.New(), saveGate: make(chan struct{})}
	cfg := actors.DefaultLocalConfig()
	cfg.Shards = 4
	cfg.BatchMaxInFlight = 4
	var runs atomic.Int64
	host := startHost(t, cfg, actors.HostDeps{Store: st}, wbKind(&runs))
	ownAll(t, host, cfg.Shards)
	ctx := testCtx(t)
	sender, err := actors.Colocated("counter", ref("rcv"), "snd")
	require.NoError(t, err)
	for _, r := range []actors.Ref{sender, ref("rcv")} {
		_, err = actors.Call[*testpb.Value](ctx, host, r, &testpb.Get{}) // activate both
		require.NoError(t, err)
	}

	st.blockFor = sender.ID
	fwd := make(chan error, 1)
	go func() {
		_, err := actors.Call[*testpb.Value](ctx, host, sender, &testpb.Forward{To: "rcv", Delta: 3, RequestId: "fwd"})
		fwd <- err
	}()
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if host.Stats().Batch.Saves < 1 || runs.Load() < 1 { // the Forward's write is in flight, the Add ran
			return errPending
		}
		return nil
	})
	add := make(chan error, 1)
	go func() {
		_, err := actors.Call[*testpb.Value](ctx, host, ref("rcv"), &testpb.Add{Delta: 1})
		add <- err
	}()
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if host.Stats().Batch.Writes < 2 { // the receiver's write is made
			return errPending
		}
		return nil
	})
	close(st.saveGate)
	require.NoError(t, <-fwd)
	require.NoError(t, <-add)
	v, err := st.storedValue("rcv")
	require.NoError(t, err)
	require.EqualValues(t, 4, v, "the receiver's write saved the Add written behind")

	st.mu.Lock()
	defer st.mu.Unlock()
	var senderEnd time.Time
	for _, s := range st.saves {
		if slices.Contains(s.ids, sender.ID) && senderEnd.IsZero() {
			senderEnd = s.end
		}
	}
	require.False(t, senderEnd.IsZero())
	for _, s := range st.saves {
		if slices.Contains(s.ids, "rcv") {
			require.False(t, s.start.Before(senderEnd), "the receiver's write was sent before its sender's was durable")
		}
	}
}

// A reminder cancelled behind: the host still delivers it at its due time
// (the index lists the durable record's), and that delivery saves the
// cancellation, which removes the index entry. The reminder never fires.
func TestWriteBehindCancelledReminder(t *testing.T) {
	store := memory.New()
	var ticks atomic.Int64
	kind := actors.MustKind("reminded", func() *testpb.Counter { return new(testpb.Counter) },
		actors.On(func(c *ctxC, m *testpb.Remind) (*testpb.Value, error) {
			if m.Cancel {
				c.WriteBehind()
				c.CancelReminder(m.Name)
				return &testpb.Value{}, nil
			}
			return &testpb.Value{}, c.SetReminder(m.Name, time.Unix(0, m.DueUnixNano), 0, &testpb.Tick{Delta: 1})
		}),
		actors.On(func(c *ctxC, m *testpb.Tick) (*testpb.Value, error) {
			ticks.Add(1)
			c.State.Value += m.Delta
			return &testpb.Value{Value: c.State.Value}, nil
		}),
	)
	cfg := remindCfg(nil)
	host := startHost(t, cfg, actors.HostDeps{Store: memoryView{store}}, kind)
	ownAll(t, host, cfg.Shards)
	due := time.Now().Add(100 * time.Millisecond).UnixNano()
	require.NoError(t, setReminder(t, host, "x", &testpb.Remind{Name: "r", DueUnixNano: due}))
	require.NoError(t, setReminder(t, host, "x", &testpb.Remind{Name: "r", Cancel: true}))
	_, rems := stored(t, store, "x")
	require.Len(t, rems, 1, "the cancellation is not saved yet")
	require.Len(t, indexed(t, store, cfg.Shards), 1)

	testutil.Eventually(t, 10*time.Second, 5*time.Millisecond, func() error {
		if n := len(indexed(t, store, cfg.Shards)); n != 0 {
			return fmt.Errorf("%d index entries left", n)
		}
		return nil
	})
	_, rems = stored(t, store, "x")
	require.Empty(t, rems)
	require.Zero(t, ticks.Load(), "a cancelled reminder fired")
}

// A run that accepts a sender's newer epoch writes at once, even when it
// asked to write behind: the fence must be durable before the reply, or a
// crash would let the sender's former owner in again (S6). A run from an
// epoch already accepted writes behind.
func TestWriteBehindWritesAMovedSenderFence(t *testing.T) {
	w := newWB(t, false, nil)
	sender := ref("sender")
	for i := 0; actors.ShardOf(sender, w.cfg.Shards) == actors.ShardOf(ref("f"), w.cfg.Shards); i++ {
		sender = ref(fmt.Sprint("sender", i))
	}
	from := func(epoch int64, rid string) *ordopb.Reply {
		env, err := actors.Envelope(ref("f"), &testpb.Add{Delta: 1, Sender: behind}, rid)
		require.NoError(t, err)
		env.Sender = sender.Proto()
		env.SenderFence = &ordopb.SenderFence{Shard: actors.ShardOf(sender, w.cfg.Shards), Epoch: epoch}
		return submitFromNode(t, w.host, env)
	}
	require.Nil(t, from(7, "r1").GetError())
	rec, v := w.stored("f")
	require.EqualValues(t, 1, rec.Seq, "the run that moved the fence wrote")
	require.EqualValues(t, 1, v)
	require.Nil(t, from(7, "r2").GetError())
	rec, _ = w.stored("f")
	require.EqualValues(t, 1, rec.Seq, "a run from the accepted epoch writes behind")

	w.host.DropAll(errors.New("crashed"))
	for s := range w.cfg.Shards {
		require.NoError(t, w.host.Own(s, 2))
	}
	rep := from(6, "r3")
	require.Equal(t, ordopb.Code_CODE_FENCED, rep.GetError().GetCode(), "%v", rep)
	require.EqualValues(t, 1, w.get("f"), "the run written behind was lost with the crash; the fence was not")
}
