package cluster_test

// Tests of the guards the cluster wires between placement and the entity
// runtime, each written so that the guard's mutation in tools/mutants
// fails it.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/cluster"
	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/ordo-actors/ordo/ordotls"
	"github.com/ordo-actors/ordo/persistence/memory"
	"github.com/ordo-actors/ordo/proto/ordopb"
	"github.com/ordo-actors/ordo/proto/testpb"
	"github.com/stretchr/testify/require"
)

// S3: a call whose write landed but whose acknowledgement was lost is
// retried with the same request ID, so it is applied once. The lost
// acknowledgement drops the shard; placement owns it again under a new
// epoch and the retry finds the stored reply.
func TestGuardRetryKeepsRequestID(t *testing.T) {
	store := memory.New()
	e := newEnv(t, store, 4)
	n := e.start(e.config("n1"))
	e.settled(n)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := counter("retried")
	shard := actors.ShardOf(c, e.shards)
	epoch := n.Owned()[shard]

	store.LoseNextAcks(1, nil)
	v, err := cluster.Call[*testpb.Value](ctx, n, c, &testpb.Add{Delta: 1})
	require.NoError(t, err)
	require.EqualValues(t, 1, v.Value, "the retried add was applied again")
	require.Greater(t, n.Owned()[shard], epoch, "the shard was not owned again under a new epoch")
	v, err = cluster.Call[*testpb.Value](ctx, n, c, &testpb.Add{Delta: 10})
	require.NoError(t, err)
	require.EqualValues(t, 11, v.Value, "Add 1 then Add 10")
}

// S2: a read waiting in a node paused past its lease, whose shard moved
// to another node that then wrote a new value, is never answered OK with
// the old value when the node resumes: the host withholds replies while
// the placement lease is not valid.
func TestGuardPausedReadNotAnsweredAfterShardMoved(t *testing.T) {
	e := newEnv(t, nil, 8)
	n1 := e.start(e.config("n1"))
	n2 := e.start(e.config("n2"))
	e.converged(n1, n2)
	client := e.dial()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	id := entitiesOf(t, n2, e.shards, 1)[0]
	shard := actors.ShardOf(counter(id), e.shards)
	_, err := cluster.Call[*testpb.Value](ctx, client, counter(id), &testpb.Add{Delta: 1})
	require.NoError(t, err)
	oldEpoch := n2.Owned()[shard]

	e.faultsOf(n2).Pause()
	// A read that reached n2 just before it froze waits in its mailbox.
	env, err := actors.Envelope(counter(id), &testpb.Get{}, "paused-read")
	require.NoError(t, err)
	late := make(chan *ordopb.Reply, 1)
	cluster.HostOf(n2).Submit(env, func(r *ordopb.Reply) { late <- r })

	// n2's lease expires; n1 takes the shard over and writes a new value.
	testutil.Eventually(t, 30*time.Second, 20*time.Millisecond, func() error {
		if ep, ok := n1.Owned()[shard]; !ok || ep <= oldEpoch {
			return fmt.Errorf("n1 does not own shard %d yet", shard)
		}
		return nil
	})
	v, err := cluster.Call[*testpb.Value](ctx, client, counter(id), &testpb.Add{Delta: 100})
	require.NoError(t, err)
	require.EqualValues(t, 101, v.Value)

	// n2's entities run again before its placement notices the lost
	// lease: the read is handled from n2's stale copy.
	e.faultsOf(n2).ResumeEntities()
	r := <-late
	e.faultsOf(n2).Resume()
	if r.GetError() == nil {
		got, derr := actors.DecodeReply[*testpb.Value](r)
		require.NoError(t, derr)
		t.Fatalf("the paused node answered the read OK with %d after its shard moved (the new owner has 101)", got.Value)
	}
	require.True(t, actors.Retryable(actors.ErrorFromProto(r.GetError())), "late reply %v", r)
}

// A TLS source that is a nil pointer (a Load error ignored) is refused by
// validation instead of failing every handshake later.
func TestNilTLSSourceRefused(t *testing.T) {
	var r *ordotls.Reloader
	cfg := cluster.DefaultLocalConfig()
	cfg.NodeID, cfg.EtcdEndpoints, cfg.Store, cfg.TLS = "n1", []string{"127.0.0.1:1"}, memory.New(), r
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "nil *ordotls.Reloader") {
		t.Fatalf("Validate with a nil *Reloader: %v", err)
	}
}
