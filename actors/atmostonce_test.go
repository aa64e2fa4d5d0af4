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
	"github.com/ordo-actors/ordo/persistence/memory"
	"github.com/ordo-actors/ordo/proto/ordopb"
	"github.com/ordo-actors/ordo/proto/testpb"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
)

// refusingRouter answers every attempt at once with a retryable error and
// keeps a copy of each envelope routed.
type refusingRouter struct {
	mu   sync.Mutex
	envs []*ordopb.Envelope
}

func (r *refusingRouter) Route(_ context.Context, env *ordopb.Envelope, _ actors.Sender, done func(*ordopb.Reply)) {
	r.mu.Lock()
	r.envs = append(r.envs, proto.Clone(env).(*ordopb.Envelope))
	r.mu.Unlock()
	done(&ordopb.Reply{RequestId: env.GetRequestId(), Error: actors.ErrorToProto(
		&actors.Error{Code: ordopb.Code_CODE_UNAVAILABLE, Message: "refused on purpose"})})
}

// attempts returns the envelopes routed under request ID id.
func (r *refusingRouter) attempts(id string) []*ordopb.Envelope {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*ordopb.Envelope
	for _, env := range r.envs {
		if env.GetRequestId() == id {
			out = append(out, env)
		}
	}
	return out
}

// onceRetry retries at once, three attempts in all.
var onceRetry = actors.RetryPolicy{Initial: time.Millisecond, Max: time.Millisecond, Multiplier: 1, MaxAttempts: 3}

// onceKind's Forward sends Add{Delta} to counter m.To twice: once with
// AtMostOnce (request ID m.RequestId+"/once") and once as a plain Send
// (m.RequestId+"/plain"), both with onceRetry. Its Echo makes a Request
// with AtMostOnce to a counter in another of 4 shards, whose continuation
// records its error's code in Value.
func onceKind() actors.Kind {
	return actors.MustKind("sender", func() *testpb.Counter { return new(testpb.Counter) },
		actors.On(func(c *ctxC, m *testpb.Forward) (*testpb.Value, error) {
			to := actors.Ref{Kind: "counter", ID: m.To}
			c.Send(to, &testpb.Add{Delta: m.Delta}, m.RequestId+"/once", actors.AtMostOnce(), actors.WithRetry(onceRetry))
			c.Send(to, &testpb.Add{Delta: m.Delta}, m.RequestId+"/plain", actors.WithRetry(onceRetry))
			return &testpb.Value{}, nil
		}),
		actors.On(func(c *ctxC, m *testpb.Echo) (*testpb.Value, error) {
			actors.Request(c, actors.Ref{Kind: "counter", ID: counterID(c.Ref(), 4, false)}, &testpb.Add{Delta: 1}, "req-once",
				func(c *ctxC, _ *testpb.Value, err error) {
					var ae *actors.Error
					if errors.As(err, &ae) {
						c.State.Value = int64(ae.Code)
					}
				}, actors.AtMostOnce())
			return &testpb.Value{}, nil
		}),
		actors.OnRead(func(c *ctxC, _ *testpb.Get) (*testpb.Value, error) {
			return &testpb.Value{Value: c.State.Value}, nil
		}),
	)
}

// onceHost starts a host of onceKind and counters over 4 shards whose
// entities' messages go through router.
func onceHost(t *testing.T, router actors.Router) *actors.Host {
	t.Helper()
	cfg := actors.DefaultLocalConfig()
	cfg.Shards = 4
	host := startHost(t, cfg, actors.HostDeps{Router: router, Store: memory.New()}, onceKind(),
		newCounterKind(&guard{}, &counters{}))
	ownAll(t, host, cfg.Shards)
	return host
}

// forwardRefused has sender "s" of host Forward to a counter in another
// shard through router, which refuses every attempt, and waits until the
// plain Send has made all its attempts.
func forwardRefused(t *testing.T, ctx context.Context, host *actors.Host, router *refusingRouter, from actors.Ref) {
	t.Helper()
	_, err := actors.Call[*testpb.Value](ctx, host, from, &testpb.Forward{To: counterID(from, 4, false), Delta: 1, RequestId: "fwd"})
	require.NoError(t, err)
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if n := len(router.attempts("fwd/plain")); n != onceRetry.MaxAttempts {
			return fmt.Errorf("the plain Send made %d attempts, want %d", n, onceRetry.MaxAttempts)
		}
		return nil
	})
}

// A message sent with AtMostOnce goes once, marked one-way, and is not
// retried when its attempt fails, even with a retry policy of its own; a
// plain Send of the same handler is retried as its policy says.
func TestAtMostOnceIsSentOnce(t *testing.T) {
	router := &refusingRouter{}
	host := onceHost(t, router)
	ctx := testCtx(t)
	from := actors.Ref{Kind: "sender", ID: "s"}
	forwardRefused(t, ctx, host, router, from)
	// The plain Send's attempts went through the sender's mailbox after
	// the one-way message's would have; a read behind them all makes sure
	// a retry of the one-way message would have been routed by now.
	_, err := actors.Call[*testpb.Value](ctx, host, from, &testpb.Get{})
	require.NoError(t, err)

	once := router.attempts("fwd/once")
	require.Len(t, once, 1, "a message sent with AtMostOnce was retried")
	require.True(t, once[0].GetOneWay(), "the one-way message is not marked one-way")
	require.Equal(t, from.Proto().String(), once[0].GetSender().String(), "the one-way message does not name its sender")
	for _, env := range router.attempts("fwd/plain") {
		require.False(t, env.GetOneWay(), "a plain Send is marked one-way")
	}
	// The plain Send is over (its last attempt failed), and the sender
	// keeps nothing of the one-way message once it has left.
	rt, err := host.Runtime(ctx, from)
	require.NoError(t, err)
	require.NotNil(t, rt.Actor, rt.ActorError)
	require.Empty(t, rt.Actor.Outs, "the sender still holds messages")
}

// A Request with AtMostOnce is refused (its continuation gets
// ErrBadRequest) and nothing is sent.
func TestAtMostOnceRequestIsRefused(t *testing.T) {
	router := &refusingRouter{}
	host := onceHost(t, router)
	ctx := testCtx(t)
	from := actors.Ref{Kind: "sender", ID: "s"}
	_, err := actors.Call[*testpb.Value](ctx, host, from, &testpb.Echo{})
	require.NoError(t, err)
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		v, err := actors.Call[*testpb.Value](ctx, host, from, &testpb.Get{})
		if err != nil {
			return err
		}
		if v.Value != int64(ordopb.Code_CODE_BAD_REQUEST) {
			return fmt.Errorf("the continuation got code %d, want %d (bad request)", v.Value, ordopb.Code_CODE_BAD_REQUEST)
		}
		return nil
	})
	require.Empty(t, router.attempts("req-once"), "a refused Request was sent")
}

// Without a router (one host), a one-way message to another shard and one
// to the sender's own shard (handed over in memory) are each applied once.
func TestAtMostOnceIsDelivered(t *testing.T) {
	cfg := actors.DefaultLocalConfig()
	cfg.Shards = 4
	n := &counters{}
	host := startHost(t, cfg, actors.HostDeps{Store: memory.New()}, onceKind(), newCounterKind(&guard{}, n))
	ownAll(t, host, cfg.Shards)
	ctx := testCtx(t)
	from := actors.Ref{Kind: "sender", ID: "s"}
	far := counterID(from, cfg.Shards, false)
	near := counterID(from, cfg.Shards, true)
	for i, to := range []string{far, near} {
		_, err := actors.Call[*testpb.Value](ctx, host, from, &testpb.Forward{To: to, Delta: 10, RequestId: to})
		require.NoError(t, err)
		// The plain Send and the one-way message each add 10.
		testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
			v, err := actors.Call[*testpb.Value](ctx, host, ref(to), &testpb.Get{})
			if err != nil {
				return err
			}
			if v.Value != 20 {
				return fmt.Errorf("counter %s holds %d, want 20", to, v.Value)
			}
			return nil
		})
		require.EqualValues(t, 2*(i+1), n.adds.Load(), "a message was applied twice")
	}
}

// counterID returns the ID of a counter in r's shard (same) or in
// another one.
func counterID(r actors.Ref, shards uint32, same bool) string {
	for i := 0; ; i++ {
		id := fmt.Sprintf("c-%d", i)
		if (actors.ShardOf(ref(id), shards) == actors.ShardOf(r, shards)) == same {
			return id
		}
	}
}

// Every attempt of an entity's message names its sender and the sender's
// fence: a retry is fenced like the first attempt.
func TestRetryKeepsSenderAndFence(t *testing.T) {
	router := &refusingRouter{}
	host := onceHost(t, router)
	from := actors.Ref{Kind: "sender", ID: "s"}
	forwardRefused(t, testCtx(t), host, router, from)
	envs := router.attempts("fwd/plain")
	first := envs[0]
	require.NotNil(t, first.GetSender())
	require.NotNil(t, first.GetSenderFence())
	for i, env := range envs[1:] {
		require.True(t, proto.Equal(first.GetSender(), env.GetSender()), "attempt %d names sender %v, want %v", i+2, env.GetSender(), first.GetSender())
		require.True(t, proto.Equal(first.GetSenderFence(), env.GetSenderFence()), "attempt %d carries fence %v, want %v", i+2, env.GetSenderFence(), first.GetSenderFence())
	}
}
