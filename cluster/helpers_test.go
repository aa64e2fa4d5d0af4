package cluster_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/cluster"
	"github.com/ordo-actors/ordo/etcdembed"
	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/ordo-actors/ordo/ordotls"
	"github.com/ordo-actors/ordo/persistence"
	etcdstore "github.com/ordo-actors/ordo/persistence/etcd"
	"github.com/ordo-actors/ordo/placement"
	"github.com/ordo-actors/ordo/proto/testpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"
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

func startEtcd(t testing.TB) *etcdembed.Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := etcdembed.Start(ctx, etcdembed.Config{Dir: t.TempDir(), UnsafeNoFsync: true, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return srv
}

var prefixSeq atomic.Int64

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

// env is one test cluster: an etcd, a store, a prefix, and nodes. Its
// nodes and clients talk mutual TLS (testCA), or plaintext if insecure.
type env struct {
	t        *testing.T
	etcd     *etcdembed.Server
	store    persistence.Store
	prefix   string
	shards   uint32
	nodes    []*cluster.Node
	faults   *cluster.GossipFaults
	insecure bool
	// gossipKey encrypts the nodes' gossip.
	gossipKey []byte
}

// newEnv starts an etcd; with a nil store, the cluster keeps its entities
// in that etcd (the etcd store, as a real deployment would).
func newEnv(t *testing.T, store persistence.Store, shards uint32) *env {
	e := &env{t: t, etcd: startEtcd(t), store: store, shards: shards,
		prefix: fmt.Sprintf("/ordo/test-%d", prefixSeq.Add(1)), faults: &cluster.GossipFaults{}}
	var err error
	if e.gossipKey, err = cluster.GenerateGossipKey(); err != nil {
		t.Fatal(err)
	}
	if store == nil {
		c, err := clientv3.New(clientv3.Config{Endpoints: e.etcd.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		cfg := etcdstore.DefaultConfig()
		cfg.Prefix = e.prefix + "/store/"
		st, err := etcdstore.New(c, cfg)
		if err != nil {
			t.Fatal(err)
		}
		e.store = st
		t.Cleanup(func() { st.Close(); c.Close() })
	}
	return e
}

func (e *env) config(id string) cluster.Config {
	cfg := cluster.DefaultLocalConfig()
	cfg.NodeID = id
	cfg.EtcdEndpoints = e.etcd.Endpoints()
	cfg.Store = e.store
	cfg.Placement.Prefix = e.prefix
	cfg.Placement.Shards = e.shards
	cfg.Logger = testutil.Logger()
	cfg.GossipFaults = e.faults
	if e.insecure {
		cfg.Insecure = true
	} else {
		cfg.TLS = nodeTLS(id)
	}
	cfg.GossipKeys = [][]byte{e.gossipKey}
	if len(e.nodes) > 0 {
		cfg.Join = []string{e.nodes[0].GossipAddr()}
	}
	return cfg
}

// clientConfig returns the configuration of a client of the cluster,
// named "client" by its certificate.
func (e *env) clientConfig() cluster.ClientConfig {
	cfg := cluster.DefaultClientConfig()
	cfg.Prefix = e.prefix
	cfg.Logger = testutil.Logger()
	if e.insecure {
		cfg.Insecure = true
	} else {
		cfg.TLS = clientTLS("client")
	}
	return cfg
}

func (e *env) start(cfg cluster.Config) *cluster.Node {
	e.t.Helper()
	return e.startKinds(cfg, counterKind)
}

// startKinds starts a node that hosts kinds.
func (e *env) startKinds(cfg cluster.Config, kinds ...actors.Kind) *cluster.Node {
	e.t.Helper()
	n, err := cluster.New(cfg, kinds...)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := n.Start(ctx); err != nil {
		e.t.Fatal(err)
	}
	e.nodes = append(e.nodes, n)
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = n.Shutdown(ctx)
	})
	return n
}

func (e *env) startN(n int) {
	for i := 0; i < n; i++ {
		e.start(e.config(fmt.Sprintf("n%d", len(e.nodes)+1)))
	}
}

// settled waits until the running nodes own every shard between them,
// each shard once.
func (e *env) settled(nodes ...*cluster.Node) {
	e.t.Helper()
	testutil.Eventually(e.t, 30*time.Second, 20*time.Millisecond, func() error {
		seen := map[uint32]string{}
		for _, n := range nodes {
			for s := range n.Owned() {
				if other, dup := seen[s]; dup {
					return fmt.Errorf("shard %d owned by %s and %s", s, other, n.ID())
				}
				seen[s] = n.ID()
			}
		}
		if len(seen) != int(e.shards) {
			return fmt.Errorf("%d of %d shards owned", len(seen), e.shards)
		}
		return nil
	})
}

// converged waits until every shard is owned by its desired owner over
// nodes (placement.Desired over their IDs) and by no other node: shards
// stop moving once every node sees the same live set. settled alone also
// holds midway through handoffs, for instance while a node that joined
// still holds free shards it took before it knew its peers.
func (e *env) converged(nodes ...*cluster.Node) {
	e.t.Helper()
	var ids []string
	for _, n := range nodes {
		ids = append(ids, n.ID())
	}
	testutil.Eventually(e.t, 30*time.Second, 20*time.Millisecond, func() error {
		for s := uint32(0); s < e.shards; s++ {
			want := placement.Desired(s, ids)
			for _, n := range nodes {
				if _, owns := n.Owned()[s]; owns != (n.ID() == want) {
					return fmt.Errorf("shard %d: %s owns it: %v; desired owner %s", s, n.ID(), owns, want)
				}
			}
		}
		return nil
	})
}

func (e *env) dial() *cluster.Client {
	e.t.Helper()
	cfg := e.clientConfig()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := cluster.Dial(ctx, e.etcd.Endpoints(), cfg)
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
