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
)

// This file tests four options of a run against durability:
// BeforeDurable (a message leaves before its sender's write is durable),
// Context.Activation (an ID per load of the state), Unavailable (a
// refusal answered and not recorded) and Context.ReplyBeforeDurable (a
// write's reply leaves before the write is durable).

func newDurCounter() *testpb.Counter { return new(testpb.Counter) }

// durSink counts, per request ID, the Adds that reached the handler of
// kind "dsink": a message's arrival, whatever becomes of the receiver's
// write (which the tests hold in the store).
type durSink struct {
	mu   sync.Mutex
	seen map[string]int
}

func (s *durSink) saw(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen[id]
}

func durSinkKind(s *durSink) *actors.KindOf[*testpb.Counter] {
	return actors.MustKind("dsink", newDurCounter,
		actors.On(func(c *ctxC, m *testpb.Add) (*testpb.Value, error) {
			s.mu.Lock()
			if s.seen == nil {
				s.seen = make(map[string]int)
			}
			s.seen[c.RequestID()]++
			s.mu.Unlock()
			c.State.Value += m.Delta
			return &testpb.Value{Value: c.State.Value}, nil
		}))
}

// durSenderKind declares kind "dsender", whose write handlers add Delta
// to its Value and send Add{Delta} to an entity of kind target under the
// request ID <the run's request ID>-msg, with opts: Add with Context.Send
// to <target>/<Add.Sender>, Forward with actors.Request to
// <target>/<Forward.To>, whose continuation sets Forwarded to 2 (-1 on an
// error). Get reads.
func durSenderKind(target string, opts ...actors.RequestOption) *actors.KindOf[*testpb.Counter] {
	return actors.MustKind("dsender", newDurCounter,
		actors.On(func(c *ctxC, m *testpb.Add) (*testpb.Value, error) {
			c.State.Value += m.Delta
			c.Send(actors.Ref{Kind: target, ID: m.Sender}, &testpb.Add{Delta: m.Delta}, c.RequestID()+"-msg", opts...)
			return &testpb.Value{Value: c.State.Value}, nil
		}),
		actors.On(func(c *ctxC, m *testpb.Forward) (*testpb.Value, error) {
			c.State.Value += m.Delta
			actors.Request(c, actors.Ref{Kind: target, ID: m.To}, &testpb.Add{Delta: m.Delta}, c.RequestID()+"-msg",
				func(c *ctxC, _ *testpb.Value, err error) {
					if err != nil {
						c.State.Forwarded = -1
						return
					}
					c.State.Forwarded = 2
				}, opts...)
			return &testpb.Value{Value: c.State.Value}, nil
		}),
		actors.OnRead(func(c *ctxC, _ *testpb.Get) (*testpb.Value, error) {
			return &testpb.Value{Value: c.State.Value}, nil
		}),
	)
}

// durActor returns r's view of itself (Host.Runtime), answered by the
// entity after the messages handed to it before.
func durActor(host *actors.Host, r actors.Ref) (*actors.ActorRuntime, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rt, err := host.Runtime(ctx, r)
	if err != nil {
		return nil, err
	}
	if rt.Actor == nil {
		return nil, fmt.Errorf("%s did not answer: %s", r, rt.ActorError)
	}
	return rt.Actor, nil
}

// durState returns r's durable state, read from the store.
func durState(t *testing.T, host *actors.Host, r actors.Ref) (*testpb.Counter, actors.Record) {
	t.Helper()
	rec, err := host.LoadRecord(context.Background(), r)
	require.NoError(t, err)
	return rec.State.(*testpb.Counter), rec
}

// waitSaveStarted waits until the store has been asked for more than
// saves Saves: a write is in flight (and held, while saves are blocked).
func waitSaveStarted(t *testing.T, store *memory.Store, saves int) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if n, _ := store.Stats(); n <= saves {
			return fmt.Errorf("%d Saves, want more than %d", n, saves)
		}
		return nil
	})
}

// A message sent BeforeDurable (by Context.Send or actors.Request) to an
// entity of another shard reaches it while the sender's write is held in
// the store; the same message sent without the option is released behind
// that write and reaches it only once the write is durable. A message to
// an entity of the sender's own shard leaves at once without the option.
// In every case the sender's own reply waits for its write, and the
// message, its reply and the continuation complete once the store goes on.
func TestBeforeDurableMessageLeavesBeforeTheSendersWrite(t *testing.T) {
	for _, tc := range []struct {
		name      string
		early     bool // sent BeforeDurable
		request   bool // actors.Request (else Context.Send)
		sameShard bool // the receiver is in the sender's shard
		leaves    bool // the message arrives while the sender's write is held
	}{
		{name: "send/before-durable", early: true, leaves: true},
		{name: "request/before-durable", early: true, request: true, leaves: true},
		{name: "send/default", early: false},
		{name: "request/default", early: false, request: true},
		{name: "send/default/same-shard", sameShard: true, leaves: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var opts []actors.RequestOption
			if tc.early {
				opts = append(opts, actors.BeforeDurable())
			}
			sink := &durSink{}
			store := memory.New()
			cfg := actors.DefaultLocalConfig()
			cfg.Shards = 4
			cfg.StoreTimeout = 30 * time.Second // a held Save does not time out
			host := startHost(t, cfg, actors.HostDeps{Store: store}, durSinkKind(sink), durSenderKind("dsink", opts...))
			ownAll(t, host, cfg.Shards)
			ctx := testCtx(t)
			sender := actors.Ref{Kind: "dsender", ID: "s"}
			to := actors.Ref{Kind: "dsink", ID: "r"}
			for (actors.ShardOf(to, cfg.Shards) == actors.ShardOf(sender, cfg.Shards)) != tc.sameShard {
				to.ID += "+"
			}
			// Both entities active, nothing in flight.
			_, err := actors.Call[*testpb.Value](ctx, host, sender, &testpb.Get{})
			require.NoError(t, err)
			_, err = actors.Call[*testpb.Value](ctx, host, to, &testpb.Add{}, actors.WithRequestID("warm"))
			require.NoError(t, err)

			release := store.BlockSaves()
			defer release()
			saves, _ := store.Stats()
			var env *ordopb.Envelope
			if tc.request {
				env, err = actors.Envelope(sender, &testpb.Forward{To: to.ID, Delta: 5}, "call")
			} else {
				env, err = actors.Envelope(sender, &testpb.Add{Delta: 5, Sender: to.ID}, "call")
			}
			require.NoError(t, err)
			reply := make(chan *ordopb.Reply, 1)
			host.Submit(env, func(r *ordopb.Reply) { reply <- r })
			const msgID = "call-msg"

			waitSaveStarted(t, store, saves) // the sender's write is held
			if tc.leaves {
				testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
					if n := sink.saw(msgID); n != 1 {
						return fmt.Errorf("the message reached the receiver %d times, want 1", n)
					}
					return nil
				})
				a, err := durActor(host, sender)
				require.NoError(t, err)
				require.Greater(t, a.Seq, a.Durable, "the sender's write is durable: the message may have waited for it")
			} else {
				// The run has ended once its message is among the
				// sender's outgoing ones: it was released behind the
				// write, and has not been attempted.
				var out *actors.OutRuntime
				testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
					a, err := durActor(host, sender)
					if err != nil {
						return err
					}
					for i := range a.Outs {
						if a.Outs[i].RequestID == msgID {
							out = &a.Outs[i]
							return nil
						}
					}
					return fmt.Errorf("the message is not among the sender's: %+v", a)
				})
				require.Zero(t, out.Attempts, "the message left before the sender's write was durable")
				require.Zero(t, sink.saw(msgID), "the message reached the receiver before the sender's write was durable")
			}
			requireNoReply(t, reply, "the sender's reply while its write is held")

			release()
			require.EqualValues(t, 5, value(t, recv(t, reply)))
			testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
				if n := sink.saw(msgID); n != 1 {
					return fmt.Errorf("the message reached the receiver %d times, want 1", n)
				}
				if v := storedValue(t, store, "dsink", to.ID); v != 5 {
					return fmt.Errorf("the receiver stored %d, want 5", v)
				}
				if tc.request {
					if st, _ := durState(t, host, sender); st.Forwarded != 2 {
						return fmt.Errorf("the sender's continuation left Forwarded at %d, want 2", st.Forwarded)
					}
				}
				return nil
			})
		})
	}
}

// durActivations records, per entity, the activation IDs its OnActivate
// hook saw, in order.
type durActivations struct {
	mu  sync.Mutex
	ids map[string][]uint64
}

func (a *durActivations) of(id string) []uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]uint64(nil), a.ids[id]...)
}

// durActKind declares kind "dact": its handlers answer with the
// activation ID (in PrevSeq) and the value; Add adds (and sets a ballast
// of Ballast bytes), Echo asks to passivate, Get reads.
func durActKind(acts *durActivations) *actors.KindOf[*testpb.Counter] {
	answer := func(c *ctxC) *testpb.Value {
		return &testpb.Value{Value: c.State.Value, PrevSeq: c.Activation()}
	}
	return actors.MustKind("dact", newDurCounter,
		actors.OnActivate(func(c *ctxC) {
			acts.mu.Lock()
			defer acts.mu.Unlock()
			if acts.ids == nil {
				acts.ids = make(map[string][]uint64)
			}
			acts.ids[c.Ref().ID] = append(acts.ids[c.Ref().ID], c.Activation())
		}),
		actors.On(func(c *ctxC, m *testpb.Add) (*testpb.Value, error) {
			c.State.Value += m.Delta
			if m.Ballast > 0 {
				c.State.Ballast = make([]byte, m.Ballast)
			}
			return answer(c), nil
		}),
		actors.On(func(c *ctxC, _ *testpb.Echo) (*testpb.Value, error) {
			c.Passivate()
			return answer(c), nil
		}),
		actors.OnRead(func(c *ctxC, _ *testpb.Get) (*testpb.Value, error) {
			return answer(c), nil
		}),
	)
}

func dactRef(id string) actors.Ref { return actors.Ref{Kind: "dact", ID: id} }

// durCallAct calls r with msg and returns its answer: value, activation.
func durCallAct(t *testing.T, host *actors.Host, r actors.Ref, msg *testpb.Add) (int64, uint64) {
	t.Helper()
	var v *testpb.Value
	var err error
	if msg == nil {
		v, err = actors.Call[*testpb.Value](testCtx(t), host, r, &testpb.Get{})
	} else {
		v, err = actors.Call[*testpb.Value](testCtx(t), host, r, msg)
	}
	require.NoError(t, err)
	return v.Value, v.PrevSeq
}

func startDact(t *testing.T, store *memory.Store, tweak func(*actors.HostConfig, *actors.HostDeps)) (*actors.Host, *durActivations) {
	t.Helper()
	acts := &durActivations{}
	cfg := actors.DefaultLocalConfig()
	cfg.Shards = 4
	cfg.IdleTimeout = time.Hour // only Passivate passivates
	deps := actors.HostDeps{Store: store}
	if tweak != nil {
		tweak(&cfg, &deps)
	}
	host := startHost(t, cfg, deps, durActKind(acts))
	ownAll(t, host, cfg.Shards)
	return host, acts
}

// Context.Activation is non-zero, the same in every handler and hook of
// one activation, different for another entity, and drawn again when the
// entity is activated again after passivating.
func TestActivationIDPerActivation(t *testing.T) {
	store := memory.New()
	host, acts := startDact(t, store, nil)
	a := dactRef("a")

	v, first := durCallAct(t, host, a, &testpb.Add{Delta: 1})
	require.EqualValues(t, 1, v)
	require.NotZero(t, first)
	for _, msg := range []*testpb.Add{nil, {Delta: 1}, nil} {
		_, id := durCallAct(t, host, a, msg)
		require.Equal(t, first, id, "another activation ID within one activation")
	}
	require.Equal(t, []uint64{first}, acts.of("a"), "the OnActivate hook's activation IDs")

	_, other := durCallAct(t, host, dactRef("b"), nil)
	require.NotZero(t, other)
	require.NotEqual(t, first, other, "two entities share an activation ID")

	_, err := actors.Call[*testpb.Value](testCtx(t), host, a, &testpb.Echo{}) // asks to passivate
	require.NoError(t, err)
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if host.IsActive(a) {
			return fmt.Errorf("%s has not passivated", a)
		}
		return nil
	})
	v, second := durCallAct(t, host, a, nil)
	require.EqualValues(t, 2, v, "the state did not survive the passivation")
	require.NotZero(t, second)
	require.NotEqual(t, first, second, "the same activation ID after passivation")
	_, again := durCallAct(t, host, a, &testpb.Add{Delta: 1})
	require.Equal(t, second, again)
	require.Equal(t, []uint64{first, second}, acts.of("a"), "the OnActivate hook's activation IDs")
}

// A failed write makes the entity load its state again, under a new
// activation ID: a Save that fails (the shard is given up and owned again
// under a new epoch, the entity started anew), and a write the store
// refuses as too large (the entity reloads in place, its shard kept).
func TestActivationIDNewAfterFailedWrite(t *testing.T) {
	t.Run("save-fails", func(t *testing.T) {
		store := memory.New()
		var lost atomic.Int64
		host, acts := startDact(t, store, func(_ *actors.HostConfig, d *actors.HostDeps) {
			d.ShardLost = func(uint32, int64, error) { lost.Add(1) }
		})
		a := dactRef("a")
		shard := actors.ShardOf(a, 4)
		_, first := durCallAct(t, host, a, &testpb.Add{Delta: 1})
		require.NotZero(t, first)

		store.FailNextSaves(1, nil)
		_, err := actors.Call[*testpb.Value](testCtx(t), host, a, &testpb.Add{Delta: 10})
		require.Error(t, err)
		require.True(t, actors.Retryable(err), "error %v should be retryable", err)
		testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
			if _, owned := host.Owned()[shard]; owned || lost.Load() != 1 {
				return errPending
			}
			return nil
		})
		require.NoError(t, host.Own(shard, 2))

		v, second := durCallAct(t, host, a, nil)
		require.EqualValues(t, 1, v, "the failed write's change survived")
		require.NotZero(t, second)
		require.NotEqual(t, first, second, "the same activation ID after a failed write")
		require.Equal(t, []uint64{first, second}, acts.of("a"), "the OnActivate hook's activation IDs")
	})
	t.Run("write-refused", func(t *testing.T) {
		store := memory.New()
		var lost atomic.Int64
		host, acts := startDact(t, store, func(_ *actors.HostConfig, d *actors.HostDeps) {
			d.ShardLost = func(uint32, int64, error) { lost.Add(1) }
		})
		a := dactRef("a")
		_, first := durCallAct(t, host, a, &testpb.Add{Delta: 1})
		require.NotZero(t, first)

		store.LimitSaves(2048, 0)
		_, err := actors.Call[*testpb.Value](testCtx(t), host, a, &testpb.Add{Delta: 10, Ballast: 4096})
		require.ErrorIs(t, err, actors.ErrTooLarge)
		store.LimitSaves(0, 0)

		v, second := durCallAct(t, host, a, nil)
		require.EqualValues(t, 1, v, "the refused write's change survived")
		require.NotZero(t, second)
		require.NotEqual(t, first, second, "the same activation ID after a refused write")
		_, again := durCallAct(t, host, a, &testpb.Add{Delta: 1})
		require.Equal(t, second, again)
		require.Equal(t, []uint64{first, second}, acts.of("a"), "the OnActivate hook's activation IDs")
		// The entity reloaded in place: neither its shard nor the entity
		// stopped.
		require.Zero(t, lost.Load(), "shards lost")
		require.EqualValues(t, 1, host.Owned()[actors.ShardOf(a, 4)])
		require.Zero(t, host.Stats().Passivations)
	})
}

// durGate is the behavior of kind "dgate": its Add runs are counted, with
// their times, and answer refusal(n) for the n-th (from 1) when it is
// not nil; its Reject runs are counted.
type durGate struct {
	mu      sync.Mutex
	refusal func(n int) error
	runs    []time.Time
	rejects atomic.Int64
}

func (g *durGate) refuse(f func(n int) error) {
	g.mu.Lock()
	g.refusal = f
	g.mu.Unlock()
}

func (g *durGate) add() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.runs = append(g.runs, time.Now())
	if g.refusal == nil {
		return nil
	}
	return g.refusal(len(g.runs))
}

func (g *durGate) adds() []time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]time.Time(nil), g.runs...)
}

// durGateKind declares kind "dgate": Add adds, then answers the gate's
// refusal if any (its change must be rolled back); Reject adds 1000 and
// fails with a HandlerError (rolled back, recorded); Get reads.
func durGateKind(g *durGate) *actors.KindOf[*testpb.Counter] {
	return actors.MustKind("dgate", newDurCounter,
		actors.On(func(c *ctxC, m *testpb.Add) (*testpb.Value, error) {
			c.State.Value += m.Delta
			if err := g.add(); err != nil {
				return nil, err
			}
			return &testpb.Value{Value: c.State.Value}, nil
		}),
		actors.On(func(c *ctxC, m *testpb.Reject) (*testpb.Value, error) {
			g.rejects.Add(1)
			c.State.Value += 1000
			return nil, actors.HandlerError(m.Code, "rejected on purpose")
		}),
		actors.OnRead(func(c *ctxC, _ *testpb.Get) (*testpb.Value, error) {
			return &testpb.Value{Value: c.State.Value}, nil
		}),
	)
}

func TestUnavailableError(t *testing.T) {
	err := actors.Unavailable(250*time.Millisecond, "busy %d", 7)
	require.Equal(t, ordopb.Code_CODE_UNAVAILABLE, err.Code)
	require.Equal(t, "busy 7", err.Message)
	require.Equal(t, 250*time.Millisecond, err.RetryAfter)
	require.ErrorIs(t, err, actors.ErrUnavailable)
	require.True(t, actors.Retryable(err))
	require.Equal(t, 250*time.Millisecond, actors.RetryAfter(err))
	require.Zero(t, actors.Unavailable(-time.Second, "x").RetryAfter, "a negative hint")
	require.Zero(t, actors.RetryAfter(actors.Unavailable(0, "x")))
}

// A handler's retryable *Error (Unavailable, wrapped or not, or another
// retryable code) answers the caller with that retryable error and its
// retry-after hint; the run's changes are rolled back, nothing is
// written, and the answer is not recorded: a retry with the same request
// ID runs the handler again, and once it answers, that answer is recorded.
// A HandlerError, by contrast, is recorded: its retry gets the same
// answer without running the handler.
func TestUnavailableIsAnsweredNotRecorded(t *testing.T) {
	for _, tc := range []struct {
		name     string
		err      func(n int) error
		sentinel error
		hint     time.Duration
	}{
		{"unavailable", func(n int) error { return actors.Unavailable(250*time.Millisecond, "busy %d", n) },
			actors.ErrUnavailable, 250 * time.Millisecond},
		{"wrapped", func(n int) error { return fmt.Errorf("nested: %w", actors.Unavailable(0, "busy %d", n)) },
			actors.ErrUnavailable, 0},
		{"not-here", func(n int) error { return &actors.Error{Code: ordopb.Code_CODE_NOT_HERE, Message: "moved"} },
			actors.ErrNotHere, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := &durGate{}
			store := memory.New()
			cfg := actors.DefaultLocalConfig()
			cfg.Shards = 4
			host := startHost(t, cfg, actors.HostDeps{Store: store}, durGateKind(g))
			ownAll(t, host, cfg.Shards)
			ctx := testCtx(t)
			r := actors.Ref{Kind: "dgate", ID: "g"}
			v, err := actors.Call[*testpb.Value](ctx, host, r, &testpb.Add{Delta: 1}, actors.WithRequestID("first"))
			require.NoError(t, err)
			require.EqualValues(t, 1, v.Value)
			_, before := durState(t, host, r)

			g.refuse(tc.err)
			for attempt := 1; attempt <= 2; attempt++ { // refused twice: not recorded
				_, err = actors.Call[*testpb.Value](ctx, host, r, &testpb.Add{Delta: 10}, actors.WithRequestID("r"))
				require.Error(t, err, "attempt %d", attempt)
				require.ErrorIs(t, err, tc.sentinel, "attempt %d", attempt)
				require.True(t, actors.Retryable(err), "attempt %d: %v should be retryable", attempt, err)
				require.Equal(t, tc.hint, actors.RetryAfter(err), "attempt %d: retry-after hint", attempt)
				require.Len(t, g.adds(), 1+attempt, "the handler did not run again for attempt %d", attempt)
				if tc.sentinel == actors.ErrUnavailable {
					require.Contains(t, err.Error(), fmt.Sprint("busy ", 1+attempt))
				}

				got, err := actors.Call[*testpb.Value](ctx, host, r, &testpb.Get{})
				require.NoError(t, err)
				require.EqualValues(t, 1, got.Value, "the refused run's change was kept")
				a, err := durActor(host, r)
				require.NoError(t, err)
				require.Equal(t, before.Seq, a.Seq, "the refused run wrote")
				st, rec := durState(t, host, r)
				require.EqualValues(t, 1, st.Value)
				require.Equal(t, before.Seq, rec.Seq, "the refused run wrote")
				require.Equal(t, before.Recent, rec.Recent, "the refusal was recorded")
			}

			g.refuse(nil)
			v, err = actors.Call[*testpb.Value](ctx, host, r, &testpb.Add{Delta: 10}, actors.WithRequestID("r"))
			require.NoError(t, err, "the retry after the refusals")
			require.EqualValues(t, 11, v.Value)
			require.Len(t, g.adds(), 4, "the retry did not run the handler")
			v, err = actors.Call[*testpb.Value](ctx, host, r, &testpb.Add{Delta: 10}, actors.WithRequestID("r"))
			require.NoError(t, err)
			require.EqualValues(t, 11, v.Value, "the answer was not recorded")
			require.Len(t, g.adds(), 4, "a recorded answer ran the handler again")

			// Contrast: a HandlerError is recorded.
			for range 2 {
				_, err = actors.Call[*testpb.Value](ctx, host, r, &testpb.Reject{Code: "nope"}, actors.WithRequestID("rej"))
				require.ErrorIs(t, err, actors.ErrHandler)
				require.False(t, actors.Retryable(err))
				var ae *actors.Error
				require.ErrorAs(t, err, &ae)
				require.Equal(t, "nope", ae.HandlerCode)
			}
			require.EqualValues(t, 1, g.rejects.Load(), "a retry of a recorded HandlerError ran the handler again")
			got, err := actors.Call[*testpb.Value](ctx, host, r, &testpb.Get{})
			require.NoError(t, err)
			require.EqualValues(t, 11, got.Value)
			testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
				if st, _ := durState(t, host, r); st.Value != 11 {
					return fmt.Errorf("stored %d, want 11", st.Value)
				}
				return nil
			})
		})
	}
}

// An entity's Request answered Unavailable is retried by its policy with
// the same request ID, no sooner than the refusal's retry-after hint;
// the receiver's handler runs at each attempt, and the message is applied
// once, when it answers.
func TestUnavailableRetriedBySenderAfterTheHint(t *testing.T) {
	const hint = 50 * time.Millisecond
	g := &durGate{}
	g.refuse(func(n int) error {
		if n <= 2 {
			return actors.Unavailable(hint, "not yet (%d)", n)
		}
		return nil
	})
	store := memory.New()
	cfg := actors.DefaultLocalConfig()
	cfg.Shards = 4
	policy := actors.RetryPolicy{Initial: time.Millisecond, Max: time.Millisecond, Multiplier: 1, MaxAttempts: 5}
	host := startHost(t, cfg, actors.HostDeps{Store: store}, durGateKind(g), durSenderKind("dgate", actors.WithRetry(policy)))
	ownAll(t, host, cfg.Shards)
	ctx := testCtx(t)
	sender, gate := actors.Ref{Kind: "dsender", ID: "s"}, actors.Ref{Kind: "dgate", ID: "g"}

	_, err := actors.Call[*testpb.Value](ctx, host, sender, &testpb.Forward{To: gate.ID, Delta: 7})
	require.NoError(t, err)
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if st, _ := durState(t, host, sender); st.Forwarded != 2 {
			return fmt.Errorf("the sender's continuation left Forwarded at %d, want 2", st.Forwarded)
		}
		return nil
	})
	runs := g.adds()
	require.Len(t, runs, 3, "the receiver's handler runs: two refusals and the answer")
	for i := 1; i < len(runs); i++ {
		require.GreaterOrEqual(t, runs[i].Sub(runs[i-1]), hint, "attempt %d came sooner than the retry-after hint", i+1)
	}
	v, err := actors.Call[*testpb.Value](ctx, host, gate, &testpb.Get{})
	require.NoError(t, err)
	require.EqualValues(t, 7, v.Value, "the message was not applied once")
}

// durReplyKind declares kind "dreply": Add adds, and answers with
// ReplyBeforeDurable when its Sender is "now"; Get reads, and calls
// ReplyBeforeDurable too (no effect in a read handler). runs counts the
// Add runs.
func durReplyKind(runs *atomic.Int64) *actors.KindOf[*testpb.Counter] {
	return actors.MustKind("dreply", newDurCounter,
		actors.On(func(c *ctxC, m *testpb.Add) (*testpb.Value, error) {
			runs.Add(1)
			c.State.Value += m.Delta
			if m.Sender == "now" {
				c.ReplyBeforeDurable()
			}
			return &testpb.Value{Value: c.State.Value}, nil
		}),
		actors.OnRead(func(c *ctxC, _ *testpb.Get) (*testpb.Value, error) {
			c.ReplyBeforeDurable()
			return &testpb.Value{Value: c.State.Value}, nil
		}),
	)
}

// A write handler's reply made with ReplyBeforeDurable leaves while the
// run's write and the entity's earlier write are held in the store; the
// reply of a write without it waits for its write (before and after runs
// that called it), as does a read's, ReplyBeforeDurable or not. The early
// reply is recorded: a retry with its request ID, after a restart from
// the store, gets it again without running the handler.
func TestReplyBeforeDurable(t *testing.T) {
	var runs atomic.Int64
	store := memory.New()
	cfg := actors.DefaultLocalConfig()
	cfg.Shards = 4
	cfg.StoreTimeout = 30 * time.Second // a held Save does not time out
	host := startHost(t, cfg, actors.HostDeps{Store: store}, durReplyKind(&runs))
	ownAll(t, host, cfg.Shards)
	ctx := testCtx(t)
	r := actors.Ref{Kind: "dreply", ID: "a"}
	submitTo := func(msg *testpb.Add, rid string) chan *ordopb.Reply {
		env, err := actors.Envelope(r, msg, rid)
		require.NoError(t, err)
		return submit(host, env)
	}
	v, err := actors.Call[*testpb.Value](ctx, host, r, &testpb.Add{Delta: 1}, actors.WithRequestID("warm"))
	require.NoError(t, err)
	require.EqualValues(t, 1, v.Value)

	release := store.BlockSaves()
	defer release()
	saves, _ := store.Stats()
	late := submitTo(&testpb.Add{Delta: 2}, "late")
	waitSaveStarted(t, store, saves) // the write of "late" is held
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		a, err := durActor(host, r)
		if err != nil {
			return err
		}
		if a.Seq != 2 || a.Durable != 1 || a.Held != 1 {
			return fmt.Errorf("the reply of \"late\" is not held for its write: %+v", a)
		}
		return nil
	})
	requireNoReply(t, late, "the reply of a write without ReplyBeforeDurable while its write is held")

	now := submitTo(&testpb.Add{Delta: 3, Sender: "now"}, "now")
	require.EqualValues(t, 6, value(t, recv(t, now)), "the reply made with ReplyBeforeDurable")
	a, err := durActor(host, r)
	require.NoError(t, err)
	require.EqualValues(t, 3, a.Seq)
	require.EqualValues(t, 1, a.Durable, "the writes the early reply went ahead of are durable")
	require.EqualValues(t, 1, storedValue(t, store, "dreply", "a"))
	requireNoReply(t, late, "the reply of an earlier write without ReplyBeforeDurable while its write is held")

	get, err := actors.Envelope(r, &testpb.Get{}, "read")
	require.NoError(t, err)
	read := submit(host, get)
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		a, err := durActor(host, r)
		if err != nil {
			return err
		}
		if a.Held != 2 {
			return fmt.Errorf("the read's reply is not held: %+v", a)
		}
		return nil
	})
	requireNoReply(t, read, "the reply of a read handler that called ReplyBeforeDurable while the writes it sees are held")

	// The option is the run's own: the next write's reply waits again.
	later := submitTo(&testpb.Add{Delta: 4}, "later")
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		a, err := durActor(host, r)
		if err != nil {
			return err
		}
		if a.Seq != 4 || a.Held != 3 {
			return fmt.Errorf("the reply of \"later\" is not held for its write: %+v", a)
		}
		return nil
	})
	requireNoReply(t, later, "the reply of a write without ReplyBeforeDurable after runs that called it")
	requireNoReply(t, read, "the reply of a read handler that called ReplyBeforeDurable while the writes it sees are held")
	requireNoReply(t, late, "the reply of an earlier write without ReplyBeforeDurable while its write is held")

	release()
	require.EqualValues(t, 3, value(t, recv(t, late)))
	require.EqualValues(t, 6, value(t, recv(t, read)))
	require.EqualValues(t, 10, value(t, recv(t, later)))
	require.EqualValues(t, 4, runs.Load())
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if v := storedValue(t, store, "dreply", "a"); v != 10 {
			return fmt.Errorf("stored %d, want 10", v)
		}
		return nil
	})
	v, err = actors.Call[*testpb.Value](ctx, host, r, &testpb.Add{Delta: 100}, actors.WithRequestID("next"))
	require.NoError(t, err)
	require.EqualValues(t, 110, v.Value)

	// The early reply was recorded with its write: after a restart from
	// the store, its retry gets it without running the handler.
	shard := actors.ShardOf(r, cfg.Shards)
	host.Drop(shard, fmt.Errorf("%w: test", actors.ErrNotHere))
	require.NoError(t, host.Own(shard, 2))
	v, err = actors.Call[*testpb.Value](ctx, host, r, &testpb.Add{Delta: 3, Sender: "now"}, actors.WithRequestID("now"))
	require.NoError(t, err)
	require.EqualValues(t, 6, v.Value, "the retry did not get the recorded reply")
	require.EqualValues(t, 5, runs.Load(), "the retry ran the handler again")
	v, err = actors.Call[*testpb.Value](ctx, host, r, &testpb.Get{})
	require.NoError(t, err)
	require.EqualValues(t, 110, v.Value)
}

// A deferred request answered with a refusal for now (Resolve with
// Unavailable) gets it, and it is not recorded: its retry, same request
// ID, runs the handler again.
func TestDeferredRefusalIsNotRecorded(t *testing.T) {
	var deferNext atomic.Bool
	deferNext.Store(true)
	deferred := make(chan struct{}, 1)
	var adds atomic.Int64
	kind := actors.MustKind("ddefer", newDurCounter,
		actors.On(func(c *ctxC, m *testpb.Add) (*testpb.Value, error) {
			adds.Add(1)
			if deferNext.Load() {
				c.Defer("k")
				deferred <- struct{}{}
				return nil, nil
			}
			c.State.Value += m.Delta
			return &testpb.Value{Value: c.State.Value}, nil
		}),
		actors.On(func(c *ctxC, _ *testpb.Reject) (*testpb.Value, error) {
			c.Resolve("k", nil, actors.Unavailable(0, "not yet"))
			return &testpb.Value{Value: c.State.Value}, nil
		}),
	)
	cfg := actors.DefaultLocalConfig()
	cfg.Shards = 4
	host := startHost(t, cfg, actors.HostDeps{Store: memory.New()}, kind)
	ownAll(t, host, cfg.Shards)
	ctx := testCtx(t)
	r := actors.Ref{Kind: "ddefer", ID: "d"}

	errc := make(chan error, 1)
	go func() {
		_, err := actors.Call[*testpb.Value](ctx, host, r, &testpb.Add{Delta: 5}, actors.WithRequestID("add"))
		errc <- err
	}()
	<-deferred
	_, err := actors.Call[*testpb.Value](ctx, host, r, &testpb.Reject{}, actors.WithRequestID("resolve"))
	require.NoError(t, err)
	err = <-errc
	require.ErrorIs(t, err, actors.ErrUnavailable)
	require.True(t, actors.Retryable(err))

	deferNext.Store(false)
	v, err := actors.Call[*testpb.Value](ctx, host, r, &testpb.Add{Delta: 5}, actors.WithRequestID("add"))
	require.NoError(t, err, "the retry got the refusal again: it was recorded")
	require.EqualValues(t, 5, v.Value)
	require.EqualValues(t, 2, adds.Load(), "the retry ran the handler")
}
