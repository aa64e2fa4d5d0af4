package clustertest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/cluster"
	"github.com/ordo-actors/ordo/etcdembed"
	"github.com/ordo-actors/ordo/ordotls"
	"github.com/ordo-actors/ordo/persistence"
	etcdstore "github.com/ordo-actors/ordo/persistence/etcdstore"
	"github.com/ordo-actors/ordo/persistence/memory"
	pgstore "github.com/ordo-actors/ordo/persistence/pgstore"
	"github.com/ordo-actors/ordo/placement"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
)

// Config configures Start.
type Config struct {
	// Nodes is the number of nodes Start starts (IDs n1, n2, …), each
	// hosting Kinds; with 0 it starts none, and the caller adds them with
	// NodeConfig and StartNode.
	Nodes int
	// Kinds are the entity kinds of the nodes Start and Restart start.
	Kinds []actors.Kind
	// EtcdEndpoints, when set, is the etcd to use; otherwise an embedded
	// single member is started in Dir.
	EtcdEndpoints []string
	// Dir is the embedded etcd's data directory; "" makes a temporary one,
	// removed by Close.
	Dir string
	// UnsafeNoFsync makes the embedded etcd skip fsync (tests only).
	UnsafeNoFsync bool
	// Store, when set, is where the nodes keep entity state; the caller
	// closes it after Close. Otherwise Start opens a store of StoreKind.
	Store persistence.Store
	// StoreKind is the store Start opens when Store is nil, and Close
	// closes: "etcd" (the default: entity state in the cluster's etcd,
	// under Prefix), "postgres" (a fresh schema of the database at PG,
	// named after Prefix, dropped by Close) or "memory" (package
	// persistence/memory: nothing is durable, nothing outlives the
	// process; it measures the runtime without a store's cost).
	StoreKind string
	// PG is the PostgreSQL URL, for StoreKind "postgres".
	PG string
	// Prefix is the cluster's etcd prefix; "" picks a fresh one, so each
	// cluster starts empty even on a shared etcd.
	Prefix string
	// Shards is the shard count; 0 keeps the local default
	// (cluster.DefaultLocalConfig).
	Shards uint32
	// LeaseTTL is the nodes' lease TTL (whole seconds); 0 keeps the local
	// default (2s).
	LeaseTTL time.Duration
	// Logger receives the nodes' and the client's logs; nil discards them.
	Logger *slog.Logger
	// AdminAddr, when set, gives every node an admin endpoint (status,
	// metrics, the dashboard) on this host:port; port 0 picks a free one
	// per node, which a node restarted under the same ID binds again.
	AdminAddr string
	// CA issues the certificates of the nodes (named by their IDs) and of
	// the clients; nil makes a throw-away one.
	CA *ordotls.CA
	// GossipKeys encrypt the nodes' gossip (cluster.Config.GossipKeys);
	// nil makes Start generate a random key.
	GossipKeys [][]byte
	// Tracing, when set, returns the OpenTelemetry tracer provider of a
	// node (by its ID) or of the client ("client"): their
	// cluster.Config.TracerProvider and ClientConfig.TracerProvider.
	// The caller shuts the providers down after Close. Nil: no tracing.
	Tracing func(process string) trace.TracerProvider
}

// Cluster is a running in-process cluster. Its methods are safe for
// concurrent use, except Close, which is called once, after everything
// else.
type Cluster struct {
	cfg       Config
	etcd      *etcdembed.Server
	tmpDir    string
	cli       *clientv3.Client
	store     persistence.Store
	ownsStore bool
	pgSchema  string
	client    *cluster.Client

	partition *partition // gossip cuts (Isolate), consulted by every node's Faults

	mu     sync.Mutex
	nodes  []*cluster.Node // in the order their IDs first started
	admins []string        // admin address of node i, kept across restarts
	faults []*Faults       // fault seam of node i (nil: not a *Faults)
}

var seq struct {
	sync.Mutex
	n int
}

// Start starts etcd (unless Config.EtcdEndpoints), the store and
// Config.Nodes nodes; with nodes, it waits until they own every shard
// and dials the cluster's client (Client). On error everything started is
// stopped.
func Start(ctx context.Context, cfg Config) (_ *Cluster, err error) {
	if cfg.Nodes < 0 {
		return nil, fmt.Errorf("clustertest: %d nodes", cfg.Nodes)
	}
	if cfg.Store == nil {
		if cfg.StoreKind == "" {
			cfg.StoreKind = "etcd"
		}
		if cfg.StoreKind != "etcd" && cfg.StoreKind != "postgres" && cfg.StoreKind != "memory" {
			return nil, fmt.Errorf("clustertest: store %q: want etcd, postgres or memory", cfg.StoreKind)
		}
		if cfg.StoreKind == "postgres" && cfg.PG == "" {
			return nil, errors.New("clustertest: store postgres needs a PostgreSQL URL")
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if len(cfg.GossipKeys) == 0 {
		k, err := cluster.GenerateGossipKey()
		if err != nil {
			return nil, fmt.Errorf("clustertest: %w", err)
		}
		cfg.GossipKeys = [][]byte{k}
	}
	if cfg.Prefix == "" {
		seq.Lock()
		seq.n++
		cfg.Prefix = fmt.Sprintf("/ordo/cluster-%d-%d-%d", os.Getpid(), time.Now().Unix(), seq.n)
		seq.Unlock()
	}
	if cfg.Shards == 0 {
		cfg.Shards = cluster.DefaultLocalConfig().Placement.Shards
	}
	if cfg.CA == nil {
		ca, err := ordotls.NewCA("ordo in-process cluster CA")
		if err != nil {
			return nil, fmt.Errorf("clustertest: %w", err)
		}
		cfg.CA = ca
	}
	c := &Cluster{cfg: cfg, partition: &partition{}}
	defer func() {
		if err != nil {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			c.Close(cctx)
		}
	}()

	endpoints := cfg.EtcdEndpoints
	maxTxnOps := etcdstore.DefaultMaxTxnOps
	if len(endpoints) == 0 {
		dir := cfg.Dir
		if dir == "" {
			if c.tmpDir, err = os.MkdirTemp("", "ordo-cluster-etcd-"); err != nil {
				return nil, fmt.Errorf("clustertest: %w", err)
			}
			dir = c.tmpDir
		}
		c.etcd, err = etcdembed.Start(ctx, etcdembed.Config{Dir: dir, Logger: zap.NewNop(), UnsafeNoFsync: cfg.UnsafeNoFsync})
		if err != nil {
			return nil, fmt.Errorf("clustertest: embedded etcd: %w", err)
		}
		endpoints = c.etcd.Endpoints()
		maxTxnOps = 1024 // etcdembed's default --max-txn-ops
	}
	c.cfg.EtcdEndpoints = endpoints

	switch {
	case cfg.Store != nil:
		c.store = cfg.Store
	case cfg.StoreKind == "etcd":
		c.cli, err = clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return nil, fmt.Errorf("clustertest: etcd client: %w", err)
		}
		sc := etcdstore.DefaultConfig()
		sc.Prefix = cfg.Prefix + "/store/"
		sc.MaxTxnOps = maxTxnOps
		if c.store, err = etcdstore.New(c.cli, sc); err != nil {
			return nil, fmt.Errorf("clustertest: %w", err)
		}
		c.ownsStore = true
	case cfg.StoreKind == "memory":
		c.store = memory.New()
		c.ownsStore = true
	case cfg.StoreKind == "postgres":
		sc := pgstore.DefaultConfig()
		sc.URL = cfg.PG
		sc.Schema = schemaName(cfg.Prefix)
		if c.store, err = pgstore.Open(ctx, sc); err != nil {
			return nil, fmt.Errorf("clustertest: %w", err)
		}
		c.ownsStore = true
		c.pgSchema = sc.Schema
	}

	if cfg.Nodes == 0 {
		return c, nil
	}
	for i := range cfg.Nodes {
		ncfg, err := c.NodeConfig(NodeID(i))
		if err != nil {
			return nil, err
		}
		if _, err := c.StartNode(ctx, ncfg, cfg.Kinds...); err != nil {
			return nil, err
		}
	}
	if err := c.WaitSettled(ctx); err != nil {
		return nil, err
	}
	if c.client, err = c.Dial(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// schemaName turns a prefix into a PostgreSQL identifier.
func schemaName(prefix string) string {
	b := []byte("ordo")
	for _, r := range []byte(prefix) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b = append(b, r)
		default:
			if b[len(b)-1] != '_' {
				b = append(b, '_')
			}
		}
	}
	return string(b)
}

// NodeID returns the ID Start gives its node i.
func NodeID(i int) string { return fmt.Sprintf("n%d", i+1) }

// NodeConfig returns the configuration of a node with the given ID in this
// cluster: local timers, the cluster's etcd, store, prefix, shard count,
// gossip keys, logger, tracing and Config.AdminAddr, a certificate from
// the CA, the gossip addresses of the other nodes to join, and a new
// Faults (Cluster.Faults once the node started). The caller may change it
// before StartNode.
func (c *Cluster) NodeConfig(id string) (cluster.Config, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cfg := cluster.DefaultLocalConfig()
	cfg.NodeID = id
	var err error
	if cfg.TLS, err = c.cfg.CA.Node(id); err != nil {
		return cfg, fmt.Errorf("clustertest: %w", err)
	}
	cfg.EtcdEndpoints = c.cfg.EtcdEndpoints // its own connection, lost with it on a crash
	cfg.Store = c.store
	cfg.Placement.Prefix = c.cfg.Prefix
	cfg.Placement.Shards = c.cfg.Shards
	if c.cfg.LeaseTTL != 0 {
		cfg.Placement.LeaseTTL = c.cfg.LeaseTTL
		cfg.Placement.ValidityMargin = min(cfg.Placement.ValidityMargin, c.cfg.LeaseTTL/4)
	}
	cfg.Logger = c.cfg.Logger
	cfg.AdminAddr = c.cfg.AdminAddr
	cfg.GossipKeys = c.cfg.GossipKeys
	if c.cfg.Tracing != nil {
		cfg.TracerProvider = c.cfg.Tracing(id)
	}
	for _, n := range c.nodes {
		if n.ID() != id {
			cfg.Join = append(cfg.Join, n.GossipAddr())
		}
	}
	cfg.Faults = newFaults(c.partition)
	return cfg, nil
}

// StartNode starts a node with cfg hosting kinds and adds it to the
// cluster, in the place of the node of the same ID if there was one
// (which must have been killed or shut down). A node restarted after a
// crash waits in Start until its previous lease ends.
func (c *Cluster) StartNode(ctx context.Context, cfg cluster.Config, kinds ...actors.Kind) (*cluster.Node, error) {
	n, err := cluster.New(cfg, kinds...)
	if err != nil {
		return nil, fmt.Errorf("clustertest: node %s: %w", cfg.NodeID, err)
	}
	if err := n.Start(ctx); err != nil {
		return nil, fmt.Errorf("clustertest: node %s: %w", cfg.NodeID, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	i := 0
	for i < len(c.nodes) && c.nodes[i].ID() != cfg.NodeID {
		i++
	}
	if i == len(c.nodes) {
		c.nodes = append(c.nodes, nil)
		c.admins = append(c.admins, "")
		c.faults = append(c.faults, nil)
	}
	c.nodes[i] = n
	c.admins[i] = n.AdminAddr()
	c.faults[i], _ = cfg.Faults.(*Faults)
	return n, nil
}

// AdminURLs returns the dashboard URL of every node, by index ("" for a
// node without an admin endpoint).
func (c *Cluster) AdminURLs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, len(c.admins))
	for i, a := range c.admins {
		if a != "" {
			out[i] = "http://" + a + "/"
		}
	}
	return out
}

// Nodes returns the nodes, by index: in the order their IDs first
// started, a restarted node in the place of the one it replaced.
func (c *Cluster) Nodes() []*cluster.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*cluster.Node(nil), c.nodes...)
}

// Node returns node i.
func (c *Cluster) Node(i int) *cluster.Node { return c.Nodes()[i] }

// Client returns the client Start dialled (not hosted by any node), or nil
// when Start started no nodes.
func (c *Cluster) Client() *cluster.Client { return c.client }

// ClientConfig returns the configuration of a client of the cluster named
// name by its certificate from the CA, with the cluster's prefix, logger
// and tracing (the provider of "client").
func (c *Cluster) ClientConfig(name string) (cluster.ClientConfig, error) {
	cfg := cluster.DefaultClientConfig()
	cfg.Prefix = c.cfg.Prefix
	cfg.Logger = c.cfg.Logger
	if c.cfg.Tracing != nil {
		cfg.TracerProvider = c.cfg.Tracing("client")
	}
	var err error
	if cfg.TLS, err = c.cfg.CA.Client(name); err != nil {
		return cfg, fmt.Errorf("clustertest: %w", err)
	}
	return cfg, nil
}

// Dial returns a new client of the cluster named "client"
// (ClientConfig); the caller closes it. The cluster's nodes must have
// registered its shard count.
func (c *Cluster) Dial(ctx context.Context) (*cluster.Client, error) {
	cfg, err := c.ClientConfig("client")
	if err != nil {
		return nil, err
	}
	cl, err := cluster.Dial(ctx, c.cfg.EtcdEndpoints, cfg)
	if err != nil {
		return nil, fmt.Errorf("clustertest: %w", err)
	}
	return cl, nil
}

// Endpoints returns the etcd endpoints.
func (c *Cluster) Endpoints() []string { return c.cfg.EtcdEndpoints }

// Prefix returns the cluster's etcd prefix.
func (c *Cluster) Prefix() string { return c.cfg.Prefix }

// Shards returns the shard count.
func (c *Cluster) Shards() uint32 { return c.cfg.Shards }

// Store returns the nodes' store.
func (c *Cluster) Store() persistence.Store { return c.store }

// GossipKeys returns the keys the nodes' gossip is encrypted with.
func (c *Cluster) GossipKeys() [][]byte { return c.cfg.GossipKeys }

// CA returns the CA of the cluster's certificates.
func (c *Cluster) CA() *ordotls.CA { return c.cfg.CA }

// Owner returns the index of the node that owns ref's shard now, or -1.
func (c *Cluster) Owner(ref actors.Ref) int {
	shard := actors.ShardOf(ref, c.Shards())
	for i, n := range c.Nodes() {
		if _, ok := n.Owned()[shard]; ok {
			return i
		}
	}
	return -1
}

// Faults returns the fault seam of node i, as NodeConfig made it for the
// node now in place i (nil if its Config.Faults was changed to something
// else).
func (c *Cluster) Faults(i int) *Faults {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.faults[i]
}

// Kill crashes node i (Faults.Kill) and waits until it has stopped.
func (c *Cluster) Kill(ctx context.Context, i int) error {
	f := c.Faults(i)
	if f == nil {
		return fmt.Errorf("clustertest: node %d has no clustertest.Faults", i)
	}
	f.Kill()
	return c.Node(i).Shutdown(ctx) // after a crash: waits for it
}

// Isolate cuts gossip between the nodes whose gossip addresses
// (cluster.Node.GossipAddr) are given and all others, both ways, until
// Heal; isolating again replaces the previous split. It cuts gossip
// only: etcd and calls between nodes still go through.
func (c *Cluster) Isolate(gossipAddrs ...string) { c.partition.isolate(gossipAddrs) }

// Heal ends an Isolate.
func (c *Cluster) Heal() { c.partition.isolate(nil) }

// Restart starts a new node with node i's ID, hosting Config.Kinds, after
// Kill or Shutdown. It serves its admin endpoint, if node i had one, on
// the same address.
func (c *Cluster) Restart(ctx context.Context, i int) error {
	cfg, err := c.NodeConfig(c.Node(i).ID())
	if err != nil {
		return err
	}
	c.mu.Lock()
	if c.admins[i] != "" {
		cfg.AdminAddr = c.admins[i]
	}
	c.mu.Unlock()
	_, err = c.StartNode(ctx, cfg, c.cfg.Kinds...)
	return err
}

// Settled returns nil when nodes own every one of shards shards between
// them, each once, and otherwise an error that says what is missing.
func Settled(shards uint32, nodes ...*cluster.Node) error {
	seen := map[uint32]string{}
	for _, n := range nodes {
		for s := range n.Owned() {
			if other, dup := seen[s]; dup {
				return fmt.Errorf("shard %d owned by %s and %s", s, other, n.ID())
			}
			seen[s] = n.ID()
		}
	}
	if len(seen) != int(shards) {
		return fmt.Errorf("%d of %d shards owned", len(seen), shards)
	}
	return nil
}

// Converged returns nil when each of shards shards is owned by its desired
// owner over nodes (placement.Desired over their IDs) and by no other
// node, and otherwise an error that names a shard out of place. Shards
// stop moving once every node sees the same live set; Settled alone also
// holds midway through handoffs, for instance while a node that joined
// still holds free shards it took before it knew its peers.
func Converged(shards uint32, nodes ...*cluster.Node) error {
	var ids []string
	for _, n := range nodes {
		ids = append(ids, n.ID())
	}
	for s := uint32(0); s < shards; s++ {
		want := placement.Desired(s, ids)
		for _, n := range nodes {
			if _, owns := n.Owned()[s]; owns != (n.ID() == want) {
				return fmt.Errorf("shard %d: %s owns it: %v; desired owner %s", s, n.ID(), owns, want)
			}
		}
	}
	return nil
}

// WaitSettled polls until the cluster's nodes are Settled, or ctx ends.
func (c *Cluster) WaitSettled(ctx context.Context) error {
	return c.wait(ctx, Settled)
}

// WaitConverged polls until the cluster's nodes are Converged (no shard
// will move while the nodes stay up), or ctx ends.
func (c *Cluster) WaitConverged(ctx context.Context) error {
	return c.wait(ctx, Converged)
}

func (c *Cluster) wait(ctx context.Context, done func(uint32, ...*cluster.Node) error) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		err := done(c.Shards(), c.Nodes()...)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("clustertest: %v: %w", err, ctx.Err())
		case <-tick.C:
		}
	}
}

// Close shuts the client and every node down (gracefully while ctx lasts;
// paused nodes are resumed and gossip healed first), closes the store it
// opened (dropping the PostgreSQL schema it made), and stops the embedded
// etcd.
func (c *Cluster) Close(ctx context.Context) error {
	var errs []error
	if c.client != nil {
		errs = append(errs, c.client.Close())
	}
	c.Heal()
	c.mu.Lock()
	for _, f := range c.faults {
		if f != nil {
			f.Resume()
		}
	}
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, n := range c.Nodes() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := n.Shutdown(ctx); err != nil {
				c.cfg.Logger.Warn("node shutdown", "node", n.ID(), "err", err)
			}
		}()
	}
	wg.Wait()
	if c.ownsStore {
		errs = append(errs, c.store.Close())
	}
	if c.pgSchema != "" {
		errs = append(errs, dropSchema(ctx, c.cfg.PG, c.pgSchema))
	}
	if c.cli != nil {
		errs = append(errs, c.cli.Close())
	}
	if c.etcd != nil {
		c.etcd.Close()
	}
	if c.tmpDir != "" {
		errs = append(errs, os.RemoveAll(c.tmpDir))
	}
	return errors.Join(errs...)
}

func dropSchema(ctx context.Context, url, schema string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("clustertest: drop schema: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		return fmt.Errorf("clustertest: drop schema %s: %w", schema, err)
	}
	return nil
}
