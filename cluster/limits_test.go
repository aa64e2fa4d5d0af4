package cluster_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/cluster"
	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/ordo-actors/ordo/proto/testpb"
	"github.com/stretchr/testify/require"
)

// ballastKind's Add makes its state as large as asked.
var ballastKind = actors.MustKind("ballast", func() *testpb.Counter { return new(testpb.Counter) },
	actors.On(func(c *counterCtx, m *testpb.Add) (*testpb.Value, error) {
		c.State.Value += m.Delta
		c.State.Ballast = make([]byte, m.Ballast)
		return &testpb.Value{Value: c.State.Value}, nil
	}),
)

// An oversized request, or one that would make its entity's state too
// large for the store (the etcd store, with etcd's default limits), fails
// alone with ErrTooLarge, once, over the network: its shard keeps its
// epoch and goes on serving. (Before limits, one such request made its
// shard's epoch churn by the thousand: each failed write dropped the
// shard and the client retried without end.)
func TestLimitTooLargeKeepsShardEpoch(t *testing.T) {
	e := newEnv(t, nil, 4)
	cfg := e.config("n1")
	cfg.Host.MaxStateBytes = 4 << 20 // above what etcd takes: the store refuses such a record
	n := e.startKinds(cfg, ballastKind)
	e.settled(n)
	client := e.dial()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ref := ballastKind.Ref("b")
	shard := actors.ShardOf(ref, e.shards)
	_, err := cluster.Call[*testpb.Value](ctx, client, ref, &testpb.Add{Delta: 1})
	require.NoError(t, err)
	epochs := n.Owned()

	// A 1.7 MB payload: refused at admission (MaxPayloadBytes).
	_, err = cluster.Call[*testpb.Value](ctx, client, ref, &testpb.Add{Delta: 1, Sender: strings.Repeat("x", 1700_000)})
	require.ErrorIs(t, err, actors.ErrTooLarge)
	require.ErrorIs(t, err, actors.ErrBadRequest)
	// A state of 2 MiB: within MaxStateBytes here, refused by the store.
	_, err = cluster.Call[*testpb.Value](ctx, client, ref, &testpb.Add{Delta: 1, Ballast: 2 << 20})
	require.ErrorIs(t, err, actors.ErrTooLarge)
	require.EqualValues(t, 1, n.Status().Host.Batch.TooLarge, "records the store refused")

	v, err := cluster.Call[*testpb.Value](ctx, client, ref, &testpb.Add{Delta: 1})
	require.NoError(t, err)
	require.EqualValues(t, 2, v.Value)
	require.Equal(t, epochs[shard], n.Owned()[shard], "the shard's epoch changed")
	require.Equal(t, epochs, n.Owned(), "epochs changed")
	require.Zero(t, n.Status().Host.Batch.Failed, "failed records")

	// With the default MaxStateBytes the host refuses such a state itself.
	cfg2 := e.config("n2")
	n2 := e.startKinds(cfg2, ballastKind)
	e.converged(n, n2)
	epochs = map[uint32]int64{}
	for _, node := range []*cluster.Node{n, n2} {
		for s, ep := range node.Owned() {
			epochs[s] = ep
		}
	}
	var saves uint64
	for i, tried := 0, 0; tried < 4; i++ {
		r := ballastKind.Ref(fmt.Sprint("d", i))
		if _, ok := n2.Owned()[actors.ShardOf(r, e.shards)]; !ok {
			continue
		}
		tried++
		_, err = cluster.Call[*testpb.Value](ctx, client, r, &testpb.Add{Delta: 1, Ballast: 1 << 20})
		require.ErrorIs(t, err, actors.ErrTooLarge, "%s", r)
		v, err := cluster.Call[*testpb.Value](ctx, client, r, &testpb.Add{Delta: 1})
		require.NoError(t, err)
		require.EqualValues(t, 1, v.Value)
	}
	for _, node := range []*cluster.Node{n, n2} {
		for s, ep := range node.Owned() {
			require.Equal(t, epochs[s], ep, "shard %d's epoch changed", s)
		}
		saves += node.Status().Host.Batch.TooLarge
	}
	require.EqualValues(t, 1, saves, "records the store refused (the first node's only)")
}

// blockKind returns a kind whose Add waits until gate is closed (or its
// context ends), counting the runs that entered.
func blockKind(gate <-chan struct{}, entered *atomic.Int64) *actors.KindOf[*testpb.Counter] {
	return actors.MustKind("block", func() *testpb.Counter { return new(testpb.Counter) },
		actors.On(func(c *counterCtx, m *testpb.Add) (*testpb.Value, error) {
			entered.Add(1)
			select {
			case <-gate:
			case <-c.Done():
				return nil, c.Err()
			}
			c.State.Value += m.Delta
			return &testpb.Value{Value: c.State.Value}, nil
		}),
	)
}

// A client's call refused for overload is retried no sooner than the
// owner's retry-after hint, and gives up after RetryPolicy.MaxAttempts
// with the last refusal, whatever its context allows.
func TestLimitOverloadRetryAfterAndMaxAttempts(t *testing.T) {
	e := newEnv(t, nil, 4)
	cfg := e.config("n1")
	cfg.Host.MaxMailbox = 1
	cfg.Host.RetryAfter = 60 * time.Millisecond
	gate := make(chan struct{})
	open := sync.OnceFunc(func() { close(gate) })
	t.Cleanup(open)
	var entered atomic.Int64
	kind := blockKind(gate, &entered)
	n := e.startKinds(cfg, kind)
	e.settled(n)
	ccfg := cluster.DefaultClientConfig()
	ccfg.Prefix = e.prefix
	ccfg.Logger = testutil.Logger()
	ccfg.Retry.MaxAttempts = 3
	ccfg.TLS = clientTLS("limits")
	dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer dcancel()
	client, err := cluster.Dial(dctx, e.cl.Endpoints(), ccfg)
	require.NoError(t, err)
	defer client.Close()
	ref := kind.Ref("b")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	errs := make(chan error, 2)
	for i := 0; i < 2; i++ { // one runs (blocked), one waits in the mailbox
		go func() {
			_, err := cluster.Call[*testpb.Value](ctx, client, ref, &testpb.Add{Delta: 1})
			errs <- err
		}()
	}
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if entered.Load() != 1 || n.Status().Host.Inflight != 2 {
			return fmt.Errorf("%d handlers entered, %d calls in flight", entered.Load(), n.Status().Host.Inflight)
		}
		return nil
	})

	// The context allows far more than 3 attempts.
	cctx, ccancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer ccancel()
	start, refused := time.Now(), n.Status().Host.Overloaded
	_, err = cluster.Call[*testpb.Value](cctx, client, ref, &testpb.Add{Delta: 1})
	took := time.Since(start)
	require.ErrorIs(t, err, actors.ErrUnavailable)
	require.GreaterOrEqual(t, actors.RetryAfter(err), cfg.Host.RetryAfter, "the last refusal's hint")
	require.EqualValues(t, 3, n.Status().Host.Overloaded-refused, "attempts refused")
	require.GreaterOrEqual(t, took, 2*cfg.Host.RetryAfter, "retried before the hint")

	open()
	for i := 0; i < 2; i++ {
		require.NoError(t, <-errs)
	}
}

// Waiting for a shard to get an owner sends nothing, so it is not an
// attempt: a call with a budget of one attempt, made before any node
// runs, waits for one and succeeds.
func TestLimitNoOwnerWaitIsNotAnAttempt(t *testing.T) {
	e := newEnv(t, nil, 4)
	ccfg := cluster.DefaultClientConfig()
	ccfg.Prefix = e.prefix
	ccfg.Shards = e.shards
	ccfg.Logger = testutil.Logger()
	ccfg.Retry.MaxAttempts = 1
	ccfg.TLS = clientTLS("limits")
	dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer dcancel()
	client, err := cluster.Dial(dctx, e.cl.Endpoints(), ccfg)
	require.NoError(t, err)
	defer client.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := cluster.Call[*testpb.Value](ctx, client, counter("early"), &testpb.Add{Delta: 1})
		done <- err
	}()
	n := e.start(e.config("n1"))
	e.settled(n)
	require.NoError(t, <-done)
}
