package cluster_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/cluster"
	"github.com/ordo-actors/ordo/cluster/clustertest"
	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/ordo-actors/ordo/ordotls"
	"github.com/ordo-actors/ordo/persistence"
	"github.com/ordo-actors/ordo/proto/testpb"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// grpc's and protoactor's process-wide background goroutines.
		goleak.IgnoreTopFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
		goleak.IgnoreAnyFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"),
		// memberlist's Shutdown does not wait for a probe in flight; it ends
		// at its probe timeout.
		goleak.IgnoreTopFunction("github.com/hashicorp/memberlist.(*Memberlist).probeNode"),
		// An etcd member's login check (bcrypt, slow under -race) that a
		// refused client gave up on goes on after the member closed.
		goleak.IgnoreAnyFunction("go.etcd.io/etcd/server/v3/etcdserver.(*EtcdServer).Authenticate"),
	)
}

// testCA is the throw-away CA of the test clusters: their nodes and
// clients talk mutual TLS with certificates it issues.
var testCA = sync.OnceValue(func() *ordotls.CA {
	ca, err := ordotls.NewCA("cluster-test-ca")
	if err != nil {
		panic(err)
	}
	return ca
})

// nodeTLS returns a node certificate from testCA, for 127.0.0.1, ::1 and
// localhost.
func nodeTLS(name string) *ordotls.Material {
	m, err := testCA().Node(name)
	if err != nil {
		panic(fmt.Sprintf("issuing a test certificate: %v", err))
	}
	return m
}

// clientTLS returns a client certificate from testCA.
func clientTLS(name string) *ordotls.Material {
	m, err := testCA().Client(name)
	if err != nil {
		panic(fmt.Sprintf("issuing a test certificate: %v", err))
	}
	return m
}

// env is one test cluster (clustertest) and the nodes a test started in
// it, in start order. Its nodes and clients talk mutual TLS (testCA), or
// plaintext if insecure; each node has its clustertest.Faults
// (faultsOf).
type env struct {
	t        testing.TB
	cl       *clustertest.Cluster
	store    persistence.Store
	prefix   string
	shards   uint32
	nodes    []*cluster.Node
	insecure bool
	// gossipKey encrypts the nodes' gossip.
	gossipKey []byte
}

// newEnv starts an etcd; with a nil store, the cluster keeps its entities
// in that etcd (the etcd store, as a real deployment would).
func newEnv(t testing.TB, store persistence.Store, shards uint32) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := clustertest.Start(ctx, clustertest.Config{Dir: t.TempDir(), UnsafeNoFsync: true, Store: store,
		Shards: shards, Logger: testutil.Logger(), CA: testCA()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := cl.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	return &env{t: t, cl: cl, store: cl.Store(), prefix: cl.Prefix(), shards: cl.Shards(),
		gossipKey: cl.GossipKeys()[0]}
}

func (e *env) config(id string) cluster.Config {
	e.t.Helper()
	cfg, err := e.cl.NodeConfig(id)
	if err != nil {
		e.t.Fatal(err)
	}
	if e.insecure {
		cfg.TLS, cfg.Insecure = nil, true
	}
	return cfg
}

// clientConfig returns the configuration of a client of the cluster,
// named "client" by its certificate.
func (e *env) clientConfig() cluster.ClientConfig {
	e.t.Helper()
	cfg, err := e.cl.ClientConfig("client")
	if err != nil {
		e.t.Fatal(err)
	}
	if e.insecure {
		cfg.TLS, cfg.Insecure = nil, true
	}
	return cfg
}

func (e *env) start(cfg cluster.Config) *cluster.Node {
	e.t.Helper()
	return e.startKinds(cfg, counterKind)
}

// startKinds starts a node that hosts kinds; the test's cleanup shuts it
// down.
func (e *env) startKinds(cfg cluster.Config, kinds ...actors.Kind) *cluster.Node {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := e.cl.StartNode(ctx, cfg, kinds...)
	if err != nil {
		e.t.Fatal(err)
	}
	e.nodes = append(e.nodes, n)
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if f := e.faultsOf(n); f != nil {
			f.Resume() // a paused node would not drain
		}
		_ = n.Shutdown(ctx)
	})
	return n
}

// faultsOf returns the fault seam of n, a node of the cluster (nil once
// a node restarted under its ID replaced it).
func (e *env) faultsOf(n *cluster.Node) *clustertest.Faults {
	for i, m := range e.cl.Nodes() {
		if m == n {
			return e.cl.Faults(i)
		}
	}
	return nil
}

// kill crashes n (clustertest.Faults.Kill) and waits until it stopped.
func (e *env) kill(n *cluster.Node) {
	e.t.Helper()
	f := e.faultsOf(n)
	if f == nil {
		e.t.Fatalf("node %s has no fault seam", n.ID())
	}
	f.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := n.Shutdown(ctx); err != nil { // after a crash: waits for it
		e.t.Fatal(err)
	}
}

func (e *env) startN(n int) {
	for i := 0; i < n; i++ {
		e.start(e.config(fmt.Sprintf("n%d", len(e.nodes)+1)))
	}
}

// settled waits until nodes own every shard between them, each shard once
// (clustertest.Settled).
func (e *env) settled(nodes ...*cluster.Node) {
	e.t.Helper()
	testutil.Eventually(e.t, 30*time.Second, 20*time.Millisecond, func() error {
		return clustertest.Settled(e.shards, nodes...)
	})
}

// converged waits until every shard is with its desired owner over nodes
// and no other (clustertest.Converged).
func (e *env) converged(nodes ...*cluster.Node) {
	e.t.Helper()
	testutil.Eventually(e.t, 30*time.Second, 20*time.Millisecond, func() error {
		return clustertest.Converged(e.shards, nodes...)
	})
}

func (e *env) dial() *cluster.Client {
	e.t.Helper()
	cfg := e.clientConfig()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := cluster.Dial(ctx, e.cl.Endpoints(), cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { c.Close() })
	return c
}

type counterCtx = actors.Context[*testpb.Counter]

var counterKind = actors.MustKind("counter", func() *testpb.Counter { return new(testpb.Counter) },
	actors.On(func(c *counterCtx, m *testpb.Add) (*testpb.Value, error) {
		var prev uint64
		if m.Sender != "" {
			if c.State.LastSeq == nil {
				c.State.LastSeq = map[string]uint64{}
			}
			prev = c.State.LastSeq[m.Sender]
			c.State.LastSeq[m.Sender] = m.Seq
		}
		c.State.Value += m.Delta
		return &testpb.Value{Value: c.State.Value, PrevSeq: prev}, nil
	}),
	actors.OnRead(func(c *counterCtx, m *testpb.Get) (*testpb.Value, error) {
		return &testpb.Value{Value: c.State.Value}, nil
	}),
)

func counter(id string) actors.Ref { return counterKind.Ref(id) }
