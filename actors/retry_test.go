package actors_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/ordo-actors/ordo/persistence/memory"
	"github.com/ordo-actors/ordo/proto/ordopb"
	"github.com/ordo-actors/ordo/proto/testpb"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/anypb"
)

// scriptRouter answers each attempt with answer(n, env), n counting the
// attempts of the envelope's request ID from 1; a nil answer delivers the
// envelope to the host. It records every attempt.
type scriptRouter struct {
	host   atomic.Pointer[actors.Host]
	answer func(n int, env *ordopb.Envelope) *ordopb.Reply

	mu       sync.Mutex
	attempts map[string]int
	ids      []string
}

func (r *scriptRouter) Route(_ context.Context, env *ordopb.Envelope, _ actors.Sender, done func(*ordopb.Reply)) {
	r.mu.Lock()
	if r.attempts == nil {
		r.attempts = make(map[string]int)
	}
	r.attempts[env.GetRequestId()]++
	n := r.attempts[env.GetRequestId()]
	r.ids = append(r.ids, env.GetRequestId())
	r.mu.Unlock()
	if rep := r.answer(n, env); rep != nil {
		go done(rep) // as a router does: later, from another goroutine
		return
	}
	r.host.Load().Submit(env, done)
}

func (r *scriptRouter) count(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.attempts[id]
}

func (r *scriptRouter) total() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ids)
}

func failWith(code ordopb.Code) func(int, *ordopb.Envelope) *ordopb.Reply {
	return func(_ int, env *ordopb.Envelope) *ordopb.Reply {
		return &ordopb.Reply{RequestId: env.GetRequestId(), Error: &ordopb.Error{Code: code, Message: "scripted"}}
	}
}

// outcomes records the final outcomes continuations saw, by request ID.
type outcomes struct {
	mu   sync.Mutex
	errs map[string][]error
}

func (o *outcomes) add(id string, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.errs == nil {
		o.errs = make(map[string][]error)
	}
	o.errs[id] = append(o.errs[id], err)
}

func (o *outcomes) of(id string) []error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]error(nil), o.errs[id]...)
}

// waitOutcome waits for the first outcome of request id.
func (o *outcomes) waitOutcome(t *testing.T, id string) error {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if len(o.of(id)) == 0 {
			return errPending
		}
		return nil
	})
	return o.of(id)[0]
}

// senderKind requests an Add from counter/<Forward.To> under
// Forward.RequestId with opts and records the outcome; with resend set, its
// continuation sends the same request again after any error, forever (a
// saga's naive resend loop). Echo sends an Add with Send instead.
func senderKind(o *outcomes, resend bool, opts ...actors.RequestOption) *actors.KindOf[*testpb.Counter] {
	var request func(c *ctxC, to, id string, delta int64)
	request = func(c *ctxC, to, id string, delta int64) {
		actors.Request(c, actors.Ref{Kind: "counter", ID: to}, &testpb.Add{Delta: delta}, id,
			func(c *ctxC, v *testpb.Value, err error) {
				o.add(id, err)
				if err != nil && resend {
					request(c, to, id, delta)
				}
			}, opts...)
	}
	return actors.MustKind("sender", func() *testpb.Counter { return new(testpb.Counter) },
		actors.On(func(c *ctxC, m *testpb.Forward) (*testpb.Value, error) {
			request(c, m.To, m.RequestId, m.Delta)
			return &testpb.Value{}, nil
		}),
		actors.On(func(c *ctxC, m *testpb.Echo) (*testpb.Value, error) {
			c.Send(actors.Ref{Kind: "counter", ID: fmt.Sprint("send-", m.N)}, &testpb.Add{Delta: 1}, fmt.Sprint("send-", m.N), opts...)
			return &testpb.Value{}, nil
		}),
		actors.OnRead(func(c *ctxC, m *testpb.Get) (*testpb.Value, error) {
			return &testpb.Value{Value: c.State.Value}, nil
		}),
	)
}

type retryHarness struct {
	host   *actors.Host
	router *scriptRouter
	out    *outcomes
	n      *counters
	cfg    actors.HostConfig
}

func newRetryHarness(t *testing.T, answer func(int, *ordopb.Envelope) *ordopb.Reply, resend bool,
	tweak func(*actors.HostConfig), opts ...actors.RequestOption) *retryHarness {
	t.Helper()
	rh := &retryHarness{router: &scriptRouter{answer: answer}, out: &outcomes{}, n: &counters{}}
	rh.cfg = actors.DefaultLocalConfig()
	rh.cfg.Shards = 4
	rh.cfg.Retry = fastRetry(4)
	if tweak != nil {
		tweak(&rh.cfg)
	}
	rh.host = startHost(t, rh.cfg, actors.HostDeps{Router: rh.router, Store: memory.New()}, senderKind(rh.out, resend, opts...), newCounterKind(&guard{}, rh.n))
	rh.router.host.Store(rh.host)
	ownAll(t, rh.host, rh.cfg.Shards)
	return rh
}

// fastRetry is a policy of n attempts with millisecond backoffs.
func fastRetry(n int) actors.RetryPolicy {
	return actors.RetryPolicy{Initial: time.Millisecond, Max: 4 * time.Millisecond, Multiplier: 2, Jitter: 0.5, MaxAttempts: n}
}

var sender = actors.Ref{Kind: "sender", ID: "s"}

// forward makes the sender request an Add from a counter of another shard
// (so that it goes through the router) under request ID id.
func (rh *retryHarness) forward(t *testing.T, id string) {
	t.Helper()
	to := "dst"
	for actors.ShardOf(actors.Ref{Kind: "counter", ID: to}, rh.cfg.Shards) == actors.ShardOf(sender, rh.cfg.Shards) {
		to += "x"
	}
	_, err := actors.Call[*testpb.Value](testCtx(t), rh.host, sender, &testpb.Forward{To: to, Delta: 1, RequestId: id})
	require.NoError(t, err)
}

// A permanent error ends a request after exactly one attempt: the
// continuation sees it, nothing is resent.
func TestRetryPermanentErrorIsOneAttempt(t *testing.T) {
	for _, code := range []ordopb.Code{ordopb.Code_CODE_UNKNOWN_KIND, ordopb.Code_CODE_BAD_REQUEST,
		ordopb.Code_CODE_HANDLER, ordopb.Code_CODE_INTERNAL} {
		t.Run(code.String(), func(t *testing.T) {
			rh := newRetryHarness(t, failWith(code), false, nil)
			rh.forward(t, "perm")
			err := rh.out.waitOutcome(t, "perm")
			require.Equal(t, code, actors.ErrorToProto(err).GetCode(), "outcome %v", err)
			require.Equal(t, 1, rh.router.count("perm"), "attempts of a request that failed for good")
			require.Len(t, rh.out.of("perm"), 1, "the continuation ran more than once")
		})
	}
}

// A retryable error is retried as the policy allows, with the same
// request ID, and the continuation then sees the last error once.
func TestRetryRetryableErrorIsBoundedByThePolicy(t *testing.T) {
	for _, code := range []ordopb.Code{ordopb.Code_CODE_NOT_HERE, ordopb.Code_CODE_FENCED,
		ordopb.Code_CODE_UNAVAILABLE, ordopb.Code_CODE_DEADLINE} {
		t.Run(code.String(), func(t *testing.T) {
			rh := newRetryHarness(t, failWith(code), false, nil)
			rh.forward(t, "retry")
			err := rh.out.waitOutcome(t, "retry")
			require.Equal(t, code, actors.ErrorToProto(err).GetCode(), "outcome %v", err)
			require.Equal(t, 4, rh.router.count("retry"), "attempts with MaxAttempts 4")
			require.Equal(t, 4, rh.router.total(), "an attempt under another request ID")
			require.Len(t, rh.out.of("retry"), 1)
		})
	}
}

// MaxElapsed bounds the attempts too: with a fixed backoff of at least
// 5ms and 50ms to spend, at most 1 + 50/5 attempts start.
func TestRetryMaxElapsedBoundsAttempts(t *testing.T) {
	policy := actors.RetryPolicy{Initial: 5 * time.Millisecond, Max: 5 * time.Millisecond, Multiplier: 1, MaxElapsed: 50 * time.Millisecond}
	rh := newRetryHarness(t, failWith(ordopb.Code_CODE_UNAVAILABLE), false, nil, actors.WithRetry(policy))
	rh.forward(t, "elapsed")
	require.ErrorIs(t, rh.out.waitOutcome(t, "elapsed"), actors.ErrUnavailable)
	n := rh.router.count("elapsed")
	require.GreaterOrEqual(t, n, 2)
	require.LessOrEqual(t, n, 11)
}

// Transient failures are retried until the request gets through: the
// continuation sees the success, and the receiver applies it once.
func TestRetryTransientErrorSucceeds(t *testing.T) {
	rh := newRetryHarness(t, func(n int, env *ordopb.Envelope) *ordopb.Reply {
		if n <= 2 {
			return failWith(ordopb.Code_CODE_UNAVAILABLE)(n, env)
		}
		return nil
	}, false, nil)
	rh.forward(t, "transient")
	require.NoError(t, rh.out.waitOutcome(t, "transient"))
	require.Equal(t, 3, rh.router.count("transient"))
	require.EqualValues(t, 1, rh.n.adds.Load(), "applied once")
}

// A continuation that resends a failed request at once (a saga's naive
// loop) does not start a busy loop: the resend waits for the backoff the
// request reached. Here that backoff is an hour, so a single attempt is
// made, however often the continuation runs.
func TestRetryResendLoopIsNotBusy(t *testing.T) {
	policy := actors.RetryPolicy{Initial: time.Hour, Max: time.Hour, Multiplier: 2, MaxAttempts: 1}
	for _, code := range []ordopb.Code{ordopb.Code_CODE_UNKNOWN_KIND, ordopb.Code_CODE_NOT_HERE} {
		t.Run(code.String(), func(t *testing.T) {
			rh := newRetryHarness(t, failWith(code), true, nil, actors.WithRetry(policy))
			rh.forward(t, "loop")
			rh.out.waitOutcome(t, "loop")
			// The Get is handled after the continuation, which resent the
			// request: had the resend left at once, it would have been
			// routed by now.
			_, err := actors.Call[*testpb.Value](testCtx(t), rh.host, sender, &testpb.Get{})
			require.NoError(t, err)
			require.Equal(t, 1, rh.router.count("loop"), "a resend did not wait for the backoff")
			require.Len(t, rh.out.of("loop"), 1)
		})
	}
}

// A reply that does not decode as the continuation's type (a handler
// that answers with another message, a peer on another version) is a
// failed attempt for the backoff too: the loop above that resends on it
// waits like after an error reply, rather than resending at once, forever.
func TestRetryResendLoopOnAnUndecodableReplyIsNotBusy(t *testing.T) {
	policy := actors.RetryPolicy{Initial: time.Hour, Max: time.Hour, Multiplier: 2, MaxAttempts: 1}
	wrongType, err := anypb.New(&testpb.Counter{Value: 1})
	require.NoError(t, err)
	rh := newRetryHarness(t, func(_ int, env *ordopb.Envelope) *ordopb.Reply {
		return &ordopb.Reply{RequestId: env.GetRequestId(), Payload: wrongType}
	}, true, nil, actors.WithRetry(policy))
	rh.forward(t, "loop")
	require.ErrorIs(t, rh.out.waitOutcome(t, "loop"), actors.ErrBadRequest)
	_, err = actors.Call[*testpb.Value](testCtx(t), rh.host, sender, &testpb.Get{})
	require.NoError(t, err)
	require.Equal(t, 1, rh.router.count("loop"), "a resend after an undecodable reply did not wait for the backoff")
	require.Len(t, rh.out.of("loop"), 1)
}

// The same loop with a short backoff goes on, one attempt per resend
// (each after its wait), and a success ends it.
func TestRetryResendLoopGoesOn(t *testing.T) {
	policy := actors.RetryPolicy{Initial: time.Millisecond, Max: 2 * time.Millisecond, Multiplier: 2, MaxAttempts: 1}
	rh := newRetryHarness(t, func(n int, env *ordopb.Envelope) *ordopb.Reply {
		if n <= 5 {
			return failWith(ordopb.Code_CODE_UNKNOWN_KIND)(n, env)
		}
		return nil
	}, true, nil, actors.WithRetry(policy))
	rh.forward(t, "loop")
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if errs := rh.out.of("loop"); len(errs) < 6 || errs[len(errs)-1] != nil {
			return fmt.Errorf("%d outcomes", len(errs))
		}
		return nil
	})
	require.Equal(t, 6, rh.router.count("loop"), "one attempt per send")
	require.Len(t, rh.out.of("loop"), 6)
	require.EqualValues(t, 1, rh.n.adds.Load())
}

// A Send is retried like a Request, and an entity with a message still
// being retried does not passivate; once the policy gave up, it does.
func TestRetrySendIsRetried(t *testing.T) {
	rh := newRetryHarness(t, failWith(ordopb.Code_CODE_NOT_HERE), false, func(c *actors.HostConfig) {
		c.IdleTimeout = 20 * time.Millisecond
	})
	n := int64(0) // a target in another shard than the sender's
	for actors.ShardOf(actors.Ref{Kind: "counter", ID: fmt.Sprint("send-", n)}, rh.cfg.Shards) == actors.ShardOf(sender, rh.cfg.Shards) {
		n++
	}
	_, err := actors.Call[*testpb.Value](testCtx(t), rh.host, sender, &testpb.Echo{N: n})
	require.NoError(t, err)
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if rh.host.Stats().Passivations == 0 {
			return errPending
		}
		return nil
	})
	require.Equal(t, 4, rh.router.count(fmt.Sprint("send-", n)), "attempts of a Send with MaxAttempts 4")
}

// An invalid per-call policy fails the request without sending it.
func TestRetryInvalidPolicyIsABadRequest(t *testing.T) {
	rh := newRetryHarness(t, failWith(ordopb.Code_CODE_NOT_HERE), false, nil, actors.WithRetry(actors.RetryPolicy{}))
	rh.forward(t, "invalid")
	require.ErrorIs(t, rh.out.waitOutcome(t, "invalid"), actors.ErrBadRequest)
	require.Zero(t, rh.router.total())
}

func TestRetryPolicyValidation(t *testing.T) {
	require.NoError(t, actors.DefaultRetryPolicy().Validate())
	ok := fastRetry(3)
	for name, mut := range map[string]func(*actors.RetryPolicy){
		"zero initial":    func(p *actors.RetryPolicy) { p.Initial = 0 },
		"max < initial":   func(p *actors.RetryPolicy) { p.Max = p.Initial / 2 },
		"multiplier < 1":  func(p *actors.RetryPolicy) { p.Multiplier = 0.5 },
		"jitter > 1":      func(p *actors.RetryPolicy) { p.Jitter = 1.5 },
		"negative":        func(p *actors.RetryPolicy) { p.MaxAttempts = -1 },
		"unbounded":       func(p *actors.RetryPolicy) { p.MaxAttempts, p.MaxElapsed = 0, 0 },
		"NaN multiplier":  func(p *actors.RetryPolicy) { p.Multiplier = nan() },
		"negative jitter": func(p *actors.RetryPolicy) { p.Jitter = -0.1 },
	} {
		p := ok
		mut(&p)
		require.Error(t, p.Validate(), name)
	}
	cfg := actors.DefaultHostConfig()
	cfg.Retry = actors.RetryPolicy{}
	require.Error(t, cfg.Validate())
}

func nan() float64 {
	zero := 0.0
	return zero / zero
}
