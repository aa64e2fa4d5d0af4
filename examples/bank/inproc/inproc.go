// Package inproc runs a whole bank cluster inside one process: an embedded
// etcd (or a given one), a store (etcd or PostgreSQL), N ordo nodes hosting
// the ledger kinds, and a client, the nodes and the client talking mutual
// TLS with certificates of a CA kept in memory. `bank demo` and the ordo approach of
// `bank bench` use it; so do the tests.
//
// A Cluster's methods are safe for concurrent use, except Close, which is
// called once, after everything else.
package inproc

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
	"github.com/ordo-actors/ordo/examples/bank/ledger"
	"github.com/ordo-actors/ordo/ordotls"
	"github.com/ordo-actors/ordo/persistence"
	etcdstore "github.com/ordo-actors/ordo/persistence/etcd"
	pgstore "github.com/ordo-actors/ordo/persistence/postgres"
	"github.com/ordo-actors/ordo/placement"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
)

// Config configures Start.
type Config struct {
	// Nodes is the number of nodes (at least 1).
	Nodes int
	// EtcdEndpoints, when set, is the etcd to use; otherwise an embedded
	// single member is started in Dir.
	EtcdEndpoints []string
	// Dir is the embedded etcd's data directory; "" makes a temporary one,
	// removed by Close.
	Dir string
	// UnsafeNoFsync makes the embedded etcd skip fsync (tests only).
	UnsafeNoFsync bool
	// Store is "etcd" (entity state in the same etcd) or "postgres".
	Store string
	// PG is the PostgreSQL URL, for Store "postgres". The cluster's state
	// goes to a fresh schema named after Prefix, dropped by Close.
	PG string
	// Prefix is the cluster's etcd prefix; "" picks a fresh one, so each
	// cluster starts empty even on a shared etcd.
	Prefix string
	// Shards is the shard count; 0 keeps the placement default.
	Shards uint32
	// LeaseTTL is the nodes' lease TTL (whole seconds); 0 keeps the local
	// default (2s).
	LeaseTTL time.Duration
	// Logger receives the nodes' logs; nil discards them.
	Logger *slog.Logger
	// AdminAddr, when set, gives every node an admin endpoint (status,
	// metrics, the dashboard) on this host:port; port 0 picks a free one
	// per node, which a node restarted under the same ID binds again.
	AdminAddr string
	// CA issues the certificates of the nodes (named by their IDs) and of
	// the client ("client"); nil makes a throw-away one.
	CA *ordotls.CA
	// GossipKeys encrypt the nodes' gossip (cluster.Config.GossipKeys);
	// nil makes Start generate a random key.
	GossipKeys [][]byte
	// Tracing, when set, returns the OpenTelemetry tracer provider of a
	// node (by its ID, see NodeID) or of the client ("client"): their
	// cluster.Config.TracerProvider and ClientConfig.TracerProvider.
	// The caller shuts the providers down after Close. Nil: no tracing.
	Tracing func(process string) trace.TracerProvider
}

// Cluster is a running in-process cluster.
type Cluster struct {
	cfg      Config
	etcd     *etcdembed.Server
	tmpDir   string
	cli      *clientv3.Client
	store    persistence.Store
	pgSchema string
	client   *cluster.Client

	mu     sync.Mutex
	nodes  []*cluster.Node
	admins []string // admin address of node i, kept across restarts
}

var seq struct {
	sync.Mutex
	n int
}

// Start starts the cluster and waits until its nodes own every shard. On
// error everything started is stopped.
func Start(ctx context.Context, cfg Config) (_ *Cluster, err error) {
	if cfg.Nodes < 1 {
		return nil, fmt.Errorf("inproc: %d nodes: want at least 1", cfg.Nodes)
	}
	if cfg.Store == "" {
		cfg.Store = "etcd"
	}
	if cfg.Store != "etcd" && cfg.Store != "postgres" {
		return nil, fmt.Errorf("inproc: store %q: want etcd or postgres", cfg.Store)
	}
	if cfg.Store == "postgres" && cfg.PG == "" {
		return nil, errors.New("inproc: store postgres needs a PostgreSQL URL")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if len(cfg.GossipKeys) == 0 {
		k, err := cluster.GenerateGossipKey()
		if err != nil {
			return nil, fmt.Errorf("inproc: %w", err)
		}
		cfg.GossipKeys = [][]byte{k}
	}
	if cfg.Prefix == "" {
		seq.Lock()
		seq.n++
		cfg.Prefix = fmt.Sprintf("/ordo/bank-%d-%d-%d", os.Getpid(), time.Now().Unix(), seq.n)
		seq.Unlock()
	}
	if cfg.CA == nil {
		ca, err := ordotls.NewCA("ordo bank in-process CA")
		if err != nil {
			return nil, fmt.Errorf("inproc: %w", err)
		}
		cfg.CA = ca
	}
	c := &Cluster{cfg: cfg}
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
			if c.tmpDir, err = os.MkdirTemp("", "ordo-bank-etcd-"); err != nil {
				return nil, fmt.Errorf("inproc: %w", err)
			}
			dir = c.tmpDir
		}
		c.etcd, err = etcdembed.Start(ctx, etcdembed.Config{Dir: dir, Logger: zap.NewNop(), UnsafeNoFsync: cfg.UnsafeNoFsync})
		if err != nil {
			return nil, fmt.Errorf("inproc: embedded etcd: %w", err)
		}
		endpoints = c.etcd.Endpoints()
		maxTxnOps = 1024 // etcdembed's default --max-txn-ops
	}
	c.cfg.EtcdEndpoints = endpoints
	c.cli, err = clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, fmt.Errorf("inproc: etcd client: %w", err)
	}

	switch cfg.Store {
	case "etcd":
		sc := etcdstore.DefaultConfig()
		sc.Prefix = cfg.Prefix + "/store/"
		sc.MaxTxnOps = maxTxnOps
		if c.store, err = etcdstore.New(c.cli, sc); err != nil {
			return nil, fmt.Errorf("inproc: %w", err)
		}
	case "postgres":
		sc := pgstore.DefaultConfig()
		sc.URL = cfg.PG
		sc.Schema = schemaName(cfg.Prefix)
		if c.store, err = pgstore.Open(ctx, sc); err != nil {
			return nil, fmt.Errorf("inproc: %w", err)
		}
		c.pgSchema = sc.Schema
	}

	for i := range cfg.Nodes {
		if _, err := c.startNode(ctx, i); err != nil {
			return nil, err
		}
	}
	if err := c.WaitSettled(ctx); err != nil {
		return nil, err
	}
	ccfg := cluster.DefaultClientConfig()
	ccfg.Prefix = cfg.Prefix
	ccfg.Logger = cfg.Logger
	if cfg.Tracing != nil {
		ccfg.TracerProvider = cfg.Tracing("client")
	}
	if ccfg.TLS, err = cfg.CA.Client("client"); err != nil {
		return nil, fmt.Errorf("inproc: %w", err)
	}
	if c.client, err = cluster.Dial(ctx, endpoints, ccfg); err != nil {
		return nil, fmt.Errorf("inproc: %w", err)
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

// NodeID returns the ID of node i.
func NodeID(i int) string { return fmt.Sprintf("n%d", i+1) }

func (c *Cluster) nodeConfig(i int) (cluster.Config, error) {
	cfg := cluster.DefaultLocalConfig()
	cfg.NodeID = NodeID(i)
	var err error
	if cfg.TLS, err = c.cfg.CA.Node(cfg.NodeID); err != nil {
		return cfg, fmt.Errorf("inproc: %w", err)
	}
	cfg.EtcdEndpoints = c.cfg.EtcdEndpoints // its own connection, lost with it on a crash
	cfg.Store = c.store
	cfg.Placement.Prefix = c.cfg.Prefix
	if c.cfg.Shards != 0 {
		cfg.Placement.Shards = c.cfg.Shards
	}
	if c.cfg.LeaseTTL != 0 {
		cfg.Placement.LeaseTTL = c.cfg.LeaseTTL
		cfg.Placement.ValidityMargin = min(cfg.Placement.ValidityMargin, c.cfg.LeaseTTL/4)
	}
	cfg.Logger = c.cfg.Logger
	cfg.AdminAddr = c.cfg.AdminAddr
	if i < len(c.admins) && c.admins[i] != "" {
		cfg.AdminAddr = c.admins[i]
	}
	cfg.GossipKeys = c.cfg.GossipKeys
	if c.cfg.Tracing != nil {
		cfg.TracerProvider = c.cfg.Tracing(cfg.NodeID)
	}
	for j, n := range c.nodes {
		if j != i && n != nil {
			cfg.Join = append(cfg.Join, n.GossipAddr())
		}
	}
	return cfg, nil
}

// startNode starts node i, replacing the previous node i if any (which
// must have been killed or shut down).
func (c *Cluster) startNode(ctx context.Context, i int) (*cluster.Node, error) {
	c.mu.Lock()
	cfg, err := c.nodeConfig(i)
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	var n *cluster.Node
	for {
		var err error
		if n, err = cluster.New(cfg, ledger.Account, ledger.Transfer); err != nil {
			return nil, fmt.Errorf("inproc: %w", err)
		}
		err = n.Start(ctx)
		if err == nil {
			break
		}
		// After a crash the ID stays registered until the old lease ends.
		if !errors.Is(err, placement.ErrNodeIDInUse) || ctx.Err() != nil {
			return nil, fmt.Errorf("inproc: node %s: %w", cfg.NodeID, err)
		}
		t := time.NewTimer(200 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("inproc: node %s: %w", cfg.NodeID, err)
		case <-t.C:
		}
	}
	c.mu.Lock()
	for len(c.nodes) <= i {
		c.nodes = append(c.nodes, nil)
	}
	c.nodes[i] = n
	for len(c.admins) <= i {
		c.admins = append(c.admins, "")
	}
	c.admins[i] = n.AdminAddr()
	c.mu.Unlock()
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

// Nodes returns the current nodes, by index.
func (c *Cluster) Nodes() []*cluster.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*cluster.Node(nil), c.nodes...)
}

// Node returns node i.
func (c *Cluster) Node(i int) *cluster.Node { return c.Nodes()[i] }

// Client returns the cluster's client (not hosted by any node).
func (c *Cluster) Client() *cluster.Client { return c.client }

// Endpoints returns the etcd endpoints.
func (c *Cluster) Endpoints() []string { return c.cfg.EtcdEndpoints }

// Prefix returns the cluster's etcd prefix.
func (c *Cluster) Prefix() string { return c.cfg.Prefix }

// Shards returns the shard count.
func (c *Cluster) Shards() uint32 {
	if c.cfg.Shards != 0 {
		return c.cfg.Shards
	}
	return cluster.DefaultLocalConfig().Placement.Shards
}

// Journal returns the cluster's store, which keeps the accounts' journals.
func (c *Cluster) Journal() persistence.Journal { return c.store.(persistence.Journal) }

// CA returns the CA of the cluster's certificates.
func (c *Cluster) CA() *ordotls.CA { return c.cfg.CA }

// Owner returns the index of the node that owns ref's shard now, or -1.
func (c *Cluster) Owner(ref actors.Ref) int {
	shard := actors.ShardOf(ref, int(c.Shards()))
	for i, n := range c.Nodes() {
		if n == nil {
			continue
		}
		if _, ok := n.Owned()[shard]; ok {
			return i
		}
	}
	return -1
}

// Unserved returns the shards n holds in placement that its entity host
// does not serve: calls for them are answered NotHere. A short-lived
// difference is normal (between acquiring and serving); a lasting one is a
// stuck shard.
func Unserved(n *cluster.Node) []uint32 {
	served := n.Host().Owned()
	var out []uint32
	for s := range n.Owned() {
		if _, ok := served[s]; !ok {
			out = append(out, s)
		}
	}
	return out
}

// Kill crashes node i (cluster.Node.Kill).
func (c *Cluster) Kill(i int) { c.Node(i).Kill() }

// Restart starts a new node with node i's ID, after Kill or Shutdown.
func (c *Cluster) Restart(ctx context.Context, i int) error {
	_, err := c.startNode(ctx, i)
	return err
}

// WaitSettled polls until the nodes own every shard between them, each
// once, or ctx ends.
func (c *Cluster) WaitSettled(ctx context.Context) error {
	shards := int(c.Shards())
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		seen := map[uint32]bool{}
		dup := false
		for _, n := range c.Nodes() {
			for s := range n.Owned() {
				dup = dup || seen[s]
				seen[s] = true
			}
		}
		if !dup && len(seen) == shards {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("inproc: %d of %d shards owned: %w", len(seen), shards, ctx.Err())
		case <-tick.C:
		}
	}
}

// Close shuts the client and every node down (gracefully while ctx lasts),
// closes the store, drops the PostgreSQL schema it made, and stops the
// embedded etcd.
func (c *Cluster) Close(ctx context.Context) error {
	var errs []error
	if c.client != nil {
		errs = append(errs, c.client.Close())
	}
	var wg sync.WaitGroup
	for _, n := range c.Nodes() {
		if n == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := n.Shutdown(ctx); err != nil {
				c.cfg.Logger.Warn("node shutdown", "node", n.ID(), "err", err)
			}
		}()
	}
	wg.Wait()
	if c.store != nil {
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
		return fmt.Errorf("inproc: drop schema: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		return fmt.Errorf("inproc: drop schema %s: %w", schema, err)
	}
	return nil
}
