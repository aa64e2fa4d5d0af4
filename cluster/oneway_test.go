package cluster_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/cluster"
	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/ordo-actors/ordo/proto/ordopb"
	"github.com/ordo-actors/ordo/proto/testpb"
	"github.com/stretchr/testify/require"
)

// tellerKind's Forward tells counter m.To to add m.Delta, one-way
// (actors.AtMostOnce), under request ID m.RequestId.
var tellerKind = actors.MustKind("teller", func() *testpb.Counter { return new(testpb.Counter) },
	actors.On(func(c *counterCtx, m *testpb.Forward) (*testpb.Value, error) {
		c.Send(counter(m.To), &testpb.Add{Delta: m.Delta}, m.RequestId, actors.AtMostOnce())
		return &testpb.Value{}, nil
	}),
)

// A one-way message crosses the mutual-TLS transport to the node that
// owns its receiver and is applied there once; the sending node counts it
// sent, and its transport counts it as one call that gets no result,
// while the calls each node makes to its own entities never reach the
// transport. A caller cannot Invoke a one-way envelope: nothing would
// answer.
func TestOneWayAcrossNodes(t *testing.T) {
	e := newEnv(t, nil, 16)
	a := e.startKinds(e.config("n1"), counterKind, tellerKind)
	b := e.startKinds(e.config("n2"), counterKind, tellerKind)
	e.converged(a, b) // each node owns its share: ownedBy finds entities of both
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	from := ownedBy(t, a, tellerKind, e.shards)
	to := ownedBy(t, b, counterKind, e.shards)
	sent0, dropped0 := cluster.OneWayCounts(a)
	trA0, trB0 := a.Status().Transport, b.Status().Transport
	for i := range 5 {
		_, err := cluster.Call[*testpb.Value](ctx, a, tellerKind.Ref(from), &testpb.Forward{To: to, Delta: 7, RequestId: fmt.Sprintf("tell-%d", i)})
		require.NoError(t, err)
	}
	testutil.Eventually(t, 20*time.Second, 5*time.Millisecond, func() error {
		v, err := cluster.Call[*testpb.Value](ctx, b, counter(to), &testpb.Get{})
		if err != nil {
			return err
		}
		if v.Value != 35 {
			return fmt.Errorf("counter %s holds %d, want 35", to, v.Value)
		}
		return nil
	})
	sent, dropped := cluster.OneWayCounts(a)
	require.Equal(t, 5.0, sent-sent0, "one-way messages counted sent")
	require.Equal(t, 0.0, dropped-dropped0, "one-way messages counted dropped")
	// A transport counts a frame once it is written, which may come just
	// after its peer applied it.
	testutil.Eventually(t, 10*time.Second, 5*time.Millisecond, func() error {
		trA, trB := a.Status().Transport, b.Status().Transport
		if calls := trA.Calls - trA0.Calls; calls != 5 || trB.Calls != trB0.Calls {
			return fmt.Errorf("n1's transport sent %d calls and n2's %d; want 5 (the one-way Adds) and 0", calls, trB.Calls-trB0.Calls)
		}
		if trA.Results != trA0.Results || trB.Results != trB0.Results {
			return fmt.Errorf("results sent: n1 %d, n2 %d; want none", trA.Results-trA0.Results, trB.Results-trB0.Results)
		}
		return nil
	})

	env, err := actors.Envelope(counter(to), &testpb.Add{Delta: 1}, actors.NewRequestID())
	require.NoError(t, err)
	env.OneWay = true
	rep, err := e.dial().Invoke(ctx, env)
	require.NoError(t, err)
	require.Equal(t, ordopb.Code_CODE_BAD_REQUEST, rep.GetError().GetCode(), "a one-way envelope was invoked: %v", rep)
	v, err := cluster.Call[*testpb.Value](ctx, b, counter(to), &testpb.Get{})
	require.NoError(t, err)
	require.EqualValues(t, 35, v.Value, "the refused one-way envelope was applied")
}

// A Dev delivers one-way messages between its entities too.
func TestOneWayInDev(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := cluster.NewDev(ctx, cluster.DevConfig{Kinds: []actors.Kind{counterKind, tellerKind}, Logger: testutil.Logger()})
	require.NoError(t, err)
	defer func() { require.NoError(t, d.Close(context.Background())) }()
	for i := range 3 {
		_, err := cluster.Call[*testpb.Value](ctx, d, tellerKind.Ref("t"), &testpb.Forward{To: "c", Delta: 2, RequestId: fmt.Sprintf("tell-%d", i)})
		require.NoError(t, err)
	}
	testutil.Eventually(t, 20*time.Second, 5*time.Millisecond, func() error {
		v, err := cluster.Call[*testpb.Value](ctx, d, counter("c"), &testpb.Get{})
		if err != nil {
			return err
		}
		if v.Value != 6 {
			return fmt.Errorf("counter c holds %d, want 6", v.Value)
		}
		return nil
	})
}
