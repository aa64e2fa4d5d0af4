package actors_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/ordo-actors/ordo/persistence/memory"
	"github.com/ordo-actors/ordo/proto/ordopb"
	"github.com/ordo-actors/ordo/proto/testpb"
	"github.com/stretchr/testify/require"
)

// seen is what a probe run saw of its context.
type seen struct {
	deadline    time.Time
	hasDeadline bool
	md          map[string]string
	err         error
	cause       error
	derived     context.Context // a context derived from the run's, kept past the run
}

// probe records what the runs of the probe kind saw, by label.
type probe struct {
	mu      sync.Mutex
	runs    map[string]seen
	entered chan struct{} // a blocking Echo started waiting
}

func newProbe() *probe {
	return &probe{runs: make(map[string]seen), entered: make(chan struct{}, 1)}
}

func (p *probe) record(label string, ctx context.Context) {
	d, ok := ctx.Deadline()
	s := seen{deadline: d, hasDeadline: ok, md: actors.MetadataFrom(ctx), err: ctx.Err(), cause: context.Cause(ctx)}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.runs[label] = s
}

func (p *probe) get(label string) (seen, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s, ok := p.runs[label]
	return s, ok
}

type ctxKey struct{}

// probeKind's runs record their context:
//   - Echo{N: 0} records it, and a context derived from it (kept past the run);
//   - Echo{N: 1} waits for its context to end (at most 10s), then records it;
//   - Forward requests an Add from To, and sends one with another traceparent;
//   - Add records the metadata it got under "add:" + request ID;
//   - OnActivate records its context under "activate".
func probeKind(p *probe) *actors.KindOf[*testpb.Counter] {
	return actors.MustKind("probe", func() *testpb.Counter { return new(testpb.Counter) },
		actors.OnActivate(func(c *ctxC) { p.record("activate", c) }),
		actors.On(func(c *ctxC, m *testpb.Echo) (*testpb.Value, error) {
			if m.N == 1 {
				p.entered <- struct{}{}
				select {
				case <-c.Done():
				case <-time.After(10 * time.Second):
				}
				p.record("blocked", c)
				return nil, c.Err()
			}
			p.record("echo", c)
			derived := context.WithValue(c, ctxKey{}, "v") // c is a context.Context
			p.mu.Lock()
			s := p.runs["echo"]
			s.derived = derived
			p.runs["echo"] = s
			p.mu.Unlock()
			return &testpb.Value{Value: 1}, nil
		}),
		actors.On(func(c *ctxC, m *testpb.Forward) (*testpb.Value, error) {
			to := actors.Ref{Kind: "probe", ID: m.To}
			actors.Request(c, to, &testpb.Add{Delta: m.Delta}, m.RequestId,
				func(c *ctxC, v *testpb.Value, err error) {
					p.record("continuation", c)
					if err == nil {
						c.State.Forwarded = 2
					}
				})
			c.Send(to, &testpb.Add{Delta: m.Delta}, m.RequestId+"-send",
				actors.WithOutgoingMetadata("traceparent", "00-child"))
			c.State.Forwarded = 1
			return &testpb.Value{}, nil
		}),
		actors.On(func(c *ctxC, m *testpb.Add) (*testpb.Value, error) {
			p.record("add:"+c.RequestID(), c)
			c.State.Value += m.Delta
			return &testpb.Value{Value: c.State.Value}, nil
		}),
	)
}

func startProbe(t *testing.T, tweak func(*actors.HostConfig)) (*actors.Host, *probe, actors.HostConfig) {
	t.Helper()
	p := newProbe()
	cfg := actors.DefaultLocalConfig()
	cfg.Shards = 4
	if tweak != nil {
		tweak(&cfg)
	}
	host := startHost(t, cfg, actors.HostDeps{Store: memory.New()}, probeKind(p))
	ownAll(t, host, cfg.Shards)
	return host, p, cfg
}

// A handler's Context is its request's context: the caller's deadline,
// the caller's metadata, usable as a context.Context, and over once the
// handler returns. A hook has neither deadline nor metadata.
func TestHandlerContextIsTheRequests(t *testing.T) {
	host, p, _ := startProbe(t, nil)
	deadline := time.Now().Add(time.Minute).Truncate(time.Microsecond)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	ctx = actors.WithMetadata(ctx, "traceparent", "00-abc-01")
	ctx = actors.WithMetadata(ctx, "tenant", "t1")

	_, err := actors.Call[*testpb.Value](ctx, host, actors.Ref{Kind: "probe", ID: "a"}, &testpb.Echo{})
	require.NoError(t, err)
	s, ok := p.get("echo")
	require.True(t, ok)
	require.True(t, s.hasDeadline)
	require.True(t, s.deadline.Equal(deadline), "deadline %v, want %v", s.deadline, deadline)
	require.Equal(t, map[string]string{"traceparent": "00-abc-01", "tenant": "t1"}, s.md)
	require.NoError(t, s.err, "the context ended during the run")
	require.Equal(t, "v", s.derived.Value(ctxKey{}))
	v, ok := actors.MetadataValue(s.derived, "tenant")
	require.True(t, ok)
	require.Equal(t, "t1", v)
	select {
	case <-s.derived.Done():
	default:
		t.Fatal("a context derived from the run's outlived the run")
	}
	require.ErrorIs(t, s.derived.Err(), context.Canceled)

	a, ok := p.get("activate")
	require.True(t, ok)
	require.False(t, a.hasDeadline, "a hook has no deadline")
	require.Nil(t, a.md, "a hook has no metadata")
	// The caller's context is not changed by WithMetadata's callers later.
	require.Len(t, actors.MetadataFrom(ctx), 2)
}

// A handler waiting on its context is released when the entity's shard is
// dropped; the cause says why.
func TestHandlerContextEndsWhenTheShardIsDropped(t *testing.T) {
	host, p, cfg := startProbe(t, nil)
	r := actors.Ref{Kind: "probe", ID: "b"}
	env, err := actors.Envelope(r, &testpb.Echo{N: 1}, "block-1")
	require.NoError(t, err)
	replies := make(chan *ordopb.Reply, 1)
	host.Submit(env, func(rep *ordopb.Reply) { replies <- rep })
	select {
	case <-p.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the blocking handler did not start")
	}
	reason := fmt.Errorf("%w: test", actors.ErrFenced)
	host.Drop(actors.ShardOf(r, cfg.Shards), reason)
	rep := recv(t, replies)
	require.True(t, actors.Retryable(actors.ErrorFromProto(rep.GetError())), "reply %v", rep)
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if _, ok := p.get("blocked"); !ok {
			return errPending
		}
		return nil
	})
	s, _ := p.get("blocked")
	require.ErrorIs(t, s.err, context.Canceled)
	require.ErrorIs(t, s.cause, actors.ErrFenced)
}

// A handler waiting on its context is released by the caller's deadline.
func TestHandlerContextEndsAtTheCallersDeadline(t *testing.T) {
	host, p, _ := startProbe(t, nil)
	env, err := actors.Envelope(actors.Ref{Kind: "probe", ID: "c"}, &testpb.Echo{N: 1}, "block-2")
	require.NoError(t, err)
	env.DeadlineUnixNano = time.Now().Add(300 * time.Millisecond).UnixNano()
	replies := make(chan *ordopb.Reply, 1)
	host.Submit(env, func(rep *ordopb.Reply) { replies <- rep })
	rep := recv(t, replies)
	require.ErrorIs(t, actors.ErrorFromProto(rep.GetError()), actors.ErrDeadline, "reply %v", rep)
	s, ok := p.get("blocked")
	require.True(t, ok)
	require.ErrorIs(t, s.err, context.DeadlineExceeded)
}

// Metadata travels on: a handler's Request and Send carry the request's
// metadata (WithOutgoingMetadata overrides a key for one message), through
// the router and in memory alike, and the continuation sees the metadata
// of the run that made the Request.
func TestMetadataPropagatesToOutgoingMessages(t *testing.T) {
	host, p, cfg := startProbe(t, nil)
	src := actors.Ref{Kind: "probe", ID: "src"}
	for _, tc := range []struct{ name, to string }{
		{"routed", farID(src, cfg.Shards)},
		{"co-located", nearID(src, cfg.Shards)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := actors.WithMetadata(testCtx(t), "traceparent", "00-root")
			ctx = actors.WithMetadata(ctx, "tenant", "t1")
			rid := "fwd-" + tc.name
			_, err := actors.Call[*testpb.Value](ctx, host, src, &testpb.Forward{To: tc.to, Delta: 1, RequestId: rid})
			require.NoError(t, err)
			testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
				for _, l := range []string{"add:" + rid, "add:" + rid + "-send", "continuation"} {
					if _, ok := p.get(l); !ok {
						return fmt.Errorf("%s not seen yet", l)
					}
				}
				return nil
			})
			req, _ := p.get("add:" + rid)
			require.Equal(t, map[string]string{"traceparent": "00-root", "tenant": "t1"}, req.md)
			require.True(t, req.hasDeadline, "an entity's request carries a deadline")
			sent, _ := p.get("add:" + rid + "-send")
			require.Equal(t, map[string]string{"traceparent": "00-child", "tenant": "t1"}, sent.md)
			cont, _ := p.get("continuation")
			require.Equal(t, map[string]string{"traceparent": "00-root", "tenant": "t1"}, cont.md)
			require.False(t, cont.hasDeadline, "a continuation has no deadline")
			p.mu.Lock()
			delete(p.runs, "continuation")
			p.mu.Unlock()
		})
	}
}

// Metadata over the limits, or malformed, is refused with ErrBadRequest
// by Call and by the host.
func TestMetadataLimits(t *testing.T) {
	host, _, _ := startProbe(t, nil)
	r := actors.Ref{Kind: "probe", ID: "lim"}
	ctx := testCtx(t)
	many := ctx
	for i := 0; i <= actors.MaxMetadataEntries; i++ {
		many = actors.WithMetadata(many, fmt.Sprintf("k%d", i), "v")
	}
	_, err := actors.Call[*testpb.Value](many, host, r, &testpb.Echo{})
	require.ErrorIs(t, err, actors.ErrBadRequest)
	big := actors.WithMetadata(ctx, "k", strings.Repeat("x", actors.MaxMetadataBytes))
	_, err = actors.Call[*testpb.Value](big, host, r, &testpb.Echo{})
	require.ErrorIs(t, err, actors.ErrBadRequest)

	for name, md := range map[string]map[string]string{
		"empty key":    {"": "v"},
		"invalid utf8": {"k": string([]byte{0xff})},
	} {
		env, err := actors.Envelope(r, &testpb.Echo{}, "md-"+strings.ReplaceAll(name, " ", "-"))
		require.NoError(t, err)
		env.Metadata = md
		rep, err := host.Invoke(ctx, env)
		require.NoError(t, err)
		require.Equal(t, ordopb.Code_CODE_BAD_REQUEST, rep.GetError().GetCode(), "%s: %v", name, rep)
	}
	_, err = actors.Call[*testpb.Value](actors.WithMetadata(ctx, "ok", "yes"), host, r, &testpb.Echo{})
	require.NoError(t, err)
	require.False(t, errors.Is(err, actors.ErrBadRequest))
}

// nearID returns the ID of an entity of r's kind in r's shard (not r): a
// message to it is handed over in memory.
func nearID(r actors.Ref, shards uint32) string {
	for i := 0; ; i++ {
		id := fmt.Sprintf("near-%d", i)
		if id != r.ID && actors.ShardOf(actors.Ref{Kind: r.Kind, ID: id}, shards) == actors.ShardOf(r, shards) {
			return id
		}
	}
}
