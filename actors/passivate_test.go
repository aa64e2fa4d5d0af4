package actors_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/ordo-actors/ordo/persistence/memory"
	"github.com/ordo-actors/ordo/proto/ordopb"
	"github.com/ordo-actors/ordo/proto/testpb"
	"github.com/stretchr/testify/require"
)

// sleepy counts its OnPassivate runs. The hook records them in the state
// (Forwarded); an entity whose ID starts with "bye" also sends an Add of 1
// to "counter/<id>"; the hook panics when Value < 0.
type sleepy struct {
	hooks atomic.Int64
}

func sleepyKind(s *sleepy) *actors.KindOf[*testpb.Counter] {
	return actors.MustKind("sleepy", func() *testpb.Counter { return new(testpb.Counter) },
		actors.OnPassivate(func(c *ctxC) {
			s.hooks.Add(1)
			c.State.Forwarded++
			if strings.HasPrefix(c.Ref().ID, "bye") {
				c.Send(actors.Ref{Kind: "counter", ID: c.Ref().ID}, &testpb.Add{Delta: 1},
					fmt.Sprintf("%s-%d", c.Ref().ID, c.State.Forwarded))
			}
			if c.State.Value < 0 {
				panic("hook fails on purpose")
			}
		}),
		actors.On(func(c *ctxC, m *testpb.Add) (*testpb.Value, error) {
			c.State.Value += m.Delta
			return &testpb.Value{Value: c.State.Value}, nil
		}),
		actors.OnRead(func(c *ctxC, m *testpb.Get) (*testpb.Value, error) {
			return &testpb.Value{Value: c.State.Value, PrevSeq: uint64(c.State.Forwarded)}, nil
		}),
	)
}

func startSleepy(t *testing.T, idle time.Duration) (*actors.Host, *memory.Store, *sleepy) {
	t.Helper()
	s := &sleepy{}
	store := memory.New()
	cfg := actors.DefaultLocalConfig()
	cfg.Shards = 4
	cfg.IdleTimeout = idle
	host := startHost(t, cfg, actors.HostDeps{Store: store}, sleepyKind(s), newCounterKind(&guard{}, &counters{}))
	ownAll(t, host, cfg.Shards)
	return host, store, s
}

func sleepyRef(id string) actors.Ref { return actors.Ref{Kind: "sleepy", ID: id} }

// storedForwarded is the durable Forwarded field of a testpb.Counter entity.
func storedForwarded(t *testing.T, store *memory.Store, r actors.Ref) int64 {
	t.Helper()
	rec, err := store.Load(context.Background(), r.Kind, r.ID)
	if err != nil {
		return 0
	}
	var er ordopb.EntityRecord
	require.NoError(t, protoUnmarshal(rec.Data, &er))
	var c testpb.Counter
	require.NoError(t, protoUnmarshal(er.State, &c))
	return c.Forwarded
}

// An idle entity runs OnPassivate once before it stops: the state it
// changes is durable by the time the entity is gone, the message it sends
// leaves, and the next activation sees that state.
func TestOnPassivateRunsBeforeIdlePassivation(t *testing.T) {
	host, store, s := startSleepy(t, 30*time.Millisecond)
	ctx := testCtx(t)
	r := sleepyRef("bye-idle")
	_, err := actors.Call[*testpb.Value](ctx, host, r, &testpb.Add{Delta: 5})
	require.NoError(t, err)
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if p := host.Stats().Passivations; p == 0 {
			return errPending
		}
		return nil
	})
	require.GreaterOrEqual(t, s.hooks.Load(), int64(1))
	require.GreaterOrEqual(t, storedForwarded(t, store, r), int64(1), "the hook's write was not durable when the entity stopped")
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if v := storedValue(t, store, "counter", "bye-idle"); v < 1 {
			return fmt.Errorf("the hook's message has not arrived (counter %d)", v)
		}
		return nil
	})

	v, err := actors.Call[*testpb.Value](ctx, host, r, &testpb.Get{})
	require.NoError(t, err)
	require.EqualValues(t, 5, v.Value)
	require.GreaterOrEqual(t, v.PrevSeq, uint64(1), "the next activation did not see the hook's state")
}

// A call that arrives while the hook's write is in flight waits for the
// entity to stop and is handled by its next activation, which sees the
// hook's state: nothing runs in an activation after its OnPassivate.
func TestOnPassivateParksCallsUntilItsWriteIsDurable(t *testing.T) {
	host, store, s := startSleepy(t, 30*time.Millisecond)
	ctx := testCtx(t)
	r := sleepyRef("parked")
	_, err := actors.Call[*testpb.Value](ctx, host, r, &testpb.Add{Delta: 2})
	require.NoError(t, err)
	activations := host.Stats().Activations

	release := store.BlockSaves()
	defer release()
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if s.hooks.Load() == 0 {
			return errPending
		}
		return nil
	})
	// The hook ran and its write is held: the entity is still there.
	require.Zero(t, host.Stats().Passivations)
	env, err := actors.Envelope(r, &testpb.Get{}, "get-parked")
	require.NoError(t, err)
	replies := make(chan *ordopb.Reply, 1)
	host.Submit(env, func(rep *ordopb.Reply) { replies <- rep })
	requireNoReply(t, replies, "a call to a passivating entity whose hook's write is held")

	release()
	v, err := actors.DecodeReply[*testpb.Value](recv(t, replies))
	require.NoError(t, err)
	require.EqualValues(t, 2, v.Value)
	require.EqualValues(t, 1, v.PrevSeq, "the call did not see the hook's state")
	st := host.Stats()
	require.GreaterOrEqual(t, st.Passivations, uint64(1))
	require.GreaterOrEqual(t, st.Activations, activations+1, "the parked call was not handled by a new activation")
}

// OnPassivate runs on a graceful release (handoff) before Release
// returns, and not when the shard is dropped (the entity may no longer
// write).
func TestOnPassivateOnReleaseNotOnDrop(t *testing.T) {
	host, store, s := startSleepy(t, time.Hour)
	ctx := testCtx(t)
	released, dropped := sleepyRef("released"), sleepyRef("dropped")
	for _, r := range []actors.Ref{released, dropped} {
		_, err := actors.Call[*testpb.Value](ctx, host, r, &testpb.Add{Delta: 1})
		require.NoError(t, err)
	}
	rs, ds := actors.ShardOf(released, 4), actors.ShardOf(dropped, 4)
	require.NotEqual(t, rs, ds, "pick IDs in different shards")

	require.NoError(t, host.Release(ctx, rs, 1))
	require.EqualValues(t, 1, s.hooks.Load())
	require.EqualValues(t, 1, storedForwarded(t, store, released), "the hook's write must be durable when Release returns")

	host.Drop(ds, fmt.Errorf("%w: test", actors.ErrFenced))
	require.Zero(t, host.Stats().Active)
	require.EqualValues(t, 1, s.hooks.Load(), "OnPassivate ran for a dropped shard")
	require.Zero(t, storedForwarded(t, store, dropped))
}

// A panicking hook is rolled back and the entity passivates all the same.
func TestOnPassivatePanicRollsBack(t *testing.T) {
	host, store, s := startSleepy(t, 30*time.Millisecond)
	ctx := testCtx(t)
	r := sleepyRef("bye-panics")
	_, err := actors.Call[*testpb.Value](ctx, host, r, &testpb.Add{Delta: -1})
	require.NoError(t, err)
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if host.Stats().Passivations == 0 {
			return errPending
		}
		return nil
	})
	require.EqualValues(t, 1, s.hooks.Load())
	require.Zero(t, storedForwarded(t, store, r), "a panicking hook's change was written")
	require.Zero(t, storedValue(t, store, "counter", "bye-panics"), "a panicking hook's message was sent")
}

func TestOnPassivateDeclaredOnce(t *testing.T) {
	_, err := actors.NewKind("twice", func() *testpb.Counter { return new(testpb.Counter) },
		actors.OnPassivate(func(*ctxC) {}), actors.OnPassivate(func(*ctxC) {}))
	require.Error(t, err)
}
