package actors_test

// Tests of the host's limits: sizes, mailboxes, calls in flight and
// deadlines. Each refusal is checked for what it must not cause (a store
// read, an activation, a lost shard), by counting, never by timing.

import (
	"context"
	"fmt"
	"runtime"
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
	"google.golang.org/protobuf/types/known/anypb"
)

// countingStore counts Loads.
type countingStore struct {
	persistence.Store
	loads atomic.Int64
}

func (s *countingStore) Load(ctx context.Context, kind, id string) (persistence.Record, error) {
	s.loads.Add(1)
	return s.Store.Load(ctx, kind, id)
}

// submit submits env to host and returns its reply channel.
func submit(host *actors.Host, env *ordopb.Envelope) chan *ordopb.Reply {
	ch := make(chan *ordopb.Reply, 1)
	host.Submit(env, func(r *ordopb.Reply) { ch <- r })
	return ch
}

func mustEnvelope(t *testing.T, r actors.Ref, msg *testpb.Add, id string) *ordopb.Envelope {
	t.Helper()
	env, err := actors.Envelope(r, msg, id)
	require.NoError(t, err)
	return env
}

// sameShard returns n IDs of counters in the shard of counter/first.
func sameShard(first string, n int, shards uint32) []string {
	ids := []string{first}
	for i := 0; len(ids) < n; i++ {
		id := fmt.Sprint(first, "-", i)
		if actors.ShardOf(ref(id), shards) == actors.ShardOf(ref(first), shards) {
			ids = append(ids, id)
		}
	}
	return ids
}

// A payload over MaxPayloadBytes is refused with ErrTooLarge (a bad
// request) before anything is activated or read; one within it is served.
func TestLimitPayloadTooLargeRefusedBeforeLoad(t *testing.T) {
	store := &countingStore{Store: memory.New()}
	cfg := actors.DefaultLocalConfig()
	cfg.Shards = 4
	cfg.MaxPayloadBytes = 1024
	host := startHost(t, cfg, actors.HostDeps{Store: store}, newCounterKind(&guard{}, &counters{}))
	ownAll(t, host, cfg.Shards)

	rep := recv(t, submit(host, mustEnvelope(t, ref("big"), &testpb.Add{Delta: 1, Sender: strings.Repeat("x", 2000)}, "big-1")))
	err := actors.ErrorFromProto(rep.GetError())
	require.ErrorIs(t, err, actors.ErrTooLarge)
	require.ErrorIs(t, err, actors.ErrBadRequest)
	require.False(t, actors.Retryable(err))
	require.Zero(t, store.loads.Load(), "store reads for a refused payload")
	require.Zero(t, host.Stats().Activations, "activations for a refused payload")

	rep = recv(t, submit(host, mustEnvelope(t, ref("big"), &testpb.Add{Delta: 1, Sender: strings.Repeat("x", 900)}, "big-2")))
	require.Nil(t, rep.GetError())
}

// Envelopes that cannot be handled are refused before any activation or
// store read.
func TestLimitJunkEnvelopesCauseNoLoad(t *testing.T) {
	store := &countingStore{Store: memory.New()}
	cfg := actors.DefaultLocalConfig()
	cfg.Shards = 4
	host := startHost(t, cfg, actors.HostDeps{Store: store}, newCounterKind(&guard{}, &counters{}))
	ownAll(t, host, cfg.Shards)

	add, err := anypb.New(&testpb.Add{Delta: 1})
	require.NoError(t, err)
	echo, err := anypb.New(&testpb.Echo{N: 1}) // a message the counter has no handler for
	require.NoError(t, err)
	target := &ordopb.EntityRef{Kind: "counter", Id: "junk"}
	junk := map[string]struct {
		env  *ordopb.Envelope
		code ordopb.Code
	}{
		"unknown message type": {&ordopb.Envelope{Target: target, RequestId: "r1", Payload: echo}, ordopb.Code_CODE_BAD_REQUEST},
		"garbage type URL":     {&ordopb.Envelope{Target: target, RequestId: "r2", Payload: &anypb.Any{TypeUrl: "nonsense", Value: []byte{1}}}, ordopb.Code_CODE_BAD_REQUEST},
		"missing payload":      {&ordopb.Envelope{Target: target, RequestId: "r3"}, ordopb.Code_CODE_BAD_REQUEST},
		"missing target":       {&ordopb.Envelope{RequestId: "r4", Payload: add}, ordopb.Code_CODE_BAD_REQUEST},
		"empty ID":             {&ordopb.Envelope{Target: &ordopb.EntityRef{Kind: "counter"}, RequestId: "r5", Payload: add}, ordopb.Code_CODE_BAD_REQUEST},
		"NUL in ID":            {&ordopb.Envelope{Target: &ordopb.EntityRef{Kind: "counter", Id: "a\x00b"}, RequestId: "r6", Payload: add}, ordopb.Code_CODE_BAD_REQUEST},
		"unknown kind":         {&ordopb.Envelope{Target: &ordopb.EntityRef{Kind: "nope", Id: "x"}, RequestId: "r7", Payload: add}, ordopb.Code_CODE_UNKNOWN_KIND},
		"no request ID":        {&ordopb.Envelope{Target: target, Payload: add}, ordopb.Code_CODE_BAD_REQUEST},
		"deadline passed":      {&ordopb.Envelope{Target: target, RequestId: "r8", Payload: add, DeadlineUnixNano: 1}, ordopb.Code_CODE_DEADLINE},
	}
	for name, j := range junk {
		rep := recv(t, submit(host, j.env))
		require.Equal(t, j.code, rep.GetError().GetCode(), "%s: %v", name, rep)
	}
	require.Zero(t, host.Stats().Activations, "activations for junk envelopes")

	// A payload of a handled type that does not decode reaches an entity,
	// but is refused before the entity is loaded.
	bad := &ordopb.Envelope{Target: target, RequestId: "r9", Payload: &anypb.Any{TypeUrl: add.GetTypeUrl(), Value: []byte{0xff, 0xff, 0xff}}}
	rep := recv(t, submit(host, bad))
	require.Equal(t, ordopb.Code_CODE_BAD_REQUEST, rep.GetError().GetCode(), "%v", rep)
	require.Zero(t, store.loads.Load(), "store reads for junk envelopes")

	// The entity still serves.
	rep = recv(t, submit(host, &ordopb.Envelope{Target: target, RequestId: "ok", Payload: add}))
	require.Nil(t, rep.GetError())
}

// bigKind's handlers make the state as large as asked: Add writes and
// replies, Echo defers its reply.
func bigKind() *actors.KindOf[*testpb.Counter] {
	return actors.MustKind("big", func() *testpb.Counter { return new(testpb.Counter) },
		actors.On(func(c *ctxC, m *testpb.Add) (*testpb.Value, error) {
			c.State.Value += m.Delta
			c.State.Ballast = make([]byte, m.Ballast)
			return &testpb.Value{Value: c.State.Value}, nil
		}),
		actors.On(func(c *ctxC, m *testpb.Echo) (*testpb.Value, error) {
			c.State.Value += 100
			c.State.Ballast = make([]byte, m.N)
			c.Defer("later")
			return nil, nil
		}),
		actors.OnRead(func(c *ctxC, m *testpb.Get) (*testpb.Value, error) {
			return &testpb.Value{Value: c.State.Value}, nil
		}),
	)
}

// A write whose record would exceed MaxStateBytes fails that request with
// ErrTooLarge and is rolled back and not recorded; the entity and its
// shard go on serving under the same epoch.
func TestLimitStateTooLargeFailsOnlyThatRequest(t *testing.T) {
	var lost atomic.Int64
	store := memory.New()
	cfg := actors.DefaultLocalConfig()
	cfg.Shards = 4
	cfg.MaxStateBytes = 4096
	host := startHost(t, cfg, actors.HostDeps{ShardLost: func(uint32, int64, error) { lost.Add(1) }, Store: store}, bigKind())
	ownAll(t, host, cfg.Shards)
	ctx := testCtx(t)
	big := actors.Ref{Kind: "big", ID: "b"}
	call := func(msg *testpb.Add, id string) (*testpb.Value, error) {
		return actors.Call[*testpb.Value](ctx, host, big, msg, actors.WithRequestID(id))
	}

	v, err := call(&testpb.Add{Delta: 1}, "one")
	require.NoError(t, err)
	require.EqualValues(t, 1, v.Value)
	for i := 0; i < 2; i++ { // the retry is refused again: nothing was recorded
		_, err = call(&testpb.Add{Delta: 10, Ballast: 8192}, "too-big")
		require.ErrorIs(t, err, actors.ErrTooLarge, "attempt %d", i)
		require.ErrorIs(t, err, actors.ErrBadRequest)
		require.False(t, actors.Retryable(err))
	}
	got, err := actors.Call[*testpb.Value](ctx, host, big, &testpb.Get{})
	require.NoError(t, err)
	require.EqualValues(t, 1, got.Value, "the refused write was not rolled back")

	// A deferral whose write is too large is refused at once, not left
	// waiting.
	env, err := actors.Envelope(big, &testpb.Echo{N: 8192}, "defer-big")
	require.NoError(t, err)
	rep := recv(t, submit(host, env))
	require.Equal(t, ordopb.Code_CODE_TOO_LARGE, rep.GetError().GetCode(), "%v", rep)

	v, err = call(&testpb.Add{Delta: 1, Ballast: 1024}, "two")
	require.NoError(t, err)
	require.EqualValues(t, 2, v.Value)
	require.Equal(t, int64(1), host.Owned()[actors.ShardOf(big, cfg.Shards)], "the shard's epoch changed")
	require.Zero(t, lost.Load(), "shards lost")
	require.Zero(t, host.Stats().Batch.Failed, "failed records")
}

// Replies recorded for deduplication make room for each other within
// MaxStateBytes: the oldest go first, writes never start failing, and a
// retry of a recent request still gets its stored reply.
func TestLimitDedupWindowFitsMaxStateBytes(t *testing.T) {
	h := newHarness(t, func(c *actors.HostConfig, d *actors.HostDeps) { c.MaxStateBytes = 4096 })
	ctx := testCtx(t)
	const n = 200 // 200 entries of about 80 bytes: far over 4 KiB
	for i := 1; i <= n; i++ {
		v, err := h.add(ctx, "window", 1, actors.WithRequestID(fmt.Sprintf("req-%03d", i)))
		require.NoError(t, err, "add %d", i)
		require.EqualValues(t, i, v.Value)
	}
	v, err := h.add(ctx, "window", 1, actors.WithRequestID(fmt.Sprintf("req-%03d", n)))
	require.NoError(t, err)
	require.EqualValues(t, n, v.Value, "a retry of the last request was applied again")
	require.EqualValues(t, n, h.n.adds.Load(), "handler runs")
}

// A record the store refuses as too large (a store whose limits are below
// MaxStateBytes) fails the requests that waited for it with ErrTooLarge;
// the entity restarts from storage, and its shard is not given up.
func TestLimitStoreRefusalFailsOnlyItsRecord(t *testing.T) {
	var lost atomic.Int64
	store := memory.New()
	cfg := actors.DefaultLocalConfig()
	cfg.Shards = 4
	cfg.MaxStateBytes = 1 << 20
	host := startHost(t, cfg, actors.HostDeps{ShardLost: func(uint32, int64, error) { lost.Add(1) }, Store: store}, bigKind())
	ownAll(t, host, cfg.Shards)
	ctx := testCtx(t)
	ids := sameShard("r", 2, cfg.Shards)
	r, other := actors.Ref{Kind: "big", ID: ids[0]}, actors.Ref{Kind: "big", ID: ids[1]}
	for _, x := range []actors.Ref{r, other} {
		_, err := actors.Call[*testpb.Value](ctx, host, x, &testpb.Add{Delta: 1})
		require.NoError(t, err)
	}

	store.LimitSaves(2048, 0)
	_, err := actors.Call[*testpb.Value](ctx, host, r, &testpb.Add{Delta: 1, Ballast: 4096})
	require.ErrorIs(t, err, actors.ErrTooLarge)
	require.False(t, actors.Retryable(err))

	for _, x := range []actors.Ref{r, other} {
		v, err := actors.Call[*testpb.Value](ctx, host, x, &testpb.Add{Delta: 1})
		require.NoError(t, err, "%s", x)
		require.EqualValues(t, 2, v.Value, "%s", x)
	}
	require.Equal(t, int64(1), host.Owned()[actors.ShardOf(r, cfg.Shards)], "the shard's epoch changed")
	require.Zero(t, lost.Load(), "shards lost")
	s := host.Stats().Batch
	require.EqualValues(t, 1, s.TooLarge)
	require.Zero(t, s.Failed)
}

// A shard's group of records that the store refuses only as a whole (more
// records than one transaction holds) is written in smaller groups:
// every write succeeds.
func TestLimitStoreRefusedGroupIsSplit(t *testing.T) {
	var lost atomic.Int64
	h := newHarness(t, func(c *actors.HostConfig, d *actors.HostDeps) {
		d.ShardLost = func(uint32, int64, error) { lost.Add(1) }
	})
	ids := sameShard("g", 9, h.cfg.Shards)
	h.store.LimitSaves(0, 2)
	release := h.store.BlockSaves()
	defer release()
	replies := make([]chan *ordopb.Reply, len(ids))
	replies[0] = submit(h.host, mustEnvelope(t, ref(ids[0]), &testpb.Add{Delta: 1}, "w-0"))
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if s, _ := h.store.Stats(); s == 0 {
			return errPending // the first write holds the (blocked) store
		}
		return nil
	})
	for i := 1; i < len(ids); i++ {
		replies[i] = submit(h.host, mustEnvelope(t, ref(ids[i]), &testpb.Add{Delta: 1}, fmt.Sprint("w-", i)))
	}
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if w := h.host.Stats().Batch.Writes; w < uint64(len(ids)) {
			return fmt.Errorf("%d writes submitted", w)
		}
		return nil
	})
	release()
	for i, ch := range replies {
		rep := recv(t, ch)
		require.Nil(t, rep.GetError(), "write %d", i)
	}
	for _, id := range ids {
		v, _ := h.stored(id)
		require.EqualValues(t, 1, v, id)
	}
	require.Zero(t, lost.Load(), "shards lost")
	require.Zero(t, h.host.Stats().Batch.TooLarge)
}

type gate struct {
	open    chan struct{}
	entered atomic.Int64
	release func() // closes open, once
}

// newGate returns a closed gate; release opens it.
func newGate() *gate {
	g := &gate{open: make(chan struct{})}
	g.release = sync.OnceFunc(func() { close(g.open) })
	return g
}

// blockerKind's Add waits until g is open (or its context ends).
func blockerKind(g *gate) *actors.KindOf[*testpb.Counter] {
	return actors.MustKind("blocker", func() *testpb.Counter { return new(testpb.Counter) },
		actors.On(func(c *ctxC, m *testpb.Add) (*testpb.Value, error) {
			g.entered.Add(1)
			select {
			case <-g.open:
			case <-c.Done():
				return nil, c.Err()
			}
			c.State.Value += m.Delta
			return &testpb.Value{Value: c.State.Value}, nil
		}),
	)
}

func blocker(id string) actors.Ref { return actors.Ref{Kind: "blocker", ID: id} }

func requireOverloaded(t *testing.T, rep *ordopb.Reply, retryAfter time.Duration) {
	t.Helper()
	err := actors.ErrorFromProto(rep.GetError())
	require.ErrorIs(t, err, actors.ErrUnavailable)
	require.True(t, actors.Retryable(err))
	hint := actors.RetryAfter(err)
	require.GreaterOrEqual(t, hint, retryAfter, "retry-after hint")
	require.Less(t, hint, retryAfter*3/2+time.Millisecond, "retry-after hint")
}

// A flood of calls to one entity whose handler blocks queues at most
// MaxMailbox of them, without a goroutine each; the rest are refused at
// once, retryably, with a retry-after hint. Once the handler is released,
// every admitted call is answered.
func TestLimitMailboxBounded(t *testing.T) {
	const maxMailbox, flood = 16, 10 * 16
	g := newGate()
	cfg := actors.DefaultLocalConfig()
	cfg.Shards = 4
	cfg.MaxMailbox = maxMailbox
	cfg.RetryAfter = 40 * time.Millisecond
	host := startHost(t, cfg, actors.HostDeps{Store: memory.New()}, blockerKind(g))
	t.Cleanup(g.release)
	ownAll(t, host, cfg.Shards)

	first := submit(host, mustEnvelope(t, blocker("b"), &testpb.Add{Delta: 1}, "first"))
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if g.entered.Load() == 0 {
			return errPending
		}
		return nil
	})
	goroutines := runtime.NumGoroutine()
	refused := make(chan *ordopb.Reply, flood)
	admitted := make(chan *ordopb.Reply, flood)
	for i := 0; i < flood; i++ {
		host.Submit(mustEnvelope(t, blocker("b"), &testpb.Add{Delta: 1}, fmt.Sprint("flood-", i)), func(r *ordopb.Reply) {
			if r.GetError().GetCode() == ordopb.Code_CODE_UNAVAILABLE {
				refused <- r
			} else {
				admitted <- r
			}
		})
	}
	// The refusals were answered within Submit.
	require.Len(t, refused, flood-maxMailbox)
	require.Len(t, admitted, 0)
	st := host.Stats()
	require.Equal(t, 1+maxMailbox, st.Inflight, "calls in flight")
	require.EqualValues(t, flood-maxMailbox, st.Overloaded)
	require.Less(t, runtime.NumGoroutine()-goroutines, maxMailbox, "goroutines grew with the queued calls")
	for len(refused) > 0 {
		requireOverloaded(t, <-refused, cfg.RetryAfter)
	}

	g.release()
	require.Nil(t, recv(t, first).GetError())
	for i := 0; i < maxMailbox; i++ {
		require.Nil(t, recv(t, admitted).GetError())
	}
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if n := host.Stats().Inflight; n != 0 {
			return fmt.Errorf("%d calls in flight", n)
		}
		return nil
	})
}

// Beyond MaxInflight calls admitted and not answered, calls are refused
// retryably, before their entity is activated.
func TestLimitInflightBounded(t *testing.T) {
	const maxInflight = 8
	g := newGate()
	store := &countingStore{Store: memory.New()}
	cfg := actors.DefaultLocalConfig()
	cfg.Shards = 4
	cfg.MaxInflight = maxInflight
	host := startHost(t, cfg, actors.HostDeps{Store: store}, blockerKind(g))
	t.Cleanup(g.release)
	ownAll(t, host, cfg.Shards)

	var admitted []chan *ordopb.Reply
	for i := 0; i < maxInflight; i++ {
		admitted = append(admitted, submit(host, mustEnvelope(t, blocker(fmt.Sprint("e", i)), &testpb.Add{Delta: 1}, "a")))
	}
	rep := recv(t, submit(host, mustEnvelope(t, blocker("late"), &testpb.Add{Delta: 1}, "a")))
	requireOverloaded(t, rep, cfg.RetryAfter)
	require.EqualValues(t, maxInflight, host.Stats().Activations, "the refused call activated its entity")
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if n := g.entered.Load(); n != maxInflight {
			return fmt.Errorf("%d handlers entered", n)
		}
		return nil
	})
	require.EqualValues(t, maxInflight, store.loads.Load())

	g.release()
	for _, ch := range admitted {
		require.Nil(t, recv(t, ch).GetError())
	}
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if n := host.Stats().Inflight; n != 0 {
			return fmt.Errorf("%d calls in flight", n)
		}
		return nil
	})
	rep = recv(t, submit(host, mustEnvelope(t, blocker("late"), &testpb.Add{Delta: 1}, "a")))
	require.Nil(t, rep.GetError())
}

// A message between co-located entities is never refused for overload:
// it carries on work its sender already admitted (the call in flight
// that sent it fills MaxInflight here).
func TestLimitColocatedNeverRefused(t *testing.T) {
	h := newHarness(t, func(c *actors.HostConfig, d *actors.HostDeps) {
		c.MaxInflight = 1
		c.Retry = fastRetry(1)
	})
	ctx := testCtx(t)
	_, err := h.add(ctx, "a", 1)
	require.NoError(t, err)
	sender, err := actors.Colocated("counter", ref("a"), "x")
	require.NoError(t, err)
	_, err = actors.Call[*testpb.Value](ctx, h.host, sender, &testpb.Forward{To: "a", Delta: 5, RequestId: "fwd-1"})
	require.NoError(t, err)
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if v, _ := h.stored("a"); v != 6 {
			return fmt.Errorf("counter/a has %d, want 6", v)
		}
		return nil
	})
	require.Zero(t, h.host.Stats().Overloaded, "calls refused for overload")
}

// A call without a deadline gets DefaultDeadline from its admission: a
// deferred reply nobody resolves ends with ErrDeadline.
func TestLimitDefaultDeadlineEndsDeferredReply(t *testing.T) {
	l := newLatch(t, func(c *actors.HostConfig) {
		c.DefaultDeadline = 100 * time.Millisecond
		c.MaxDeadline = time.Hour
	})
	rep := recv(t, l.submit(t, "d", &testpb.Echo{}, "no-deadline", time.Time{}))
	require.Equal(t, ordopb.Code_CODE_DEADLINE, rep.GetError().GetCode(), "%v", rep)
}

// A deadline later than MaxDeadline from admission is brought forward to
// it.
func TestLimitMaxDeadlineCapsDeferredReply(t *testing.T) {
	l := newLatch(t, func(c *actors.HostConfig) {
		c.DefaultDeadline = 50 * time.Millisecond
		c.MaxDeadline = 100 * time.Millisecond
	})
	rep := recv(t, l.submit(t, "d", &testpb.Echo{}, "far-deadline", time.Now().Add(time.Hour)))
	require.Equal(t, ordopb.Code_CODE_DEADLINE, rep.GetError().GetCode(), "%v", rep)
}

// An entity's outgoing message refused with a retry-after hint is retried
// no sooner than the hint, even when its retry policy would retry at once.
func TestLimitRetryAfterHintDelaysEntityRetry(t *testing.T) {
	const hint = 300 * time.Millisecond
	var first, second atomic.Int64
	rh := newRetryHarness(t, func(n int, env *ordopb.Envelope) *ordopb.Reply {
		if n == 1 {
			first.Store(time.Now().UnixNano())
			return &ordopb.Reply{RequestId: env.GetRequestId(), Error: &ordopb.Error{
				Code: ordopb.Code_CODE_UNAVAILABLE, Message: "overloaded", RetryAfterMillis: hint.Milliseconds()}}
		}
		second.CompareAndSwap(0, time.Now().UnixNano())
		return nil
	}, false, nil)
	rh.forward(t, "hinted")
	require.NoError(t, rh.out.waitOutcome(t, "hinted"))
	require.GreaterOrEqual(t, time.Duration(second.Load()-first.Load()), hint, "retried before the hint")
}

func TestLimitConfigValidation(t *testing.T) {
	for name, tweak := range map[string]func(*actors.HostConfig){
		"MaxPayloadBytes": func(c *actors.HostConfig) { c.MaxPayloadBytes = 0 },
		"MaxStateBytes":   func(c *actors.HostConfig) { c.MaxStateBytes = -1 },
		"MaxMailbox":      func(c *actors.HostConfig) { c.MaxMailbox = 0 },
		"MaxInflight":     func(c *actors.HostConfig) { c.MaxInflight = 0 },
		"RetryAfter":      func(c *actors.HostConfig) { c.RetryAfter = 0 },
		"DefaultDeadline": func(c *actors.HostConfig) { c.DefaultDeadline = 0 },
		"MaxDeadline":     func(c *actors.HostConfig) { c.MaxDeadline = c.DefaultDeadline - 1 },
	} {
		cfg := actors.DefaultHostConfig()
		tweak(&cfg)
		require.ErrorContains(t, cfg.Validate(), name)
	}
}

// The too-large code and the retry-after hint cross the wire.
func TestLimitErrorsOnTheWire(t *testing.T) {
	p := actors.ErrorToProto(fmt.Errorf("saving: %w", persistence.ErrTooLarge))
	require.Equal(t, ordopb.Code_CODE_TOO_LARGE, p.GetCode())
	err := actors.ErrorFromProto(p)
	require.ErrorIs(t, err, actors.ErrTooLarge)
	require.ErrorIs(t, err, actors.ErrBadRequest)
	require.False(t, actors.Retryable(err))

	p = actors.ErrorToProto(&actors.Error{Code: ordopb.Code_CODE_UNAVAILABLE, Message: "busy", RetryAfter: 150 * time.Millisecond})
	require.EqualValues(t, 150, p.GetRetryAfterMillis())
	err = actors.ErrorFromProto(p)
	require.True(t, actors.Retryable(err))
	require.Equal(t, 150*time.Millisecond, actors.RetryAfter(fmt.Errorf("call: %w", err)))
	require.Zero(t, actors.RetryAfter(actors.ErrUnavailable))

	// A peer cannot make a caller wait for ever.
	err = actors.ErrorFromProto(&ordopb.Error{Code: ordopb.Code_CODE_UNAVAILABLE, RetryAfterMillis: 1 << 60})
	require.Equal(t, time.Hour, actors.RetryAfter(err))
}
