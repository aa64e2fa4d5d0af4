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

// quitterKind asks to passivate from every write: Add resolves the
// deferred Echoes and answers; Echo defers its reply; Get reads.
func quitterKind() *actors.KindOf[*testpb.Counter] {
	return actors.MustKind("quitter", func() *testpb.Counter { return new(testpb.Counter) },
		actors.On(func(c *ctxC, m *testpb.Add) (*testpb.Value, error) {
			c.State.Value += m.Delta
			c.Resolve("open", &testpb.Value{Value: c.State.Value}, nil)
			c.Passivate()
			return &testpb.Value{Value: c.State.Value}, nil
		}),
		actors.On(func(c *ctxC, _ *testpb.Echo) (*testpb.Value, error) {
			c.Defer("open")
			c.Passivate()
			return nil, nil
		}),
		actors.OnRead(func(c *ctxC, _ *testpb.Get) (*testpb.Value, error) {
			return &testpb.Value{Value: c.State.Value}, nil
		}),
	)
}

func startQuitter(t *testing.T) (*actors.Host, *memory.Store) {
	t.Helper()
	store := memory.New()
	cfg := actors.DefaultLocalConfig()
	cfg.Shards = 4
	cfg.IdleTimeout = time.Hour // only Passivate passivates
	host := startHost(t, cfg, actors.HostDeps{Store: store}, quitterKind())
	ownAll(t, host, cfg.Shards)
	return host, store
}

func waitPassivations(t *testing.T, host *actors.Host, n uint64) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if st := host.Stats(); st.Passivations != n || st.Active != 0 {
			return fmt.Errorf("%d passivations, %d active; want %d, 0", st.Passivations, st.Active, n)
		}
		return nil
	})
}

// An entity that asked to passivate stays until its write is durable and
// then stops without another message to it; its next call activates it
// again from that write.
func TestPassivateAfterTheWriteIsDurable(t *testing.T) {
	host, store := startQuitter(t)
	ctx := testCtx(t)
	r := actors.Ref{Kind: "quitter", ID: "q1"}

	release := store.BlockSaves()
	defer release()
	env, err := actors.Envelope(r, &testpb.Add{Delta: 4}, "add-1")
	require.NoError(t, err)
	replies := make(chan *ordopb.Reply, 1)
	host.Submit(env, func(rep *ordopb.Reply) { replies <- rep })
	requireNoReply(t, replies, "an answer whose write is held")
	st := host.Stats()
	require.Zero(t, st.Passivations, "passivated with its write in flight")
	require.EqualValues(t, 1, st.Active)

	release()
	v, err := actors.DecodeReply[*testpb.Value](recv(t, replies))
	require.NoError(t, err)
	require.EqualValues(t, 4, v.Value)
	waitPassivations(t, host, 1)
	require.EqualValues(t, 4, storedValue(t, store, "quitter", "q1"))

	activations := host.Stats().Activations
	got, err := actors.Call[*testpb.Value](ctx, host, r, &testpb.Get{})
	require.NoError(t, err)
	require.EqualValues(t, 4, got.Value)
	require.Equal(t, activations+1, host.Stats().Activations)
}

// A deferred reply keeps the entity active, whatever else it handles,
// until it is resolved; then the entity passivates.
func TestPassivateWaitsForDeferredReplies(t *testing.T) {
	host, _ := startQuitter(t)
	ctx := testCtx(t)
	r := actors.Ref{Kind: "quitter", ID: "q2"}

	env, err := actors.Envelope(r, &testpb.Echo{}, "echo-1")
	require.NoError(t, err)
	echo := make(chan *ordopb.Reply, 1)
	host.Submit(env, func(rep *ordopb.Reply) { echo <- rep })
	got, err := actors.Call[*testpb.Value](ctx, host, r, &testpb.Get{})
	require.NoError(t, err)
	require.Zero(t, got.Value)
	requireNoReply(t, echo, "a deferred reply nothing resolved")
	st := host.Stats()
	require.Zero(t, st.Passivations, "passivated with a deferred reply pending")
	require.EqualValues(t, 1, st.Active)

	_, err = actors.Call[*testpb.Value](ctx, host, r, &testpb.Add{Delta: 3})
	require.NoError(t, err)
	v, err := actors.DecodeReply[*testpb.Value](recv(t, echo))
	require.NoError(t, err)
	require.EqualValues(t, 3, v.Value)
	waitPassivations(t, host, 1)
}
