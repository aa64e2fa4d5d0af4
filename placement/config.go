package placement

import (
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode"
)

// Limits enforced by Config.Validate.
const (
	// MaxShards is the largest shard count a cluster may use.
	MaxShards = 65536
	// MaxNodeIDLen is the longest node ID, in bytes.
	MaxNodeIDLen = 128
)

// Config holds the placement settings of one node. Build it from
// DefaultConfig or DefaultLocalConfig and change what differs; constructors
// call Validate first. A Config is a plain value: a node copies it and never
// changes the caller's copy.
type Config struct {
	// Prefix is the etcd key prefix P under which the cluster keeps
	// P/config, P/nodes/ and P/shards/. It starts with "/", has no trailing
	// "/" and no whitespace. Default "/ordo/default".
	Prefix string

	// Shards is the shard count S of the cluster. Every node of a cluster
	// must use the same value: the first node writes it to P/config, and a
	// node configured with another count refuses to start. Default 256,
	// at most MaxShards.
	Shards uint32

	// NodeID names this node in P/nodes/<id> and as the value of the shard
	// keys it owns. Required: 1 to MaxNodeIDLen bytes of letters, digits,
	// '-', '_' or '.'.
	NodeID string

	// RemoteAddr is the address other nodes send calls to (stored in the
	// node's registry entry; not interpreted here).
	RemoteAddr string

	// GossipAddr is the node's memberlist address (stored in the node's
	// registry entry; not interpreted here).
	GossipAddr string
	// Kinds names the entity kinds the node hosts (stored in the node's
	// registration, so that callers can tell a kind the shard's owner does
	// not host yet from a kind no node hosts).
	Kinds []string

	// LeaseTTL is the TTL of the node's etcd lease. It bounds how long the
	// shards of a crashed node stay unowned when no one revokes its lease
	// (see the package doc). etcd counts whole seconds: at least 1s, a
	// multiple of a second. Default 5s.
	LeaseTTL time.Duration

	// ValidityMargin is subtracted from the lease TTL to get the node's own
	// validity deadline: last acknowledged keepalive's send time + LeaseTTL -
	// ValidityMargin. It must cover clock rate drift between this process and
	// the etcd leader and the time the host needs to stop serving. Must be
	// positive and below LeaseTTL/2. Default 1s.
	ValidityMargin time.Duration

	// KeepAliveInterval is the period of the node's keepalive requests.
	// Default LeaseTTL/3 when zero; must be below LeaseTTL-ValidityMargin.
	KeepAliveInterval time.Duration

	// ResyncInterval is how often the reconciler re-examines every shard
	// even without a change notification. Default 1s.
	ResyncInterval time.Duration

	// AcquireConcurrency bounds the lock acquisitions in flight at once.
	// Default 16.
	AcquireConcurrency int

	// HandoffRate is the sustained number of graceful handoffs (shards given
	// away because another node is now their desired owner) started per
	// second. Default 20.
	HandoffRate float64

	// HandoffBurst is the token bucket size for handoffs. Default 8.
	HandoffBurst int

	// RequestTimeout bounds each single etcd request the node makes
	// (acquire, release, register). Default 5s.
	RequestTimeout time.Duration

	// RetryBackoff is the initial delay between attempts to open a new
	// session after a lost one; it doubles up to LeaseTTL. Default 100ms.
	RetryBackoff time.Duration

	// Logger receives operational messages. Default slog.Default().
	Logger *slog.Logger

	// Faults is the agent's fault seam (see Faults): nil in production; a
	// test harness sets it to suspend keepalives or crash the node.
	// cluster.Node sets it from cluster.Config.Faults.
	Faults Faults
}

// DefaultConfig returns production defaults. NodeID must still be set.
func DefaultConfig() Config {
	return Config{
		Prefix:             "/ordo/default",
		Shards:             256,
		LeaseTTL:           5 * time.Second,
		ValidityMargin:     time.Second,
		ResyncInterval:     time.Second,
		AcquireConcurrency: 16,
		HandoffRate:        20,
		HandoffBurst:       8,
		RequestTimeout:     5 * time.Second,
		RetryBackoff:       100 * time.Millisecond,
	}
}

// DefaultLocalConfig returns fast timers for tests and single-machine runs:
// a 2s lease with a 500ms margin. NodeID must still be set.
func DefaultLocalConfig() Config {
	c := DefaultConfig()
	c.LeaseTTL = 2 * time.Second
	c.ValidityMargin = 500 * time.Millisecond
	c.ResyncInterval = 200 * time.Millisecond
	c.HandoffRate = 200
	c.HandoffBurst = 64
	c.RequestTimeout = 2 * time.Second
	c.RetryBackoff = 50 * time.Millisecond
	return c
}

// Validate reports the first invalid setting, as an error wrapping
// ErrInvalidConfig.
func (c *Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
	}
	if err := validPrefix(c.Prefix); err != nil {
		return bad("%v", err)
	}
	if c.Shards == 0 || c.Shards > MaxShards {
		return bad("shard count %d outside 1..%d", c.Shards, MaxShards)
	}
	if err := ValidateNodeID(c.NodeID); err != nil {
		return bad("%v", err)
	}
	if c.LeaseTTL < time.Second || c.LeaseTTL%time.Second != 0 {
		return bad("lease TTL %v is not a whole number of seconds >= 1s", c.LeaseTTL)
	}
	if c.ValidityMargin <= 0 || c.ValidityMargin >= c.LeaseTTL/2 {
		return bad("validity margin %v must be in (0, LeaseTTL/2 = %v)", c.ValidityMargin, c.LeaseTTL/2)
	}
	if c.KeepAliveInterval < 0 || c.KeepAliveInterval >= c.LeaseTTL-c.ValidityMargin {
		return bad("keepalive interval %v must be in [0, LeaseTTL-ValidityMargin)", c.KeepAliveInterval)
	}
	if c.ResyncInterval <= 0 {
		return bad("resync interval %v is not positive", c.ResyncInterval)
	}
	if c.AcquireConcurrency <= 0 {
		return bad("acquire concurrency %d is not positive", c.AcquireConcurrency)
	}
	if c.HandoffRate <= 0 || c.HandoffBurst <= 0 {
		return bad("handoff rate %v and burst %d must be positive", c.HandoffRate, c.HandoffBurst)
	}
	if c.RequestTimeout <= 0 {
		return bad("request timeout %v is not positive", c.RequestTimeout)
	}
	if c.RetryBackoff <= 0 {
		return bad("retry backoff %v is not positive", c.RetryBackoff)
	}
	return nil
}

// keepAliveInterval returns the effective keepalive period.
func (c *Config) keepAliveInterval() time.Duration {
	if c.KeepAliveInterval > 0 {
		return c.KeepAliveInterval
	}
	return c.LeaseTTL / 3
}

// sessionRequestTimeout bounds each etcd request made to replace a lost
// session (grant, register, revoke of the ended lease): the shorter of
// RequestTimeout and the keepalive interval, the bound a keepalive already
// has. etcd never answers a proposal it lost (one a follower forwarded to
// a leader that just died); retrying soon reaches the new leader.
func (c *Config) sessionRequestTimeout() time.Duration {
	return min(c.RequestTimeout, c.keepAliveInterval())
}

func (c *Config) logger() *slog.Logger {
	if c.Logger != nil {
		return c.Logger
	}
	return slog.Default()
}

func validPrefix(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("empty key prefix")
	case !strings.HasPrefix(p, "/"):
		return fmt.Errorf("key prefix %q does not start with /", p)
	case len(p) > 1 && strings.HasSuffix(p, "/"), p == "/":
		return fmt.Errorf("key prefix %q ends with /", p)
	case strings.IndexFunc(p, unicode.IsSpace) >= 0:
		return fmt.Errorf("key prefix %q contains whitespace", p)
	}
	return nil
}

// ValidateNodeID checks a node ID: 1 to MaxNodeIDLen bytes of ASCII letters,
// digits, '-', '_' or '.'.
func ValidateNodeID(id string) error {
	if id == "" {
		return fmt.Errorf("empty node ID")
	}
	if len(id) > MaxNodeIDLen {
		return fmt.Errorf("node ID is %d bytes, limit %d", len(id), MaxNodeIDLen)
	}
	for i := 0; i < len(id); i++ {
		b := id[i]
		ok := b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '-' || b == '_' || b == '.'
		if !ok {
			return fmt.Errorf("node ID %q: byte %q not allowed (letters, digits, - _ .)", id, b)
		}
	}
	return nil
}
