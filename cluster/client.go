package cluster

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ordo-actors/ordo/ordotls"
	"github.com/ordo-actors/ordo/placement"
	"github.com/ordo-actors/ordo/proto/ordopb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/trace"
)

// ClientConfig configures a client-only process (Dial).
type ClientConfig struct {
	// Prefix is the cluster's etcd key prefix. Default "/ordo/default".
	Prefix string
	// Shards is the cluster's shard count. 0 reads it from etcd (P/config).
	Shards uint32
	// EtcdDialTimeout bounds connecting to etcd. Default 5s.
	EtcdDialTimeout time.Duration
	// EtcdTLS secures the connections to etcd; see Config.EtcdTLS.
	EtcdTLS *tls.Config
	// EtcdUsername authenticates to etcd when its auth is enabled (a user
	// with read access to the cluster's prefix); see Config.EtcdUsername.
	EtcdUsername string
	// EtcdPassword is EtcdUsername's password, from a file or the
	// environment; never logged.
	EtcdPassword string
	// TLS secures calls with mutual TLS (TLS 1.3): the client presents
	// its certificate (client authentication suffices, see
	// ordotls.CA.IssueClient) and verifies each node's against the
	// source's CAs and the address it dials. Nodes see the client as its
	// certificate's subject common name. See Config.TLS.
	TLS ordotls.Source
	// Insecure calls in plaintext, as nodes without TLS expect; Dial logs
	// a warning. It excludes TLS, and a config must set one of the two:
	// Dial refuses one that sets neither.
	Insecure bool
	// Retry is how calls are retried.
	Retry RetryPolicy
	// TracerProvider, when set, makes spans of the client's calls and
	// their attempts, whose context the calls carry to the nodes (see
	// Config.TracerProvider). A call made under a context with a span is
	// its child. Default nil: no tracing.
	TracerProvider trace.TracerProvider
	// Logger receives the client's logs, its etcd client's included.
	// Default slog.Default().
	Logger *slog.Logger
}

// DefaultClientConfig returns the defaults.
func DefaultClientConfig() ClientConfig {
	return ClientConfig{Prefix: "/ordo/default", EtcdDialTimeout: 5 * time.Second,
		Retry: DefaultRetryPolicy()}
}

// Client calls entities of a cluster without hosting any: it routes by the
// etcd placement table. Safe for concurrent use.
type Client struct {
	etcd   *clientv3.Client
	table  *placement.Table
	tr     *transport
	router *router
	once   sync.Once
}

// Dial connects a client to the cluster whose etcd is at endpoints.
func Dial(ctx context.Context, endpoints []string, cfg ClientConfig) (_ *Client, err error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if len(endpoints) == 0 {
		return nil, errors.New("cluster: Dial: no etcd endpoints")
	}
	if cfg.EtcdDialTimeout <= 0 {
		return nil, errors.New("cluster: Dial: EtcdDialTimeout must be positive")
	}
	if err := requireTLSChoice(cfg.TLS, cfg.Insecure); err != nil {
		return nil, err
	}
	if err := cfg.Retry.validate(); err != nil {
		return nil, err
	}
	warnPlaintext(cfg.Logger, cfg.TLS)
	c := &Client{}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	if c.etcd, err = dialEtcd(ctx, etcdAccess{endpoints: endpoints, timeout: cfg.EtcdDialTimeout,
		tls: cfg.EtcdTLS, username: cfg.EtcdUsername, password: cfg.EtcdPassword}, cfg.Logger); err != nil {
		return nil, err
	}
	shards := cfg.Shards
	if shards == 0 {
		if shards, err = readShardCount(ctx, c.etcd, cfg.Prefix); err != nil {
			return nil, fmt.Errorf("cluster: Dial: %w", err)
		}
	}
	if c.table, err = placement.NewTable(c.etcd, cfg.Prefix, cfg.Logger); err != nil {
		return nil, fmt.Errorf("cluster: Dial: %w", err)
	}
	// The table watches until Close, not until Dial's ctx ends.
	if err = c.table.Start(context.WithoutCancel(ctx)); err != nil {
		return nil, fmt.Errorf("cluster: Dial: %w", err)
	}
	c.tr = newTransport(cfg.Logger, cfg.TLS)
	c.router = &router{table: c.table, tr: c.tr, shards: shards, policy: cfg.Retry, metrics: newMetrics(), log: cfg.Logger,
		tracer: tracerOf(cfg.TracerProvider, TracerName, "")}
	return c, nil
}

// Invoke implements actors.Invoker.
func (c *Client) Invoke(ctx context.Context, env *ordopb.Envelope) (*ordopb.Reply, error) {
	return c.router.Invoke(ctx, env)
}

// TransportStats returns what the client's transport has sent: its calls
// and their frames (a client sends no results).
func (c *Client) TransportStats() TransportStats { return c.tr.stats() }

// Close releases the client's connections. It is idempotent.
func (c *Client) Close() error {
	c.once.Do(func() {
		if c.tr != nil {
			c.tr.close(false)
		}
		if c.table != nil {
			c.table.Close()
		}
		if c.etcd != nil {
			c.etcd.Close()
		}
	})
	return nil
}

// readShardCount reads the shard count recorded in P/config.
func readShardCount(ctx context.Context, c *clientv3.Client, prefix string) (uint32, error) {
	keys, err := placement.NewKeys(prefix)
	if err != nil {
		return 0, err
	}
	resp, err := c.Get(ctx, keys.Config())
	if err != nil {
		return 0, fmt.Errorf("reading %s: %w", keys.Config(), err)
	}
	if len(resp.Kvs) == 0 {
		return 0, fmt.Errorf("%s not found: no node of cluster %q has started", keys.Config(), prefix)
	}
	var cfg struct {
		Shards uint32 `json:"shards"`
	}
	if err := json.Unmarshal(resp.Kvs[0].Value, &cfg); err != nil || cfg.Shards == 0 {
		return 0, fmt.Errorf("%s holds %q: not a cluster config", keys.Config(), resp.Kvs[0].Value)
	}
	return cfg.Shards, nil
}
