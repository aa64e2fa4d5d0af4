package actors_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/ordo-actors/ordo/persistence"
	"github.com/ordo-actors/ordo/persistence/memory"
	"github.com/ordo-actors/ordo/persistence/storetest"
	"github.com/ordo-actors/ordo/proto/ordopb"
	"github.com/ordo-actors/ordo/proto/testpb"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// firings records the reminder firings handlers ran, by entity ID, as
// their request IDs.
type firings struct {
	mu  sync.Mutex
	ran map[string][]string
}

func (f *firings) record(id, requestID string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ran == nil {
		f.ran = make(map[string][]string)
	}
	f.ran[id] = append(f.ran[id], requestID)
}

func (f *firings) of(id string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.ran[id]...)
}

// firingDue parses a firing's request ID, "ordo.reminder/<name>/<due>".
func firingDue(t *testing.T, requestID string) (string, time.Time) {
	t.Helper()
	rest, ok := strings.CutPrefix(requestID, "ordo.reminder/")
	require.True(t, ok, requestID)
	i := strings.LastIndexByte(rest, '/')
	require.Positive(t, i, requestID)
	due, err := strconv.ParseInt(rest[i+1:], 10, 64)
	require.NoError(t, err)
	return rest[:i], time.Unix(0, due)
}

// remindedKind is a counter whose Remind message sets or cancels durable
// reminders that deliver Tick (or Get) to it.
func remindedKind(t *testing.T, f *firings) *actors.KindOf[*testpb.Counter] {
	return actors.MustKind("reminded", func() *testpb.Counter { return new(testpb.Counter) },
		actors.On(func(c *ctxT, m *testpb.Remind) (*testpb.Value, error) {
			if m.Cancel {
				c.CancelReminder(m.Name)
			} else {
				var msg proto.Message = &testpb.Tick{Delta: m.Delta, Rearm: m.Rearm}
				if m.Read {
					msg = &testpb.Get{}
				}
				if err := c.SetReminder(m.Name, time.Unix(0, m.DueUnixNano), time.Duration(m.PeriodMillis)*time.Millisecond, msg); err != nil {
					return nil, actors.HandlerError("remind", "%v", err)
				}
			}
			if m.Fail {
				return nil, actors.HandlerError("fail", "failing after setting a reminder")
			}
			return &testpb.Value{Value: c.State.Value}, nil
		}),
		actors.On(func(c *ctxT, m *testpb.Tick) (*testpb.Value, error) {
			c.State.Value += m.Delta
			if f != nil {
				f.record(c.Ref().ID, c.RequestID())
			}
			if m.Rearm {
				// Set the reminder that fired again at the same due time.
				name, due := firingDue(t, c.RequestID())
				if err := c.SetReminder(name, due, 0, m); err != nil {
					return nil, err
				}
			}
			return &testpb.Value{Value: c.State.Value}, nil
		}),
		actors.OnRead(func(c *ctxT, m *testpb.Get) (*testpb.Value, error) {
			if f != nil && strings.HasPrefix(c.RequestID(), "ordo.reminder/") {
				f.record(c.Ref().ID, c.RequestID())
			}
			return &testpb.Value{Value: c.State.Value}, nil
		}),
		actors.On(func(c *ctxT, m *testpb.Reject) (*testpb.Value, error) {
			// A read of the reminders of the run, for tests.
			due, period, ok := c.Reminder(m.Code)
			if !ok {
				return &testpb.Value{Value: -1}, nil
			}
			return &testpb.Value{Value: due.UnixNano(), PrevSeq: uint64(period)}, nil
		}),
	)
}

func remindCfg(tweak func(*actors.HostConfig)) actors.HostConfig {
	cfg := actors.DefaultLocalConfig()
	cfg.Shards = 4
	cfg.ReminderTick = 5 * time.Millisecond
	if tweak != nil {
		tweak(&cfg)
	}
	return cfg
}

// remindHost starts a host over store (shared: the host does not close
// it) owning every shard at epoch.
func remindHost(t *testing.T, store *memory.Store, f *firings, epoch int64, tweak func(*actors.HostConfig)) *actors.Host {
	t.Helper()
	cfg := remindCfg(tweak)
	host := startHost(t, cfg, actors.HostDeps{Store: memoryView{store}}, remindedKind(t, f))
	for s := range cfg.Shards {
		require.NoError(t, host.Own(uint32(s), epoch))
	}
	return host
}

func remindRef(id string) actors.Ref { return actors.Ref{Kind: "reminded", ID: id} }

func setReminder(t *testing.T, host *actors.Host, id string, m *testpb.Remind) error {
	t.Helper()
	_, err := actors.Call[*testpb.Value](testCtx(t), host, remindRef(id), m)
	return err
}

func remindedValue(t *testing.T, host *actors.Host, id string) int64 {
	t.Helper()
	v, err := actors.Call[*testpb.Value](testCtx(t), host, remindRef(id), &testpb.Get{})
	require.NoError(t, err)
	return v.GetValue()
}

// stored returns the entity's durable record and its reminders.
func stored(t *testing.T, store *memory.Store, id string) (persistence.Record, []*ordopb.Reminder) {
	t.Helper()
	rec, err := store.Load(context.Background(), "reminded", id)
	if errors.Is(err, persistence.ErrNotFound) {
		return rec, nil
	}
	require.NoError(t, err)
	var er ordopb.EntityRecord
	require.NoError(t, proto.Unmarshal(rec.Data, &er))
	return rec, er.GetReminders()
}

// indexed returns the reminder index entries of every shard.
func indexed(t *testing.T, store *memory.Store, shards uint32) []persistence.DueEntry {
	t.Helper()
	var all []persistence.DueEntry
	for s := range shards {
		es, err := store.Due(context.Background(), uint32(s), 1<<62, 1_000_000)
		require.NoError(t, err)
		all = append(all, es...)
	}
	return all
}

// waitFired waits until the entity's handlers ran n firings.
func waitFired(t *testing.T, f *firings, id string, n int) []string {
	t.Helper()
	var got []string
	testutil.Eventually(t, 20*time.Second, time.Millisecond, func() error {
		if got = f.of(id); len(got) < n {
			return fmt.Errorf("%d firings of %s, want %d", len(got), id, n)
		}
		return nil
	})
	return got
}

// beforeDue runs try with due times ever further ahead (100ms, 400ms, …,
// 6.4s) until try reports that its setup ended before the due time it was
// given, which the test's checks rely on (a loaded machine may take
// longer); it fails the test if none did. Each try uses fresh entities.
func beforeDue(t *testing.T, try func(i int, due time.Time) bool) {
	t.Helper()
	for i, ahead := range []time.Duration{100 * time.Millisecond, 400 * time.Millisecond, 1600 * time.Millisecond, 6400 * time.Millisecond} {
		if try(i, time.Now().Add(ahead)) {
			return
		}
		t.Logf("the setup took longer than %v; again, further ahead", ahead)
	}
	t.Fatal("the setup never ended before the due time")
}

// A reminder fires after its due time, as a request with the reminder's
// request ID, applied with its write; the fired one-shot reminder is gone
// from the record and from the index. (The host traces its store calls:
// the store it wraps keeps its index.)
func TestReminderFiresAfterDue(t *testing.T) {
	store, f := memory.New(), &firings{}
	_, tp := newTracer(t)
	host := remindHost(t, store, f, 1, func(c *actors.HostConfig) { c.Tracer = tp.Tracer(actors.TracerName) })
	// Stored with the record, and indexed under its due time.
	far := time.Now().Add(time.Hour).UnixNano()
	require.NoError(t, setReminder(t, host, "a", &testpb.Remind{Name: "r", DueUnixNano: far, Delta: 5}))
	rec, rems := stored(t, store, "a")
	require.Len(t, rems, 1)
	require.Equal(t, "r", rems[0].GetName())
	require.Equal(t, far, rec.Due)
	require.Equal(t, []persistence.DueEntry{{Kind: "reminded", ID: "a", Due: far}}, indexed(t, store, 4))

	due := time.Now().Add(50 * time.Millisecond)
	require.NoError(t, setReminder(t, host, "a", &testpb.Remind{Name: "r", DueUnixNano: due.UnixNano(), Delta: 5}))
	ran := waitFired(t, f, "a", 1)
	name, at := firingDue(t, ran[0])
	require.Equal(t, "r", name)
	require.Equal(t, due.UnixNano(), at.UnixNano())
	require.False(t, time.Now().Before(due), "fired before its due time")
	require.EqualValues(t, 5, remindedValue(t, host, "a"))
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		rec, rems := stored(t, store, "a")
		if len(rems) != 0 || rec.Due != 0 || len(indexed(t, store, 4)) != 0 {
			return fmt.Errorf("reminders %v, due %d, index %v", rems, rec.Due, indexed(t, store, 4))
		}
		return nil
	})
	require.EqualValues(t, 1, host.Stats().RemindersFired)
}

// An entity with a reminder does not stay active for it, and is not
// activated before the reminder is due: the index, not the entity, waits.
func TestReminderDoesNotActivateEarly(t *testing.T) {
	store, f := memory.New(), &firings{}
	host := remindHost(t, store, f, 1, nil)
	beforeDue(t, func(i int, due time.Time) bool {
		id := fmt.Sprint("idle", i)
		require.NoError(t, setReminder(t, host, id, &testpb.Remind{Name: "r", DueUnixNano: due.UnixNano(), Delta: 1}))
		// The shard moves (here: to the same host, at a new epoch): the
		// entity stops with its old ownership.
		shard := actors.ShardOf(remindRef(id), 4)
		epoch := host.Owned()[shard]
		require.NoError(t, host.Release(testCtx(t), shard, epoch))
		require.NoError(t, host.Own(shard, epoch+1))
		activations := host.Stats().Activations
		if host.IsActive(remindRef(id)) || !time.Now().Before(due) {
			return false
		}
		// Sample until it fired: not active again before its due time.
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		deadline := time.Now().Add(20 * time.Second)
		for len(f.of(id)) == 0 {
			now := time.Now()
			if host.IsActive(remindRef(id)) {
				require.False(t, now.Before(due), "activated %v before its due time", due.Sub(now))
			}
			require.True(t, now.Before(deadline), "no firing")
			<-tick.C
		}
		require.EqualValues(t, activations+1, host.Stats().Activations)
		return true
	})
}

// A periodic reminder fires once per period, at due + k·period; cancelled,
// it fires no more.
func TestReminderPeriodic(t *testing.T) {
	store, f := memory.New(), &firings{}
	host := remindHost(t, store, f, 1, nil)
	due := time.Now().Add(20 * time.Millisecond)
	const period = 40 * time.Millisecond
	require.NoError(t, setReminder(t, host, "p", &testpb.Remind{Name: "r", DueUnixNano: due.UnixNano(),
		PeriodMillis: period.Milliseconds(), Delta: 1}))
	ran := waitFired(t, f, "p", 3)
	var last time.Time
	for i, id := range ran {
		_, at := firingDue(t, id)
		k := at.Sub(due) / period
		require.Equal(t, due.Add(k*period).UnixNano(), at.UnixNano(), "firing %d is not at due + k·period", i)
		require.True(t, at.After(last), "firing %d at %v repeats or goes back", i, at)
		last = at
	}
	require.NoError(t, setReminder(t, host, "p", &testpb.Remind{Name: "r", Cancel: true}))
	n := len(f.of("p"))
	v := remindedValue(t, host, "p")
	require.EqualValues(t, n, v, "one applied firing per run")

	// A probe reminder due after several more periods fires; the
	// cancelled one did not meanwhile.
	require.NoError(t, setReminder(t, host, "p", &testpb.Remind{Name: "probe",
		DueUnixNano: time.Now().Add(4 * period).UnixNano(), Delta: 100}))
	ran = waitFired(t, f, "p", n+1)
	require.Len(t, ran, n+1)
	name, _ := firingDue(t, ran[n])
	require.Equal(t, "probe", name)
}

// Cancelled reminders, and reminders set by a run that failed, never fire.
func TestReminderCancelledNeverFires(t *testing.T) {
	store, f := memory.New(), &firings{}
	host := remindHost(t, store, f, 1, nil)
	beforeDue(t, func(i int, dueAt time.Time) bool {
		c, d := fmt.Sprint("c", i), fmt.Sprint("d", i)
		soon := dueAt.UnixNano()
		require.NoError(t, setReminder(t, host, c, &testpb.Remind{Name: "cancelled", DueUnixNano: soon, Delta: 1}))
		require.NoError(t, setReminder(t, host, c, &testpb.Remind{Name: "cancelled", Cancel: true}))
		err := setReminder(t, host, c, &testpb.Remind{Name: "failed", DueUnixNano: soon, Delta: 10, Fail: true})
		require.ErrorIs(t, err, actors.ErrHandler)
		// Replaced: only the replacement fires.
		require.NoError(t, setReminder(t, host, c, &testpb.Remind{Name: "replaced", DueUnixNano: soon, Delta: 1000}))
		require.NoError(t, setReminder(t, host, c, &testpb.Remind{Name: "replaced", DueUnixNano: soon + 1, Delta: 100}))
		_, rems := stored(t, store, c)
		require.Len(t, rems, 1)
		// Cancelled by the entity's next activation, after its shard moved.
		require.NoError(t, setReminder(t, host, d, &testpb.Remind{Name: "x", DueUnixNano: soon, Delta: 1}))
		shard := actors.ShardOf(remindRef(d), 4)
		require.NoError(t, host.Release(testCtx(t), shard, host.Owned()[shard]))
		require.NoError(t, host.Own(shard, 10+int64(i)))
		require.NoError(t, setReminder(t, host, d, &testpb.Remind{Name: "x", Cancel: true}))
		if !time.Now().Before(dueAt) {
			return false
		}

		// A probe due later than all of them fires after they would have.
		probe := soon + int64(100*time.Millisecond)
		require.NoError(t, setReminder(t, host, c, &testpb.Remind{Name: "probe", DueUnixNano: probe, Delta: 7}))
		require.NoError(t, setReminder(t, host, d, &testpb.Remind{Name: "probe", DueUnixNano: probe, Delta: 7}))
		ran := waitFired(t, f, c, 2)
		waitFired(t, f, d, 1)
		name, _ := firingDue(t, ran[0])
		require.Equal(t, "replaced", name)
		name, _ = firingDue(t, ran[1])
		require.Equal(t, "probe", name)
		require.EqualValues(t, 107, remindedValue(t, host, c))
		require.EqualValues(t, 7, remindedValue(t, host, d))
		require.Len(t, f.of(d), 1)
		return true
	})
}

// A reminder set on a host that crashes before it is due fires on the
// shard's next owner.
func TestReminderSurvivesCrash(t *testing.T) {
	store, f := memory.New(), &firings{}
	a := remindHost(t, store, f, 1, func(c *actors.HostConfig) { c.ReminderTick = time.Hour })
	due := time.Now().Add(50 * time.Millisecond)
	require.NoError(t, setReminder(t, a, "k", &testpb.Remind{Name: "r", DueUnixNano: due.UnixNano(), Delta: 3}))
	a.DropAll(actors.ErrFenced) // its lease is gone: it stops without a word

	b := remindHost(t, store, f, 2, nil)
	ran := waitFired(t, f, "k", 1)
	require.Len(t, ran, 1)
	require.EqualValues(t, 3, remindedValue(t, b, "k"))
	require.Zero(t, a.Stats().RemindersFired)
}

// A reminder whose shard is handed off before it is due fires on the new
// owner. (The former owner does not look for due reminders here, so the
// firing cannot be its own.)
func TestReminderSurvivesHandoff(t *testing.T) {
	store, f := memory.New(), &firings{}
	a := remindHost(t, store, f, 1, func(c *actors.HostConfig) { c.ReminderTick = time.Hour })
	due := time.Now().Add(150 * time.Millisecond)
	require.NoError(t, setReminder(t, a, "h", &testpb.Remind{Name: "r", DueUnixNano: due.UnixNano(), Delta: 4}))
	shard := actors.ShardOf(remindRef("h"), 4)
	require.NoError(t, a.Release(testCtx(t), shard, 1))

	cfg := remindCfg(nil)
	b := startHost(t, cfg, actors.HostDeps{Store: memoryView{store}}, remindedKind(t, f))
	require.NoError(t, b.Own(shard, 2))
	ran := waitFired(t, f, "h", 1)
	require.Len(t, ran, 1)
	require.False(t, time.Now().Before(due))
	require.EqualValues(t, 4, remindedValue(t, b, "h"))
	require.Zero(t, a.Stats().RemindersFired)
	require.EqualValues(t, 1, b.Stats().RemindersFired)
}

// A firing is applied at most once per due time: a run that sets the
// reminder that fired again at the same due time gets the firing's stored
// reply at the next delivery (its request ID is the same) and nothing
// runs; a firing whose write landed although its owner lost the
// acknowledgement is not fired again by the shard's next owner; and one
// whose write was fenced (its owner was superseded meanwhile) is fired by
// the new owner, once.
func TestReminderFiresOncePerDueTime(t *testing.T) {
	t.Run("SameDueAgain", func(t *testing.T) {
		store, f := memory.New(), &firings{}
		host := remindHost(t, store, f, 1, nil)
		due := time.Now().Add(20 * time.Millisecond).UnixNano()
		require.NoError(t, setReminder(t, host, "s", &testpb.Remind{Name: "r", DueUnixNano: due, Delta: 1, Rearm: true}))
		waitFired(t, f, "s", 1)
		testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
			if _, rems := stored(t, store, "s"); len(rems) != 0 {
				return fmt.Errorf("reminders left: %v", rems)
			}
			return nil
		})
		require.Len(t, f.of("s"), 1, "the same due time ran twice")
		require.EqualValues(t, 1, remindedValue(t, host, "s"))
		require.EqualValues(t, 2, host.Stats().RemindersFired, "the second firing answered from the dedup window")
	})

	t.Run("LostAcknowledgement", func(t *testing.T) {
		var store *memory.Store
		var f *firings
		var a *actors.Host
		beforeDue(t, func(_ int, due time.Time) bool {
			store, f = memory.New(), &firings{}
			a = remindHost(t, store, f, 1, nil)
			require.NoError(t, setReminder(t, a, "l", &testpb.Remind{Name: "r", DueUnixNano: due.UnixNano(), Delta: 1}))
			store.LoseNextAcks(1, nil) // the firing's write lands, its owner does not know
			return time.Now().Before(due)
		})
		waitFired(t, f, "l", 1)
		shard := actors.ShardOf(remindRef("l"), 4)
		testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
			if _, owned := a.Owned()[shard]; owned {
				return errors.New("the shard is still owned")
			}
			return nil
		})
		_, rems := stored(t, store, "l")
		require.Empty(t, rems, "the firing's write landed")
		b := startHost(t, remindCfg(nil), actors.HostDeps{Store: memoryView{store}}, remindedKind(t, f))
		require.NoError(t, b.Own(shard, 2))
		require.EqualValues(t, 1, remindedValue(t, b, "l"))
		// A probe on the same entity fires after the first would have
		// fired again.
		require.NoError(t, setReminder(t, b, "l", &testpb.Remind{Name: "probe", DueUnixNano: time.Now().UnixNano(), Delta: 10}))
		ran := waitFired(t, f, "l", 2)
		require.Len(t, ran, 2)
		name, _ := firingDue(t, ran[1])
		require.Equal(t, "probe", name)
		require.EqualValues(t, 11, remindedValue(t, b, "l"))
	})

	t.Run("FencedFiring", func(t *testing.T) {
		var store *memory.Store
		var f *firings
		var release func()
		beforeDue(t, func(_ int, due time.Time) bool {
			store, f = memory.New(), &firings{}
			a := remindHost(t, store, f, 1, nil)
			require.NoError(t, setReminder(t, a, "x", &testpb.Remind{Name: "r", DueUnixNano: due.UnixNano(), Delta: 1}))
			release = store.BlockSaves() // the firing's write waits...
			if !time.Now().Before(due) {
				release()
				return false
			}
			return true
		})
		waitFired(t, f, "x", 1)
		shard := actors.ShardOf(remindRef("x"), 4)
		require.NoError(t, store.Fence(testCtx(t), shard, 2)) // ...while a new owner takes the shard
		release()
		b := startHost(t, remindCfg(nil), actors.HostDeps{Store: memoryView{store}}, remindedKind(t, f))
		require.NoError(t, b.Own(shard, 2))
		ran := waitFired(t, f, "x", 2)
		require.Equal(t, ran[0], ran[1], "the same due time, fired again by the new owner")
		require.EqualValues(t, 1, remindedValue(t, b, "x"), "applied once")
		testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
			if _, rems := stored(t, store, "x"); len(rems) != 0 {
				return fmt.Errorf("reminders left: %v", rems)
			}
			return nil
		})
		require.Len(t, f.of("x"), 2)
	})
}

// A reminder whose message has a read handler fires, and is removed by a
// write of its own; a read handler may not change reminders.
func TestReminderReadHandler(t *testing.T) {
	store, f := memory.New(), &firings{}
	host := remindHost(t, store, f, 1, nil)
	require.NoError(t, setReminder(t, host, "g", &testpb.Remind{Name: "read", DueUnixNano: time.Now().UnixNano(), Read: true}))
	waitFired(t, f, "g", 1)
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if _, rems := stored(t, store, "g"); len(rems) != 0 {
			return fmt.Errorf("reminders left: %v", rems)
		}
		return nil
	})
	require.Len(t, f.of("g"), 1)
}

// Reminders are validated like timers, bounded per entity, and refused
// over a store without a reminder index.
func TestReminderLimits(t *testing.T) {
	store := memory.New()
	host := remindHost(t, store, nil, 1, nil)
	far := time.Now().Add(time.Hour).UnixNano()
	for i := range actors.MaxReminders {
		require.NoError(t, setReminder(t, host, "l", &testpb.Remind{Name: fmt.Sprint("r", i), DueUnixNano: far}))
	}
	require.NoError(t, setReminder(t, host, "l", &testpb.Remind{Name: "r0", DueUnixNano: far + 1}), "replacing stays within the bound")
	err := setReminder(t, host, "l", &testpb.Remind{Name: "extra", DueUnixNano: far})
	require.ErrorIs(t, err, actors.ErrHandler)
	require.ErrorContains(t, err, "MaxReminders")
	rec, rems := stored(t, store, "l")
	require.Len(t, rems, actors.MaxReminders)
	require.Equal(t, far, rec.Due)

	for _, bad := range []*testpb.Remind{
		{Name: "", DueUnixNano: far},
		{Name: strings.Repeat("n", 129), DueUnixNano: far},
		{Name: "zero", DueUnixNano: 0},
		{Name: "negative", DueUnixNano: far, PeriodMillis: -1},
	} {
		err := setReminder(t, host, "m", bad)
		require.ErrorIs(t, err, actors.ErrHandler, "%v", bad)
	}
	// Reminder reads what the run leaves.
	v, err := actors.Call[*testpb.Value](testCtx(t), host, remindRef("l"), &testpb.Reject{Code: "r0"})
	require.NoError(t, err)
	require.Equal(t, far+1, v.GetValue())
	v, err = actors.Call[*testpb.Value](testCtx(t), host, remindRef("l"), &testpb.Reject{Code: "none"})
	require.NoError(t, err)
	require.EqualValues(t, -1, v.GetValue())

	// A store without an index: setting a reminder fails.
	noIndex := startHost(t, remindCfg(nil), actors.HostDeps{Store: plainStore{memory.New()}}, remindedKind(t, nil))
	ownAll(t, noIndex, 4)
	err = setReminder(t, noIndex, "n", &testpb.Remind{Name: "r", DueUnixNano: far})
	require.ErrorContains(t, err, "reminder index")
	require.Zero(t, noIndex.Stats().ReminderScans)
}

// plainStore hides every optional interface of its store.
type plainStore struct{ s *memory.Store }

func (p plainStore) Fence(ctx context.Context, shard uint32, epoch int64) error {
	return p.s.Fence(ctx, shard, epoch)
}
func (p plainStore) Load(ctx context.Context, kind, id string) (persistence.Record, error) {
	return p.s.Load(ctx, kind, id)
}
func (p plainStore) Save(ctx context.Context, recs []persistence.Record) (map[uint32]error, error) {
	return p.s.Save(ctx, recs)
}
func (p plainStore) Close() error { return p.s.Close() }

// A shard in which nothing is due is not read at every tick: once scanned
// when the host takes it, it is read again only when a write gives it a
// due time.
func TestReminderIdleShardsNotScanned(t *testing.T) {
	store, f := memory.New(), &firings{}
	host := remindHost(t, store, f, 1, func(c *actors.HostConfig) { c.ReminderTick = time.Millisecond })
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if n := host.Stats().ReminderScans; n < 4 {
			return fmt.Errorf("%d scans", n)
		}
		return nil
	})
	// Writes without reminders leave the shards idle; one with a reminder
	// far ahead costs one more scan of its shard.
	for i := range 20 {
		_, err := actors.Call[*testpb.Value](testCtx(t), host, remindRef(fmt.Sprint("w", i)), &testpb.Remind{Name: "x", Cancel: true})
		require.NoError(t, err)
	}
	require.NoError(t, setReminder(t, host, "far", &testpb.Remind{Name: "r", DueUnixNano: time.Now().Add(time.Hour).UnixNano()}))
	require.NoError(t, setReminder(t, host, "soon", &testpb.Remind{Name: "r", DueUnixNano: time.Now().UnixNano(), Delta: 1}))
	waitFired(t, f, "soon", 1)
	// Many ticks later (a second reminder fired in between), the scans
	// are few: one per shard at the start, one per due time written.
	require.NoError(t, setReminder(t, host, "soon", &testpb.Remind{Name: "r", DueUnixNano: time.Now().Add(50 * time.Millisecond).UnixNano(), Delta: 1}))
	waitFired(t, f, "soon", 2)
	scans := host.Stats().ReminderScans
	require.LessOrEqual(t, scans, uint64(4+8), "scans")
	require.Positive(t, store.DueQueries())
}

// staleIndex lists, besides its store's entries, one entry the store's
// records do not have (as an etcd index may keep after a wrong PrevDue),
// until a Save of that record names it as its PrevDue.
type staleIndex struct {
	*memory.Store
	mu      sync.Mutex
	stale   persistence.DueEntry
	removed bool
}

func (s *staleIndex) Close() error { return nil }

func (s *staleIndex) Due(ctx context.Context, shard uint32, upTo int64, limit int) ([]persistence.DueEntry, error) {
	out, err := s.Store.Due(ctx, shard, upTo, limit)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil && !s.removed && shard == actors.ShardOf(remindRef(s.stale.ID), 4) && s.stale.Due <= upTo {
		out = append([]persistence.DueEntry{s.stale}, out...)
	}
	return out, err
}

func (s *staleIndex) Save(ctx context.Context, recs []persistence.Record) (map[uint32]error, error) {
	out, err := s.Store.Save(ctx, recs)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range recs {
		if err == nil && out[r.Shard] == nil && r.ID == s.stale.ID && r.PrevDue == s.stale.Due {
			s.removed = true
		}
	}
	return out, err
}

func (s *staleIndex) isRemoved() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.removed
}

// An index entry the entity's record does not have fires nothing, and
// the entity's next write removes it (its PrevDue names it).
func TestReminderStaleIndexEntry(t *testing.T) {
	mem, f := memory.New(), &firings{}
	idx := &staleIndex{Store: mem}
	cfg := remindCfg(nil)
	pre := startHost(t, cfg, actors.HostDeps{Store: memoryView{mem}}, remindedKind(t, f))
	ownAll(t, pre, 4)
	far := time.Now().Add(time.Hour).UnixNano()
	require.NoError(t, setReminder(t, pre, "st", &testpb.Remind{Name: "r", DueUnixNano: far, Delta: 1}))
	require.NoError(t, pre.Shutdown(testCtx(t)))

	idx.stale = persistence.DueEntry{Kind: "reminded", ID: "st", Due: time.Now().Add(-time.Minute).UnixNano()}
	host := startHost(t, cfg, actors.HostDeps{Store: idx}, remindedKind(t, f))
	for s := range 4 {
		require.NoError(t, host.Own(uint32(s), 2))
	}
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if !idx.isRemoved() {
			return errors.New("stale entry still listed")
		}
		return nil
	})
	require.Empty(t, f.of("st"))
	rec, rems := stored(t, mem, "st")
	require.Len(t, rems, 1)
	require.Equal(t, far, rec.Due)
	require.Zero(t, remindedValue(t, host, "st"))
}

// 100,000 entities, each with one reminder due soon, on one host with
// room for few active entities: every reminder fires exactly once, and
// the active entities stay bounded while they fire (sampled), far below
// the number of reminders: a delivery activates an entity only while
// fewer than MaxActive + ReminderBatch are active, however far
// passivation lags behind. (10,000 with -short.)
func TestManyRemindersBoundedActive(t *testing.T) {
	n := 100_000
	if testing.Short() {
		n = 10_000
	}
	const (
		shards    = 8
		maxActive = 500
		batch     = 256
	)
	store := memory.New()
	t.Cleanup(func() { store.Close() })
	// The entities registered their reminders earlier (on a host that is
	// gone): the records, with their due times, are in the store.
	due := time.Now().Add(time.Second)
	start := time.Now()
	seedReminders(t, store, n, shards, due)
	t.Logf("seeded %d records in %v", n, time.Since(start))

	var ticks sync.Map
	cfg := boundedReminders(shards, maxActive, batch)
	host := startHost(t, cfg, actors.HostDeps{Store: memoryView{store}}, tickedOnce(&ticks))
	for s := range shards {
		require.NoError(t, host.Own(uint32(s), 2))
	}
	bound := maxActive + batch
	peak := 0
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(10 * time.Minute)
	for host.Stats().RemindersFired < uint64(n) {
		st := host.Stats()
		peak = max(peak, st.Active)
		require.LessOrEqual(t, st.Active, bound, "active entities while firing (%d fired)", st.RemindersFired)
		require.True(t, time.Now().Before(deadline), "%d of %d fired", st.RemindersFired, n)
		<-tick.C
	}
	elapsed := time.Since(due)
	testutil.Eventually(t, time.Minute, 10*time.Millisecond, func() error {
		if left := len(indexed(t, store, shards)); left > 0 {
			return fmt.Errorf("%d index entries left", left)
		}
		return nil
	})
	st := host.Stats()
	t.Logf("%d reminders fired in %v after their due time; peak active %d (bound %d), activations %d, scans %d, saves %d",
		st.RemindersFired, elapsed, peak, bound, st.Activations, st.ReminderScans, st.Batch.Saves)
	require.EqualValues(t, n, st.RemindersFired)
	count := 0
	ticks.Range(func(any, any) bool { count++; return true })
	require.Equal(t, n, count)
	for _, id := range []int{0, n / 2, n - 1} {
		rec, rems := stored(t, store, fmt.Sprint("e", id))
		require.Empty(t, rems)
		require.Zero(t, rec.Due)
		var er ordopb.EntityRecord
		require.NoError(t, proto.Unmarshal(rec.Data, &er))
		var c testpb.Counter
		require.NoError(t, proto.Unmarshal(er.GetState(), &c))
		require.EqualValues(t, 1, c.GetValue())
	}
}

// Reminder deliveries wait while the host has MaxActive + ReminderBatch
// entities active and none of them can passivate yet (each is in a run:
// the eviction's passivation waits behind it, and is withdrawn), and none
// is lost: once the runs end, the host asks for the passivations again
// (its sweep), every reminder fires, once, and the active entities never
// exceed the bound on the way. No entity is idle long enough for
// IdleTimeout to passivate it meanwhile.
func TestRemindersWaitWhilePassivationLags(t *testing.T) {
	const (
		shards    = 2
		maxActive = 4
		batch     = 2
		n         = 30
	)
	store := memory.New()
	t.Cleanup(func() { store.Close() })
	release := make(chan struct{})
	var ticks sync.Map
	busy := actors.MustKind("busy", func() *testpb.Counter { return new(testpb.Counter) },
		actors.On(func(c *ctxT, m *testpb.Add) (*testpb.Value, error) {
			<-release
			c.State.Value += m.Delta
			return &testpb.Value{Value: c.State.Value}, nil
		}))
	cfg := boundedReminders(shards, maxActive, batch)
	cfg.IdleTimeout = time.Hour
	host := startHost(t, cfg, actors.HostDeps{Store: memoryView{store}}, busy, tickedOnce(&ticks))
	bound := maxActive + batch
	checkBound := func() {
		t.Helper()
		require.LessOrEqual(t, host.Stats().Active, bound, "active entities")
	}

	// Shard 0: bound busy entities, each in a run that waits for release.
	// The host asks the oldest to passivate; none can before its run ends.
	ctx := testCtx(t)
	require.NoError(t, store.Fence(ctx, 0, 1))
	require.NoError(t, host.Own(0, 2))
	var wg sync.WaitGroup
	defer func() {
		select {
		case <-release:
		default:
			close(release) // the test failed first: let the runs end
		}
		wg.Wait()
	}()
	for i, started := 0, 0; started < bound; i++ {
		ref := actors.Ref{Kind: "busy", ID: fmt.Sprint("b", i)}
		if actors.ShardOf(ref, shards) != 0 {
			continue
		}
		started++
		wg.Go(func() {
			_, err := actors.Call[*testpb.Value](ctx, host, ref, &testpb.Add{Delta: 1})
			if err != nil {
				t.Errorf("%s: %v", ref, err)
			}
		})
	}
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if st := host.Stats(); st.Active != bound {
			return fmt.Errorf("%d busy entities active, want %d", st.Active, bound)
		}
		return nil
	})

	// Shard 1: n entities with a reminder due now, stored by a host that
	// is gone. The loop finds them due and has no room for them.
	var ids []string
	for i := 0; len(ids) < n; i++ {
		if id := fmt.Sprint("e", i); actors.ShardOf(remindRef(id), shards) == 1 {
			ids = append(ids, id)
		}
	}
	seedRemindersOf(t, store, ids, shards, time.Now())
	require.NoError(t, host.Own(1, 2))
	waits := host.Stats().ReminderWaits
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		checkBound()
		if w := host.Stats().ReminderWaits; w < waits+3 {
			return fmt.Errorf("the reminder loop waited %d times since shard 1 was taken, want 3", w-waits)
		}
		return nil
	})
	st := host.Stats()
	require.Zero(t, st.RemindersFired, "reminders fired while %d entities were active and none could go", st.Active)
	require.Equal(t, bound, st.Active)

	// The runs end: the busy entities passivate, and every reminder fires.
	close(release)
	testutil.Eventually(t, time.Minute, time.Millisecond, func() error {
		checkBound()
		if st := host.Stats(); st.RemindersFired < n {
			return fmt.Errorf("%d of %d reminders fired", st.RemindersFired, n)
		}
		return nil
	})
	wg.Wait()
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		if left := len(indexed(t, store, shards)); left > 0 {
			return fmt.Errorf("%d index entries left", left)
		}
		return nil
	})
	require.EqualValues(t, n, host.Stats().RemindersFired)
	for _, id := range ids {
		_, ok := ticks.Load(id)
		require.True(t, ok, "%s never ticked", id)
		require.EqualValues(t, 1, storedValue(t, store, "reminded", id), id)
	}
}

// tickedOnce is the kind of the seeded reminders' entities (seedReminders):
// it adds each Tick to its counter, notes the entity in ticks, and fails
// an entity's second Tick.
func tickedOnce(ticks *sync.Map) actors.Kind {
	return actors.MustKind("reminded", func() *testpb.Counter { return new(testpb.Counter) },
		actors.On(func(c *ctxT, m *testpb.Tick) (*testpb.Value, error) {
			c.State.Value += m.Delta
			if _, dup := ticks.LoadOrStore(c.Ref().ID, true); dup {
				return nil, fmt.Errorf("%s ticked twice", c.Ref().ID)
			}
			return &testpb.Value{Value: c.State.Value}, nil
		}))
}

// boundedReminders is a local host's config of shards shards, MaxActive
// maxActive and ReminderBatch batch, that looks for due reminders every
// 5 ms.
func boundedReminders(shards uint32, maxActive, batch int) actors.HostConfig {
	cfg := actors.DefaultLocalConfig()
	cfg.Shards = shards
	cfg.MaxActive = maxActive
	cfg.ReminderBatch = batch
	cfg.ReminderTick = 5 * time.Millisecond
	return cfg
}

// seedReminders writes n records of "reminded" entities e0…e(n-1), each
// with one reminder "r" due at due that delivers Tick{1}, under epoch 1.
func seedReminders(t *testing.T, store *memory.Store, n int, shards uint32, due time.Time) {
	t.Helper()
	ids := make([]string, n)
	for i := range n {
		ids[i] = fmt.Sprint("e", i)
	}
	seedRemindersOf(t, store, ids, shards, due)
}

// seedRemindersOf is seedReminders for the "reminded" entities ids; it
// fences their shards at epoch 1.
func seedRemindersOf(t *testing.T, store *memory.Store, ids []string, shards uint32, due time.Time) {
	t.Helper()
	ctx := testCtx(t)
	fenced := make(map[uint32]bool)
	for _, id := range ids {
		if s := actors.ShardOf(remindRef(id), shards); !fenced[s] {
			require.NoError(t, store.Fence(ctx, s, 1))
			fenced[s] = true
		}
	}
	msg, err := anypb.New(&testpb.Tick{Delta: 1})
	require.NoError(t, err)
	var recs []persistence.Record
	flush := func() {
		out, err := store.Save(ctx, recs)
		require.NoError(t, err)
		for _, e := range out {
			require.NoError(t, e)
		}
		recs = recs[:0]
	}
	for _, id := range ids {
		ref := remindRef(id)
		data, err := proto.Marshal(&ordopb.EntityRecord{State: []byte{}, Epoch: 1, Seq: 1,
			Reminders: []*ordopb.Reminder{{Name: "r", DueUnixNano: due.UnixNano(), Message: msg}}})
		require.NoError(t, err)
		recs = append(recs, persistence.Record{Kind: ref.Kind, ID: ref.ID, Shard: actors.ShardOf(ref, shards), Epoch: 1,
			Data: data, Due: due.UnixNano()})
		if len(recs) == 1000 {
			flush()
		}
	}
	if len(recs) > 0 {
		flush()
	}
}

// prevDueIndex keeps a reminder index as etcd does: from each Save's
// PrevDue and Due alone, never reading the old record.
type prevDueIndex struct {
	*memory.Store
	mu      sync.Mutex
	entries map[persistence.DueEntry]bool
}

func (s *prevDueIndex) Close() error { return nil }

func (s *prevDueIndex) Save(ctx context.Context, recs []persistence.Record) (map[uint32]error, error) {
	out, err := s.Store.Save(ctx, recs)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range recs {
		if err != nil || out[r.Shard] != nil || r.Due == r.PrevDue {
			continue
		}
		if r.PrevDue > 0 {
			delete(s.entries, persistence.DueEntry{Kind: r.Kind, ID: r.ID, Due: r.PrevDue})
		}
		if r.Due > 0 {
			s.entries[persistence.DueEntry{Kind: r.Kind, ID: r.ID, Due: r.Due}] = true
		}
	}
	return out, err
}

// The due times the runtime gives the store as PrevDue are exact, writes
// coalesced by the batcher included: an index kept from them alone (as
// etcd keeps it) ends equal to the records' due times.
func TestReminderPrevDueIsExact(t *testing.T) {
	seed := storetest.Seed(t)
	mem := memory.New()
	idx := &prevDueIndex{Store: mem, entries: map[persistence.DueEntry]bool{}}
	host := startHost(t, remindCfg(nil), actors.HostDeps{Store: idx}, remindedKind(t, nil))
	ownAll(t, host, 4)
	rng := rand.New(rand.NewPCG(seed, 1))
	far := time.Now().Add(time.Hour).UnixNano()
	ids := []string{"p0", "p1", "p2", "p3"}
	for round := range 20 {
		// Saves wait while the entities make several writes each: all but
		// the first of an entity's writes coalesce in the batcher.
		release := mem.BlockSaves()
		replies := make(chan *ordopb.Reply, len(ids)*4)
		for _, id := range ids {
			for i := range 4 {
				m := &testpb.Remind{Name: fmt.Sprint("r", rng.IntN(3)), DueUnixNano: far + rng.Int64N(1000)}
				m.Cancel = rng.IntN(3) == 0
				payload, err := anypb.New(m)
				require.NoError(t, err)
				host.Submit(&ordopb.Envelope{Target: remindRef(id).Proto(), RequestId: fmt.Sprint(id, "-", round, "-", i),
					Payload: payload}, func(r *ordopb.Reply) { replies <- r })
			}
		}
		testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
			if n := host.Stats().Batch.Writes; n < uint64(len(ids)*4*(round+1)) {
				return fmt.Errorf("%d writes", n)
			}
			return nil
		})
		release()
		for range len(ids) * 4 {
			require.Nil(t, (<-replies).GetError())
		}
	}
	want := map[persistence.DueEntry]bool{}
	for _, id := range ids {
		if rec, _ := stored(t, mem, id); rec.Due > 0 {
			want[persistence.DueEntry{Kind: "reminded", ID: id, Due: rec.Due}] = true
		}
	}
	idx.mu.Lock()
	defer idx.mu.Unlock()
	require.Equal(t, want, idx.entries, "replay with ORDO_SEED=%d", seed)
	require.NotEmpty(t, want)
}

// Index entries of a kind the host does not run (a kind removed, or added
// by a rolling deploy not yet on this node) stay due in the index; however
// many there are ahead of them, the reminders of the host's own entities
// behind them fire. (A scan reads ReminderBatch entries: before, a shard
// whose first ReminderBatch due entries were all of other kinds was read
// again and again and never got past them.)
func TestReminderBehindEntriesOfOtherKinds(t *testing.T) {
	store, f := memory.New(), &firings{}
	const shards, batch = 4, 4
	const others = 10 * batch
	ctx := testCtx(t)
	shard := actors.ShardOf(remindRef("a"), shards)
	require.NoError(t, store.Fence(ctx, shard, 1))
	past := time.Now().Add(-time.Hour).UnixNano()
	var recs []persistence.Record
	for i := range others {
		recs = append(recs, persistence.Record{Kind: "retired", ID: fmt.Sprint("r", i), Shard: shard, Epoch: 1,
			Data: []byte{1}, Due: past + int64(i)})
	}
	out, err := store.Save(ctx, recs)
	require.NoError(t, err)
	require.NoError(t, out[shard])

	host := remindHost(t, store, f, 2, func(c *actors.HostConfig) { c.Shards = shards; c.ReminderBatch = batch })
	require.NoError(t, setReminder(t, host, "a", &testpb.Remind{Name: "r", DueUnixNano: time.Now().UnixNano(), Delta: 5}))
	waitFired(t, f, "a", 1)
	require.EqualValues(t, 5, remindedValue(t, host, "a"))
	// The other kind's entries are left as they were.
	due, err := store.Due(ctx, shard, 1<<62, 1_000_000)
	require.NoError(t, err)
	require.Len(t, due, others)
}
