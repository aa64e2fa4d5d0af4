package actors_test

import (
	"context"
	"fmt"
	"sync/atomic"
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

type latchC = actors.Context[*testpb.Counter]

// latchKind: Echo waits (deferred) until an Add resolves every waiter with
// the counter's new value; Get reads.
func latchKind(echoes *atomic.Int64) *actors.KindOf[*testpb.Counter] {
	return actors.MustKind("latch", func() *testpb.Counter { return new(testpb.Counter) },
		actors.On(func(c *latchC, m *testpb.Echo) (*testpb.Value, error) {
			echoes.Add(1)
			c.State.Forwarded++ // a state change written with the deferral
			c.Defer("open")
			return nil, nil
		}),
		actors.On(func(c *latchC, m *testpb.Add) (*testpb.Value, error) {
			c.State.Value += m.Delta
			c.Resolve("open", &testpb.Value{Value: c.State.Value}, nil)
			return &testpb.Value{Value: c.State.Value}, nil
		}),
		actors.On(func(c *latchC, m *testpb.Reject) (*testpb.Value, error) {
			c.Resolve("open", nil, actors.HandlerError(m.Code, "closed"))
			return &testpb.Value{}, nil
		}),
		// Forward resolves at once: the answer does not wait for the
		// write this run makes.
		// With To set, it also sends Add to that latch, behind the run's
		// write.
		actors.On(func(c *latchC, m *testpb.Forward) (*testpb.Value, error) {
			c.State.Value += m.Delta
			c.ResolveNow("open", &testpb.Value{Value: c.State.Value}, nil)
			if m.To != "" {
				c.Send(latchRef(m.To), &testpb.Add{Delta: m.Delta}, m.RequestId)
			}
			return &testpb.Value{Value: c.State.Value}, nil
		}),
		actors.OnRead(func(c *latchC, m *testpb.Get) (*testpb.Value, error) {
			return &testpb.Value{Value: c.State.Value}, nil
		}),
	)
}

type latchHarness struct {
	store  *memory.Store
	host   *actors.Host
	echoes atomic.Int64
}

func newLatch(t *testing.T, tweak func(*actors.HostConfig)) *latchHarness {
	t.Helper()
	l := &latchHarness{store: memory.New()}
	cfg := actors.DefaultLocalConfig()
	cfg.Shards = 4
	if tweak != nil {
		tweak(&cfg)
	}
	l.host = startHost(t, cfg, actors.HostDeps{Store: l.store}, latchKind(&l.echoes))
	ownAll(t, l.host, cfg.Shards)
	return l
}

func latchRef(id string) actors.Ref { return actors.Ref{Kind: "latch", ID: id} }

// submit sends msg under request ID rid and returns the reply channel.
func (l *latchHarness) submit(t *testing.T, id string, msg proto.Message, rid string, deadline time.Time) chan *ordopb.Reply {
	t.Helper()
	env, err := actors.Envelope(latchRef(id), msg, rid)
	require.NoError(t, err)
	if !deadline.IsZero() {
		env.DeadlineUnixNano = deadline.UnixNano()
	}
	ch := make(chan *ordopb.Reply, 1)
	l.host.Submit(env, func(r *ordopb.Reply) { ch <- r })
	return ch
}

func value(t *testing.T, r *ordopb.Reply) int64 {
	t.Helper()
	v, err := actors.DecodeReply[*testpb.Value](r)
	require.NoError(t, err)
	return v.GetValue()
}

// recv returns the next reply on ch, failing the test after 10s.
func recv(t *testing.T, ch chan *ordopb.Reply) *ordopb.Reply {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no reply within 10s")
		return nil
	}
}

func requireNoReply(t *testing.T, ch chan *ordopb.Reply, what string) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("%s: got a reply %v, want none yet", what, r)
	default:
	}
}

// A deferred reply leaves only once the write that resolved it (with its
// dedup entry) is durable; a retry afterwards gets the stored answer
// without running the handler.
func TestDeferredReplyGatedUntilDurable(t *testing.T) {
	l := newLatch(t, nil)
	ctx := testCtx(t)
	_, err := actors.Call[*testpb.Value](ctx, l.host, latchRef("a"), &testpb.Add{Delta: 1})
	require.NoError(t, err)

	wait := l.submit(t, "a", &testpb.Echo{}, "echo-1", time.Time{})
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if l.echoes.Load() != 1 {
			return errPending
		}
		return nil
	})
	release := l.store.BlockSaves()
	saves, _ := l.store.Stats()
	add := l.submit(t, "a", &testpb.Add{Delta: 41}, "add-41", time.Time{})
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if s, _ := l.store.Stats(); s <= saves {
			return errPending // the resolving write has not reached the store
		}
		return nil
	})
	requireNoReply(t, wait, "deferred reply while its write is blocked")
	requireNoReply(t, add, "reply while its write is blocked")
	release()
	require.EqualValues(t, 42, value(t, recv(t, wait)))
	require.EqualValues(t, 42, value(t, recv(t, add)))

	// The answer is stored under the request ID: a retry, even after the
	// state moved on, gets it without running the handler again.
	_, err = actors.Call[*testpb.Value](ctx, l.host, latchRef("a"), &testpb.Add{Delta: 100})
	require.NoError(t, err)
	v, err := actors.Call[*testpb.Value](ctx, l.host, latchRef("a"), &testpb.Echo{}, actors.WithRequestID("echo-1"))
	require.NoError(t, err)
	require.EqualValues(t, 42, v.GetValue())
	require.EqualValues(t, 1, l.echoes.Load(), "Echo handler runs")
}

// ResolveNow answers before the resolving write is durable (the
// resolver's own reply still waits for it), and the answer is recorded
// for deduplication by that write.
func TestResolveNowSkipsItsOwnWrite(t *testing.T) {
	l := newLatch(t, nil)
	wait := l.submit(t, "n", &testpb.Echo{}, "echo-n", time.Time{})
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if l.echoes.Load() != 1 {
			return errPending
		}
		return nil
	})
	// Wait until the Echo's own write is durable.
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if _, err := l.store.Load(context.Background(), "latch", "n"); err != nil {
			return err
		}
		return nil
	})
	release := l.store.BlockSaves()
	fwd := l.submit(t, "n", &testpb.Forward{Delta: 9}, "fwd-n", time.Time{})
	require.EqualValues(t, 9, value(t, recv(t, wait))) // while the resolving write is blocked
	requireNoReply(t, fwd, "the resolver's own reply while its write is blocked")
	release()
	require.EqualValues(t, 9, value(t, recv(t, fwd)))
	again := l.submit(t, "n", &testpb.Echo{}, "echo-n", time.Time{})
	require.EqualValues(t, 9, value(t, recv(t, again)))
	require.EqualValues(t, 1, l.echoes.Load(), "Echo handler runs")
}

// An answer resolved with ResolveNow does not wait behind a message the
// same run sends to another shard: that message waits for the run's
// write, the answer only for the writes before it.
func TestResolveNowSkipsItsOwnWriteWhenItSends(t *testing.T) {
	l := newLatch(t, nil)
	to := "m"
	for latchShard(to) == latchShard("s") {
		to += "m"
	}
	wait := l.submit(t, "s", &testpb.Echo{}, "echo-s", time.Time{})
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if _, err := l.store.Load(context.Background(), "latch", "s"); err != nil {
			return err // the Echo's own write is not durable yet
		}
		return nil
	})
	release := l.store.BlockSaves()
	fwd := l.submit(t, "s", &testpb.Forward{Delta: 4, To: to, RequestId: "add-" + to}, "fwd-s", time.Time{})
	require.EqualValues(t, 4, value(t, recv(t, wait))) // while the resolving write is blocked
	requireNoReply(t, fwd, "the resolver's own reply while its write is blocked")
	held, err := actors.Call[*testpb.Value](testCtx(t), l.host, latchRef(to), &testpb.Get{})
	require.NoError(t, err)
	require.Zero(t, held.GetValue(), "the run's message left before the run's write was durable")
	release()
	require.EqualValues(t, 4, value(t, recv(t, fwd)))
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		v, err := actors.Call[*testpb.Value](testCtx(t), l.host, latchRef(to), &testpb.Get{})
		if err != nil {
			return err
		}
		if v.GetValue() != 4 {
			return fmt.Errorf("%s holds %d, want 4: the message did not arrive", to, v.GetValue())
		}
		return nil
	})
}

// latchShard is the shard of latch id in newLatch's hosts.
func latchShard(id string) uint32 { return actors.ShardOf(latchRef(id), 4) }

// A duplicate of a pending request waits for the same answer; the
// handler runs once.
func TestDeferredDuplicateWhilePending(t *testing.T) {
	l := newLatch(t, nil)
	first := l.submit(t, "d", &testpb.Echo{}, "echo-d", time.Time{})
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if l.echoes.Load() != 1 {
			return errPending
		}
		return nil
	})
	dup := l.submit(t, "d", &testpb.Echo{}, "echo-d", time.Time{})
	other := l.submit(t, "d", &testpb.Echo{N: 7}, "echo-d", time.Time{}) // same ID, other payload
	r := recv(t, other)
	require.ErrorIs(t, actors.ErrorFromProto(r.GetError()), actors.ErrBadRequest)
	requireNoReply(t, first, "first")
	requireNoReply(t, dup, "duplicate")

	_, err := actors.Call[*testpb.Value](testCtx(t), l.host, latchRef("d"), &testpb.Add{Delta: 5})
	require.NoError(t, err)
	require.EqualValues(t, 5, value(t, recv(t, first)))
	require.EqualValues(t, 5, value(t, recv(t, dup)))
	require.EqualValues(t, 1, l.echoes.Load(), "Echo handler runs")
}

// A handler error resolves waiters with that error, recorded like a reply.
func TestDeferredResolvedWithError(t *testing.T) {
	l := newLatch(t, nil)
	w := l.submit(t, "e", &testpb.Echo{}, "echo-e", time.Time{})
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if l.echoes.Load() != 1 {
			return errPending
		}
		return nil
	})
	_, err := actors.Call[*testpb.Value](testCtx(t), l.host, latchRef("e"), &testpb.Reject{Code: "closed"})
	require.NoError(t, err)
	_, err = actors.DecodeReply[*testpb.Value](recv(t, w))
	require.ErrorIs(t, err, actors.ErrHandler)
	var ae *actors.Error
	require.ErrorAs(t, err, &ae)
	require.Equal(t, "closed", ae.HandlerCode)
}

// A pending request fails with a retryable error when its entity stops:
// a dropped shard (kill, fencing), a graceful release (handoff), and its
// own deadline. Its retry where the entity lives next runs the handler
// again and is answered once; its answer is then applied exactly once.
func TestDeferredPendingEndsRetryably(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(l *latchHarness, shard uint32)
	}{
		{"drop", func(l *latchHarness, shard uint32) { l.host.Drop(shard, fmt.Errorf("%w: test", actors.ErrFenced)) }},
		{"release", func(l *latchHarness, shard uint32) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := l.host.Release(ctx, shard, 1); err != nil {
				panic(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLatch(t, nil)
			shard := actors.ShardOf(latchRef("p"), 4)
			w := l.submit(t, "p", &testpb.Echo{}, "echo-p", time.Time{})
			testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
				if l.echoes.Load() != 1 {
					return errPending
				}
				return nil
			})
			tc.end(l, shard)
			r := recv(t, w)
			err := actors.ErrorFromProto(r.GetError())
			require.Error(t, err)
			require.True(t, actors.Retryable(err), "pending reply ended with %v, want a retryable error", err)

			require.NoError(t, l.host.Own(shard, 2))
			retry := l.submit(t, "p", &testpb.Echo{}, "echo-p", time.Time{})
			testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
				if l.echoes.Load() != 2 {
					return errPending
				}
				return nil
			})
			_, err = actors.Call[*testpb.Value](testCtx(t), l.host, latchRef("p"), &testpb.Add{Delta: 3})
			require.NoError(t, err)
			require.EqualValues(t, 3, value(t, recv(t, retry)))
			again := l.submit(t, "p", &testpb.Echo{}, "echo-p", time.Time{})
			require.EqualValues(t, 3, value(t, recv(t, again)))
			require.EqualValues(t, 2, l.echoes.Load(), "Echo handler runs")
		})
	}
	t.Run("deadline", func(t *testing.T) {
		l := newLatch(t, func(c *actors.HostConfig) { c.IdleTimeout = 20 * time.Millisecond })
		w := l.submit(t, "q", &testpb.Echo{}, "echo-q", time.Now().Add(50*time.Millisecond))
		r := recv(t, w)
		require.ErrorIs(t, actors.ErrorFromProto(r.GetError()), actors.ErrDeadline)
		// Nothing is left pending: the entity passivates.
		testutil.Eventually(t, 10*time.Second, 5*time.Millisecond, func() error {
			if a := l.host.Stats().Active; a != 0 {
				return fmt.Errorf("%d active entities", a)
			}
			return nil
		})
	})
}

// A read handler may not defer.
func TestDeferInReadHandlerIsAnError(t *testing.T) {
	k := actors.MustKind("bad", func() *testpb.Counter { return new(testpb.Counter) },
		actors.OnRead(func(c *latchC, m *testpb.Get) (*testpb.Value, error) {
			c.Defer("x")
			return nil, nil
		}))
	cfg := actors.DefaultLocalConfig()
	cfg.Shards = 1
	h := startHost(t, cfg, actors.HostDeps{Store: memory.New()}, k)
	ownAll(t, h, cfg.Shards)
	_, err := actors.Call[*testpb.Value](testCtx(t), h, actors.Ref{Kind: "bad", ID: "x"}, &testpb.Get{})
	require.ErrorIs(t, err, actors.ErrInternal)
}
