package cluster_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/cluster"
	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/ordo-actors/ordo/persistence"
	"github.com/ordo-actors/ordo/proto/ordopb"
	"github.com/ordo-actors/ordo/proto/testpb"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
)

// ledgerKind is an event-sourced counter: Add emits Added.
var ledgerKind = actors.MustKind("ledger", func() *testpb.Counter { return new(testpb.Counter) },
	actors.EventSourced(actors.EventSourcing[*testpb.Counter]{
		Events: []proto.Message{(*testpb.Added)(nil)},
		Apply: func(s *testpb.Counter, ev proto.Message) error {
			s.Value += ev.(*testpb.Added).Delta
			return nil
		},
		SnapshotEvery: 2,
	}),
	actors.On(func(c *counterCtx, m *testpb.Add) (*testpb.Value, error) {
		c.Emit(&testpb.Added{Delta: m.Delta})
		return &testpb.Value{Value: c.State.Value}, nil
	}),
	actors.OnRead(func(c *counterCtx, _ *testpb.Get) (*testpb.Value, error) {
		return &testpb.Value{Value: c.State.Value}, nil
	}))

// The pause test with an event-sourced kind: the paused node's late run
// emits an event whose append, under its old epoch, storage refuses; the
// journal holds each acknowledged add's event once, and none of the late
// run.
func TestPausedNodeIsFencedEventSourced(t *testing.T) {
	e := newEnv(t, nil, 8)
	n1 := e.startKinds(e.config("n1"), counterKind, ledgerKind)
	cfg := e.config("n2")
	cfg.AdminAddr = "127.0.0.1:0"
	n2 := e.startKinds(cfg, counterKind, ledgerKind)
	e.converged(n1, n2)
	client := e.dial()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	var target actors.Ref
	for i := 0; target.ID == ""; i++ {
		r := ledgerKind.Ref(fmt.Sprintf("l%d", i))
		if _, ok := n2.Owned()[actors.ShardOf(r, e.shards)]; ok {
			target = r
		}
	}
	shard := actors.ShardOf(target, e.shards)
	add := func(delta int64, id string) (int64, error) {
		v, err := cluster.Call[*testpb.Value](ctx, client, target, &testpb.Add{Delta: delta}, actors.WithRequestID(id))
		return v.GetValue(), err
	}
	_, err := add(1, "a1")
	require.NoError(t, err)
	oldEpoch := n2.Owned()[shard]

	e.faultsOf(n2).Pause()
	env, err := actors.Envelope(target, &testpb.Add{Delta: 10}, "a2")
	require.NoError(t, err)
	late := make(chan *ordopb.Reply, 1)
	cluster.HostOf(n2).Submit(env, func(r *ordopb.Reply) { late <- r })

	testutil.Eventually(t, 30*time.Second, 20*time.Millisecond, func() error {
		if ep, ok := n1.Owned()[shard]; !ok || ep <= oldEpoch {
			return fmt.Errorf("n1 does not own shard %d yet", shard)
		}
		return nil
	})
	v, err := add(100, "a3")
	require.NoError(t, err)
	require.EqualValues(t, 101, v)

	e.faultsOf(n2).ResumeEntities()
	r := <-late
	require.Equal(t, ordopb.Code_CODE_FENCED, r.GetError().GetCode(), "late reply %v", r)
	require.Equal(t, 1, fencedWrites(t, n2))
	e.faultsOf(n2).Resume()

	v, err = add(10, "a2")
	require.NoError(t, err)
	require.EqualValues(t, 111, v)
	v, err = add(10, "a2")
	require.NoError(t, err)
	require.EqualValues(t, 111, v)

	j := e.store.(persistence.Journal)
	evs, err := j.ReadEvents(ctx, target.Kind, target.ID, 0, 100)
	require.NoError(t, err)
	var deltas []int64
	for i, ev := range evs {
		require.EqualValues(t, i+1, ev.Seq)
		m, err := ledgerKind.DecodeEvent(ev.Data)
		require.NoError(t, err)
		deltas = append(deltas, m.(*testpb.Added).Delta)
	}
	require.Equal(t, []int64{1, 100, 10}, deltas, "each acknowledged add once, nothing of the late run")

	// n2 rejoins; wherever the entity lives, its state is the journal's.
	e.settled(n1, n2)
	got, err := cluster.Call[*testpb.Value](ctx, client, target, &testpb.Get{})
	require.NoError(t, err)
	require.EqualValues(t, 111, got.Value)
}
