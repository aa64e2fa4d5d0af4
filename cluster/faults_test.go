package cluster_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/cluster"
	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/ordo-actors/ordo/proto/ordopb"
	"github.com/ordo-actors/ordo/proto/testpb"
	"github.com/stretchr/testify/require"
)

// fencedWrites reads ordo_fenced_writes_total from a node's /metrics.
func fencedWrites(t *testing.T, n *cluster.Node) int {
	t.Helper()
	resp, err := http.Get("http://" + n.AdminAddr() + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^ordo_fenced_writes_total (\d+)`).FindSubmatch(body)
	require.NotNil(t, m, "metric missing")
	v, err := strconv.Atoi(string(m[1]))
	require.NoError(t, err)
	return v
}

// A node paused past its lease, then resumed, tries to write under its
// old epoch: storage rejects it, /metrics counts it, and the store holds
// every acknowledged add exactly once.
func TestPausedNodeIsFenced(t *testing.T) {
	e := newEnv(t, nil, 8)
	n1 := e.start(e.config("n1"))
	cfg := e.config("n2")
	cfg.AdminAddr = "127.0.0.1:0"
	n2 := e.start(cfg)
	e.converged(n1, n2)
	client := e.dial()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	id := entitiesOf(t, n2, e.shards, 1)[0]
	shard := actors.ShardOf(counter(id), e.shards)
	_, err := cluster.Call[*testpb.Value](ctx, client, counter(id), &testpb.Add{Delta: 1}, actors.WithRequestID("a1"))
	require.NoError(t, err)
	oldEpoch := n2.Owned()[shard]

	e.faultsOf(n2).Pause()
	// A call that reached n2 just before it froze waits in its mailbox.
	env, err := actors.Envelope(counter(id), &testpb.Add{Delta: 10}, "a2")
	require.NoError(t, err)
	late := make(chan *ordopb.Reply, 1)
	cluster.HostOf(n2).Submit(env, func(r *ordopb.Reply) { late <- r })

	// n2's lease expires; n1 takes the shard over at a higher epoch.
	testutil.Eventually(t, 30*time.Second, 20*time.Millisecond, func() error {
		if ep, ok := n1.Owned()[shard]; !ok || ep <= oldEpoch {
			return fmt.Errorf("n1 does not own shard %d yet", shard)
		}
		return nil
	})
	v, err := cluster.Call[*testpb.Value](ctx, client, counter(id), &testpb.Add{Delta: 100}, actors.WithRequestID("a3"))
	require.NoError(t, err)
	require.EqualValues(t, 101, v.Value)

	// The entities of n2 run first (placement still frozen): the late add
	// is applied to n2's stale copy and its write is fenced.
	e.faultsOf(n2).ResumeEntities()
	r := <-late
	require.Equal(t, ordopb.Code_CODE_FENCED, r.GetError().GetCode(), "late reply %v", r)
	require.Equal(t, 1, fencedWrites(t, n2))
	e.faultsOf(n2).Resume()

	// The caller of the late add retries it: applied once, at the new owner.
	v, err = cluster.Call[*testpb.Value](ctx, client, counter(id), &testpb.Add{Delta: 10}, actors.WithRequestID("a2"))
	require.NoError(t, err)
	require.EqualValues(t, 111, v.Value)
	v, err = cluster.Call[*testpb.Value](ctx, client, counter(id), &testpb.Add{Delta: 10}, actors.WithRequestID("a2"))
	require.NoError(t, err)
	require.EqualValues(t, 111, v.Value)

	// n2 rejoins under a new lease and serves again.
	e.settled(n1, n2)
	testutil.Eventually(t, 30*time.Second, 20*time.Millisecond, func() error {
		if len(n2.Owned()) == 0 {
			return fmt.Errorf("n2 owns nothing after resuming")
		}
		return nil
	})
	v, err = cluster.Call[*testpb.Value](ctx, client, counter(id), &testpb.Get{})
	require.NoError(t, err)
	require.EqualValues(t, 111, v.Value)
}

// Cutting gossip while etcd stays reachable moves no shard and fails no
// call: leases still renew, so nobody revokes anybody.
func TestGossipPartitionDoesNotMoveShards(t *testing.T) {
	e := newEnv(t, nil, 32)
	e.startN(3)
	// Converged, not only settled: the shards of the last node to join may
	// still be on their way to it when every shard has an owner.
	e.converged(e.nodes...)
	client := e.dial()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	owners := func() map[uint32]string {
		m := map[uint32]string{}
		for _, n := range e.nodes {
			for s, ep := range n.Owned() {
				m[s] = fmt.Sprintf("%s@%d", n.ID(), ep)
			}
		}
		return m
	}
	before := owners()

	e.cl.Isolate(e.nodes[2].GossipAddr())
	testutil.Eventually(t, 30*time.Second, 20*time.Millisecond, func() error {
		for _, m := range e.nodes[0].Status().Members {
			if m.ID == e.nodes[2].ID() && m.Alive {
				return fmt.Errorf("n1 still sees n3 alive")
			}
		}
		return nil
	})
	for i := 0; i < 200; i++ {
		_, err := cluster.Call[*testpb.Value](ctx, client, counter(fmt.Sprintf("p%d", i)), &testpb.Add{Delta: 1})
		require.NoError(t, err)
	}
	require.Equal(t, before, owners(), "ownership moved during a gossip partition")

	e.cl.Heal()
	testutil.Eventually(t, 30*time.Second, 20*time.Millisecond, func() error {
		for _, m := range e.nodes[0].Status().Members {
			if m.ID == e.nodes[2].ID() && !m.Alive {
				return fmt.Errorf("n1 does not see n3 again")
			}
		}
		return nil
	})
	require.Equal(t, before, owners(), "ownership moved after healing")
}

// The admin endpoint serves status JSON and Prometheus metrics.
func TestAdminEndpoint(t *testing.T) {
	e := newEnv(t, nil, 8)
	cfg := e.config("n1")
	cfg.AdminAddr = "127.0.0.1:0"
	cfg.Pprof = true
	n := e.start(cfg)
	e.settled(n)
	ctx := context.Background()
	_, err := cluster.Call[*testpb.Value](ctx, n, counter("adm"), &testpb.Add{Delta: 1})
	require.NoError(t, err)

	st := n.Status()
	require.Equal(t, "n1", st.Node)
	require.Len(t, st.Shards, 8)
	require.Equal(t, 1, st.Entities)
	require.True(t, st.LeaseValid)

	for path, want := range map[string]string{
		"/status":        `"node": "n1"`,
		"/":              "<title>ordo dashboard</title>",
		"/metrics":       "ordo_calls_total",
		"/metrics?store": "ordo_store_late_fenced_writes_total 0", // the etcd store counts late rejections
		"/debug/pprof/":  "goroutine",
		"/no-such-thing": "404",
	} {
		resp, err := http.Get("http://" + n.AdminAddr() + path)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want == "404" {
			require.Equal(t, http.StatusNotFound, resp.StatusCode)
			continue
		}
		require.Contains(t, string(body), want, path)
	}

	// The Go runtime's memory: the live heap and the heap's objects, each
	// a positive number of bytes.
	resp, err := http.Get("http://" + n.AdminAddr() + "/metrics")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, name := range []string{"go_gc_heap_live_bytes", "go_memory_classes_heap_objects_bytes", "go_memory_classes_heap_released_bytes"} {
		m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindStringSubmatch(string(body))
		require.NotNil(t, m, "metric %s missing", name)
		v, err := strconv.ParseFloat(m[1], 64)
		require.NoError(t, err, name)
		if name != "go_memory_classes_heap_released_bytes" {
			require.Positive(t, v, name)
		}
	}
}
