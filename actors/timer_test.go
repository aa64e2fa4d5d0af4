package actors_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/ordo-actors/ordo/persistence/memory"
	"github.com/ordo-actors/ordo/proto/ordopb"
	"github.com/ordo-actors/ordo/proto/testpb"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
)

type ctxT = actors.Context[*testpb.Counter]

// timedKind is a counter whose Arm message sets or cancels timers that
// add to it.
func timedKind(fired chan<- int64) *actors.KindOf[*testpb.Counter] {
	return actors.MustKind("timed", func() *testpb.Counter { return new(testpb.Counter) },
		actors.On(func(c *ctxT, m *testpb.Arm) (*testpb.Value, error) {
			for i := range max(m.Count, 1) {
				name := m.Name
				if i > 0 {
					name = fmt.Sprint(m.Name, "-", i)
				}
				if m.Cancel {
					c.CancelTimer(name)
					continue
				}
				if err := c.After(time.Duration(m.DelayMillis)*time.Millisecond, name, &testpb.Add{Delta: m.Delta}); err != nil {
					return nil, actors.HandlerError("after", "%v", err)
				}
			}
			if m.Fail {
				return nil, actors.HandlerError("fail", "failing after setting timers")
			}
			return &testpb.Value{Value: c.State.Value}, nil
		}),
		actors.On(func(c *ctxT, m *testpb.Add) (*testpb.Value, error) {
			c.State.Value += m.Delta
			if fired != nil {
				fired <- m.Delta
			}
			return &testpb.Value{Value: c.State.Value}, nil
		}),
		actors.OnRead(func(c *ctxT, m *testpb.Get) (*testpb.Value, error) {
			return &testpb.Value{Value: c.State.Value}, nil
		}),
	)
}

func timedHost(t *testing.T, fired chan<- int64, tweak func(*actors.HostConfig)) (*actors.Host, *memory.Store) {
	cfg := actors.DefaultLocalConfig()
	cfg.Shards = 4
	if tweak != nil {
		tweak(&cfg)
	}
	store := memory.New()
	host := startHost(t, cfg, actors.HostDeps{Store: memoryView{store}}, timedKind(fired))
	ownAll(t, host, cfg.Shards)
	t.Cleanup(func() { store.Close() })
	return host, store
}

func arm(t *testing.T, host *actors.Host, id string, m *testpb.Arm) error {
	t.Helper()
	_, err := actors.Call[*testpb.Value](testCtx(t), host, actors.Ref{Kind: "timed", ID: id}, m)
	return err
}

func timedValue(t *testing.T, host *actors.Host, id string) int64 {
	t.Helper()
	v, err := actors.Call[*testpb.Value](testCtx(t), host, actors.Ref{Kind: "timed", ID: id}, &testpb.Get{})
	require.NoError(t, err)
	return v.GetValue()
}

// A timer fires after its delay, as a write of the entity that is made
// durable like any other.
func TestTimerFires(t *testing.T) {
	fired := make(chan int64, 8)
	host, store := timedHost(t, fired, nil)
	start := time.Now()
	require.NoError(t, arm(t, host, "a", &testpb.Arm{Name: "t", DelayMillis: 30, Delta: 5}))
	require.EqualValues(t, 1, host.Stats().Timers)
	require.EqualValues(t, 5, <-fired)
	require.GreaterOrEqual(t, time.Since(start), 30*time.Millisecond)
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		rec, err := store.Load(context.Background(), "timed", "a")
		if err != nil {
			return err
		}
		if v := decodeCounter(t, rec.Data).GetValue(); v != 5 {
			return errorf("stored %d", v)
		}
		return nil
	})
	require.EqualValues(t, 0, host.Stats().Timers)
}

// Setting a timer again replaces it; cancelling one (in the same run or a
// later one) keeps it from firing; a run that fails sets nothing.
func TestTimerReplaceCancelRollback(t *testing.T) {
	fired := make(chan int64, 16)
	host, _ := timedHost(t, fired, nil)
	require.NoError(t, arm(t, host, "a", &testpb.Arm{Name: "r", DelayMillis: 3_600_000, Delta: 1}))
	require.NoError(t, arm(t, host, "a", &testpb.Arm{Name: "r", DelayMillis: 10, Delta: 2}))
	require.EqualValues(t, 2, <-fired, "the replacement fires, not the first")

	// Cancelled later: the timer is gone at once (Stats), so it can never
	// fire (a firing that raced the cancel is dropped by its token).
	require.NoError(t, arm(t, host, "a", &testpb.Arm{Name: "c", DelayMillis: 3_600_000, Delta: 100}))
	require.EqualValues(t, 1, host.Stats().Timers)
	require.NoError(t, arm(t, host, "a", &testpb.Arm{Name: "c", Cancel: true}))
	require.EqualValues(t, 0, host.Stats().Timers)

	// A failed run sets no timer.
	err := arm(t, host, "a", &testpb.Arm{Name: "f", DelayMillis: 1, Delta: 1000, Fail: true})
	require.ErrorIs(t, err, actors.ErrHandler)
	require.EqualValues(t, 0, host.Stats().Timers)

	// A timer set after all of these fires alone.
	require.NoError(t, arm(t, host, "a", &testpb.Arm{Name: "s", DelayMillis: 20, Delta: 10}))
	require.EqualValues(t, 10, <-fired)
	require.EqualValues(t, 12, timedValue(t, host, "a"))
	select {
	case d := <-fired:
		t.Fatalf("unexpected firing of %d", d)
	default:
	}
}

// Timers end with their activation: passivation cancels them.
func TestTimerCancelledOnPassivation(t *testing.T) {
	host, _ := timedHost(t, nil, func(c *actors.HostConfig) { c.IdleTimeout = 50 * time.Millisecond })
	require.NoError(t, arm(t, host, "p", &testpb.Arm{Name: "t", DelayMillis: 3_600_000, Delta: 1, Count: 3}))
	require.EqualValues(t, 3, host.Stats().Timers)
	testutil.Eventually(t, 10*time.Second, 5*time.Millisecond, func() error {
		if s := host.Stats(); s.Passivations == 0 || s.Timers != 0 {
			return errorf("passivations %d, timers %d", s.Passivations, s.Timers)
		}
		return nil
	})
}

// One entity has at most MaxTimers pending; bad timers are refused.
func TestTimerLimits(t *testing.T) {
	host, _ := timedHost(t, nil, nil)
	require.NoError(t, arm(t, host, "l", &testpb.Arm{Name: "t", DelayMillis: 3_600_000, Count: actors.MaxTimers}))
	require.EqualValues(t, actors.MaxTimers, host.Stats().Timers)
	// Replacing pending timers stays within the bound.
	require.NoError(t, arm(t, host, "l", &testpb.Arm{Name: "t", DelayMillis: 3_600_000, Count: 10}))
	err := arm(t, host, "l", &testpb.Arm{Name: "extra", DelayMillis: 1})
	require.ErrorIs(t, err, actors.ErrHandler)
	require.ErrorContains(t, err, "MaxTimers")
	require.EqualValues(t, actors.MaxTimers, host.Stats().Timers)

	err = arm(t, host, "l2", &testpb.Arm{Name: "", DelayMillis: 1})
	require.ErrorContains(t, err, "timer name")
}

func decodeCounter(t *testing.T, data []byte) *testpb.Counter {
	t.Helper()
	var er ordopb.EntityRecord
	require.NoError(t, proto.Unmarshal(data, &er))
	var c testpb.Counter
	require.NoError(t, proto.Unmarshal(er.State, &c))
	return &c
}
