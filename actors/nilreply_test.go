package actors_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/persistence/memory"
	"github.com/ordo-actors/ordo/proto/testpb"
	"github.com/stretchr/testify/require"
)

// A handler that returns neither a reply nor an error is a programming
// error, typed nil pointers included: the caller gets ErrInternal naming
// the message type, the run is rolled back (state and messages), and
// nothing is recorded, so a retry runs the handler again. A handler that
// returns its context's error gives no answer either.
func TestNilReplyIsAnInternalError(t *testing.T) {
	var runs atomic.Int64
	router := &captureRouter{}
	k := actors.MustKind("nilly", func() *testpb.Counter { return new(testpb.Counter) },
		actors.On(func(c *ctxC, m *testpb.Add) (*testpb.Value, error) {
			runs.Add(1)
			c.State.Value += m.Delta
			c.Send(actors.Ref{Kind: "nilly", ID: farID(c.Ref(), 4)}, &testpb.Get{}, "never-sent")
			return nil, nil
		}),
		actors.On(func(c *ctxC, m *testpb.Echo) (*testpb.Value, error) {
			c.State.Value += 100
			return (*testpb.Value)(nil), nil
		}),
		actors.On(func(c *ctxC, m *testpb.Forward) (*testpb.Value, error) {
			c.State.Value += 1000
			cctx, cancel := context.WithCancel(c)
			cancel()
			return nil, cctx.Err() // gave up: a context error is no answer
		}),
		actors.OnRead(func(c *ctxC, m *testpb.Reject) (*testpb.Value, error) {
			return (*testpb.Value)(nil), nil
		}),
		actors.OnRead(func(c *ctxC, m *testpb.Get) (*testpb.Value, error) {
			return &testpb.Value{Value: c.State.Value}, nil
		}),
	)
	cfg := actors.DefaultLocalConfig()
	cfg.Shards = 4
	host := startHost(t, cfg, actors.HostDeps{Router: router, Store: memory.New()}, k)
	ownAll(t, host, cfg.Shards)
	ctx := testCtx(t)
	r := actors.Ref{Kind: "nilly", ID: "n"}

	for i := 1; i <= 2; i++ {
		_, err := actors.Call[*testpb.Value](ctx, host, r, &testpb.Add{Delta: 1}, actors.WithRequestID("add-1"))
		require.ErrorIs(t, err, actors.ErrInternal)
		require.ErrorContains(t, err, "ordo.test.v1.Add")
		require.EqualValues(t, i, runs.Load(), "a nil reply was recorded for deduplication")
	}
	_, err := actors.Call[*testpb.Value](ctx, host, r, &testpb.Echo{})
	require.ErrorIs(t, err, actors.ErrInternal)
	require.ErrorContains(t, err, "ordo.test.v1.Echo")
	_, err = actors.Call[*testpb.Value](ctx, host, r, &testpb.Reject{})
	require.ErrorIs(t, err, actors.ErrInternal)
	require.ErrorContains(t, err, "ordo.test.v1.Reject")
	_, err = actors.Call[*testpb.Value](ctx, host, r, &testpb.Forward{})
	require.ErrorIs(t, err, actors.ErrUnavailable)
	require.True(t, actors.Retryable(err))

	v, err := actors.Call[*testpb.Value](ctx, host, r, &testpb.Get{})
	require.NoError(t, err)
	require.Zero(t, v.Value, "the state changes of a run without an answer were kept")
	require.Empty(t, router.sent(), "a run without an answer sent a message")
}
