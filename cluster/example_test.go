package cluster_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/cluster"
	"github.com/ordo-actors/ordo/etcdembed"
	"github.com/ordo-actors/ordo/ordotls"
	etcdstore "github.com/ordo-actors/ordo/persistence/etcdstore"
	"github.com/ordo-actors/ordo/persistence/memory"
	"github.com/ordo-actors/ordo/proto/testpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A development node for a unit test of a kind: no etcd, no network, the
// entity runtime of a cluster node over an in-memory store.
func ExampleNewDev() {
	type ctxC = actors.Context[*testpb.Counter]
	counter := actors.MustKind("counter", func() *testpb.Counter { return new(testpb.Counter) },
		actors.On(func(c *ctxC, m *testpb.Add) (*testpb.Value, error) {
			if m.Delta <= 0 {
				return nil, actors.HandlerError("invalid_amount", "delta %d is not positive", m.Delta)
			}
			c.State.Value += m.Delta
			return &testpb.Value{Value: c.State.Value}, nil
		}))

	ctx := context.Background()
	dev, err := cluster.NewDev(ctx, cluster.DevConfig{Kinds: []actors.Kind{counter}})
	if err != nil {
		panic(err)
	}
	defer dev.Close(ctx)

	// The same request ID twice: applied once, answered twice alike.
	for i := 0; i < 2; i++ {
		v, err := cluster.Call[*testpb.Value](ctx, dev, counter.Ref("c1"), &testpb.Add{Delta: 5}, actors.WithRequestID("req-1"))
		fmt.Println(v.GetValue(), err)
	}
	_, err = cluster.Call[*testpb.Value](ctx, dev, counter.Ref("c1"), &testpb.Add{Delta: -1})
	fmt.Println(err)
	// Output:
	// 5 <nil>
	// 5 <nil>
	// actors: handler error: invalid_amount: delta -1 is not positive
}

// One node of a cluster on an embedded etcd, which also keeps the
// entities' state (the etcd store). More nodes join by starting with the
// same etcd endpoints; each takes its share of the shards.
func ExampleNew() {
	type ctxC = actors.Context[*testpb.Counter]
	counter := actors.MustKind("counter", func() *testpb.Counter { return new(testpb.Counter) },
		actors.On(func(c *ctxC, m *testpb.Add) (*testpb.Value, error) {
			c.State.Value += m.Delta
			return &testpb.Value{Value: c.State.Value}, nil
		}))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	logger := slog.New(slog.DiscardHandler) // slog.Default() when unset

	dir, err := os.MkdirTemp("", "ordo-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	etcd, err := etcdembed.Start(ctx, etcdembed.Config{Dir: filepath.Join(dir, "etcd"), Slog: logger})
	if err != nil {
		panic(err)
	}
	defer etcd.Close()
	cli, err := clientv3.New(clientv3.Config{Endpoints: etcd.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		panic(err)
	}
	defer cli.Close()
	store, err := etcdstore.New(cli, etcdstore.DefaultConfig())
	if err != nil {
		panic(err)
	}
	defer store.Close()

	// Mutual TLS with a throw-away CA; a deployment loads its
	// certificates from files instead (ordotls.Load, see
	// ExampleConfig_mutualTLS).
	ca, err := ordotls.NewCA("example-ca")
	if err != nil {
		panic(err)
	}
	cfg := cluster.DefaultConfig()
	cfg.NodeID = "node-1"
	cfg.EtcdEndpoints = etcd.Endpoints()
	cfg.Store = store
	cfg.Logger = logger
	if cfg.TLS, err = ca.Node("node-1"); err != nil {
		panic(err)
	}
	node, err := cluster.New(cfg, counter)
	if err != nil {
		panic(err)
	}
	if err := node.Start(ctx); err != nil {
		panic(err)
	}
	defer node.Shutdown(ctx)
	// Alone, the node's share is every shard.
	if err := node.WaitReady(ctx); err != nil {
		panic(err)
	}
	fmt.Println("shards held:", len(node.Owned()))

	v, err := cluster.Call[*testpb.Value](ctx, node, counter.Ref("c1"), &testpb.Add{Delta: 2})
	fmt.Println(v.GetValue(), err)
	// Output:
	// shards held: 256
	// 2 <nil>
}

// A client-only process: it hosts nothing and calls the entities of the
// cluster whose etcd it is given, wherever they live.
func ExampleDial() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	endpoints, ca, stop := startExampleCluster(ctx) // an embedded etcd and a node, as in ExampleNew
	defer stop()

	cfg := cluster.DefaultClientConfig() // the cluster's prefix: "/ordo/default"
	cfg.Logger = slog.New(slog.DiscardHandler)
	var err error
	if cfg.TLS, err = ca.Client("example-client"); err != nil { // a client certificate of the cluster's CA
		panic(err)
	}
	client, err := cluster.Dial(ctx, endpoints, cfg)
	if err != nil {
		panic(err)
	}
	defer client.Close()
	counter := actors.Ref{Kind: "counter", ID: "c1"}
	for i := 0; i < 3; i++ {
		v, err := cluster.Call[*testpb.Value](ctx, client, counter, &testpb.Add{Delta: 1})
		fmt.Println(v.GetValue(), err)
	}
	// Output:
	// 1 <nil>
	// 2 <nil>
	// 3 <nil>
}

// startExampleCluster starts an embedded etcd and one ready node hosting
// the counter kind with the memory store, with mutual TLS from a
// throw-away CA, and returns the etcd endpoints, the CA and a function
// that stops everything.
func startExampleCluster(ctx context.Context) ([]string, *ordotls.CA, func()) {
	logger := slog.New(slog.DiscardHandler)
	dir, err := os.MkdirTemp("", "ordo-example-")
	if err != nil {
		panic(err)
	}
	etcd, err := etcdembed.Start(ctx, etcdembed.Config{Dir: filepath.Join(dir, "etcd"), UnsafeNoFsync: true, Slog: logger})
	if err != nil {
		panic(err)
	}
	ca, err := ordotls.NewCA("example-ca")
	if err != nil {
		panic(err)
	}
	cfg := cluster.DefaultLocalConfig()
	cfg.NodeID = "node-1"
	cfg.EtcdEndpoints = etcd.Endpoints()
	cfg.Store = memory.New()
	cfg.Logger = logger
	if cfg.TLS, err = ca.Node("node-1"); err != nil {
		panic(err)
	}
	node, err := cluster.New(cfg, counterKind)
	if err != nil {
		panic(err)
	}
	if err := node.Start(ctx); err != nil {
		panic(err)
	}
	if err := node.WaitReady(ctx); err != nil {
		panic(err)
	}
	return etcd.Endpoints(), ca, func() {
		_ = node.Shutdown(context.WithoutCancel(ctx))
		_ = cfg.Store.Close()
		etcd.Close()
		_ = os.RemoveAll(dir)
	}
}

// Mutual TLS between a node and a client, from certificate files: a
// throw-away CA writes them (as a deployment's certs step would), and
// each process loads its own with ordotls.Load, which re-reads them when
// they change. The node accepts only callers with a certificate from the
// CA; the client verifies that the node's certificate names the address
// it dials.
func ExampleConfig_mutualTLS() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	logger := slog.New(slog.DiscardHandler)
	dir, err := os.MkdirTemp("", "ordo-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)

	// Certificates: ca.pem, n1.pem, n1-key.pem, app.pem, app-key.pem.
	ca, err := ordotls.NewCA("example-ca")
	if err != nil {
		panic(err)
	}
	if err := ca.WriteCA(filepath.Join(dir, "certs")); err != nil {
		panic(err)
	}
	nodeFiles, err := ca.WriteNode(filepath.Join(dir, "certs"), "n1") // valid for 127.0.0.1, ::1, localhost
	if err != nil {
		panic(err)
	}
	clientFiles, err := ca.WriteClient(filepath.Join(dir, "certs"), "app")
	if err != nil {
		panic(err)
	}

	etcd, err := etcdembed.Start(ctx, etcdembed.Config{Dir: filepath.Join(dir, "etcd"), UnsafeNoFsync: true, Slog: logger})
	if err != nil {
		panic(err)
	}
	defer etcd.Close()
	cfg := cluster.DefaultLocalConfig()
	cfg.NodeID = "n1"
	cfg.EtcdEndpoints = etcd.Endpoints()
	cfg.Store = memory.New()
	cfg.Logger = logger
	nodeFiles.Logger = logger
	if cfg.TLS, err = ordotls.Load(nodeFiles); err != nil {
		panic(err)
	}
	node, err := cluster.New(cfg, counterKind)
	if err != nil {
		panic(err)
	}
	if err := node.Start(ctx); err != nil {
		panic(err)
	}
	defer node.Shutdown(ctx)
	if err := node.WaitReady(ctx); err != nil {
		panic(err)
	}

	ccfg := cluster.DefaultClientConfig()
	ccfg.Logger = logger
	clientFiles.Logger = logger
	if ccfg.TLS, err = ordotls.Load(clientFiles); err != nil {
		panic(err)
	}
	client, err := cluster.Dial(ctx, etcd.Endpoints(), ccfg)
	if err != nil {
		panic(err)
	}
	defer client.Close()
	v, err := cluster.Call[*testpb.Value](ctx, client, actors.Ref{Kind: "counter", ID: "c1"}, &testpb.Add{Delta: 1})
	fmt.Println(v.GetValue(), err)
	// Output:
	// 1 <nil>
}
