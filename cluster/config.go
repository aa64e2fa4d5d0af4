package cluster

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/persistence"
	"github.com/ordo-actors/ordo/placement"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Config configures a Node. Start from DefaultConfig or DefaultLocalConfig,
// set NodeID, the etcd endpoints (or client) and the store, and change what
// differs. A Node copies its Config and never changes the caller's copy.
type Config struct {
	// NodeID names the node in etcd and gossip. Required (see
	// placement.ValidateNodeID).
	NodeID string
	// EtcdEndpoints are the etcd client URLs. Ignored when Etcd is set.
	EtcdEndpoints []string
	// Etcd is an etcd client to use instead of dialing EtcdEndpoints; the
	// caller keeps ownership and closes it after Shutdown.
	Etcd *clientv3.Client
	// EtcdDialTimeout bounds connecting to etcd. Default 5s.
	EtcdDialTimeout time.Duration
	// Store keeps entity state. Required; the caller owns it and closes it
	// after Shutdown.
	Store persistence.Store
	// RemoteAddr is the host:port where the node accepts calls from other
	// nodes and clients (ordo's gRPC transport over TCP). Port 0 picks a free
	// port. Default "127.0.0.1:0".
	RemoteAddr string
	// GossipAddr is the host:port of the node's memberlist agent (TCP and
	// UDP). Port 0 picks a free port. Default "127.0.0.1:0".
	GossipAddr string
	// AdvertiseRemoteAddr is the host:port other nodes and clients are
	// told to call, when it is not RemoteAddr: a NAT, a load balancer or a
	// proxy in front of the node. It must reach RemoteAddr. Default "" (the
	// bound RemoteAddr).
	AdvertiseRemoteAddr string
	// AdvertiseGossipAddr is the IP:port (TCP and UDP) other nodes are
	// told to gossip with, when it is not GossipAddr. It must reach
	// GossipAddr. Default "" (the bound GossipAddr).
	AdvertiseGossipAddr string
	// Join lists gossip addresses of nodes to join at start. Optional: a
	// node also joins, and keeps rejoining, every node registered in etcd,
	// so unreachable seeds only delay gossip (a warning is logged).
	Join []string
	// Gossip selects memberlist timers: "lan" (memberlist's
	// DefaultLANConfig, tuned to declare a dead node in about 2s) or
	// "local" (DefaultLocalConfig). Default "lan".
	Gossip string
	// GossipKeys are the keys gossip is encrypted and authenticated with
	// (AES-GCM; each 16, 24 or 32 bytes for AES-128, -192 or -256). The
	// first is the primary: the node encrypts with it; every key
	// decrypts. With keys set, plaintext or undecryptable gossip is
	// dropped. Every node of a cluster needs the same primary key among
	// its keys (see Node.SetGossipKeys to rotate them). Read them from a
	// file with ReadGossipKeys; never pass them on a command line. Default
	// nil: gossip is plaintext and anyone who reaches the gossip port
	// takes part in failure detection (a warning is logged at Start).
	GossipKeys [][]byte
	// AdminAddr is where the admin HTTP endpoint (status JSON, /healthz,
	// /readyz, /metrics; see Node.Handler) listens; "" disables it. Bind
	// it to loopback unless it is protected.
	AdminAddr string
	// Pprof serves net/http/pprof under /debug/pprof/ on the admin endpoint.
	Pprof bool
	// Placement configures shards, the lease and handoffs. Its NodeID,
	// RemoteAddr and GossipAddr are filled in by the node.
	Placement placement.Config
	// Host configures the entity runtime. Its Shards, Router, LeaseValid and
	// OnShardLost are filled in by the node.
	Host actors.HostConfig
	// Retry is how calls are retried.
	Retry RetryPolicy
	// Logger receives the node's logs, its etcd client's included.
	// Default slog.Default().
	Logger *slog.Logger
	// GossipFaults, when set, lets tests cut gossip traffic (see
	// GossipFaults). Nil in production.
	GossipFaults *GossipFaults
}

// DefaultConfig returns production defaults. NodeID, the etcd endpoints and
// Store must still be set.
func DefaultConfig() Config {
	pc := placement.DefaultConfig()
	pc.LeaseTTL = 3 * time.Second
	pc.ValidityMargin = 750 * time.Millisecond
	return Config{
		EtcdDialTimeout: 5 * time.Second,
		RemoteAddr:      "127.0.0.1:0",
		GossipAddr:      "127.0.0.1:0",
		Gossip:          "lan",
		Placement:       pc,
		Host:            actors.DefaultHostConfig(),
		Retry:           DefaultRetryPolicy(),
	}
}

// DefaultLocalConfig returns short timers for tests and single-machine
// demos.
func DefaultLocalConfig() Config {
	c := DefaultConfig()
	c.Placement = placement.DefaultLocalConfig()
	c.Host = actors.DefaultLocalConfig()
	c.Gossip = "local"
	c.Retry.AttemptTimeout = 2 * time.Second
	return c
}

// Validate reports the first invalid setting.
func (c *Config) Validate() error {
	if err := placement.ValidateNodeID(c.NodeID); err != nil {
		return fmt.Errorf("cluster: NodeID: %w", err)
	}
	if c.Etcd == nil && len(c.EtcdEndpoints) == 0 {
		return errors.New("cluster: no etcd: set EtcdEndpoints or Etcd")
	}
	if c.Store == nil {
		return errors.New("cluster: Store is required")
	}
	if c.EtcdDialTimeout <= 0 {
		return errors.New("cluster: EtcdDialTimeout must be positive")
	}
	for name, a := range map[string]string{"RemoteAddr": c.RemoteAddr, "GossipAddr": c.GossipAddr} {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return fmt.Errorf("cluster: %s %q: %w", name, a, err)
		}
	}
	for name, a := range map[string]string{"AdvertiseRemoteAddr": c.AdvertiseRemoteAddr, "AdvertiseGossipAddr": c.AdvertiseGossipAddr} {
		if a == "" {
			continue
		}
		if err := validAdvertised(a, name == "AdvertiseGossipAddr"); err != nil {
			return fmt.Errorf("cluster: %s %q: %w", name, a, err)
		}
	}
	if c.AdminAddr != "" {
		if _, _, err := net.SplitHostPort(c.AdminAddr); err != nil {
			return fmt.Errorf("cluster: AdminAddr %q: %w", c.AdminAddr, err)
		}
	}
	if c.Gossip != "lan" && c.Gossip != "local" {
		return fmt.Errorf("cluster: Gossip %q: want \"lan\" or \"local\"", c.Gossip)
	}
	if len(c.GossipKeys) > 0 {
		if err := validGossipKeys(c.GossipKeys); err != nil {
			return err
		}
	}
	if err := c.Retry.validate(); err != nil {
		return err
	}
	pc := c.Placement
	pc.NodeID = c.NodeID
	if err := pc.Validate(); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	hc := c.Host
	hc.Shards = int(c.Placement.Shards)
	if err := hc.Validate(); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	return nil
}

// validAdvertised checks an advertised address: a host (an IP when ip is
// set, as memberlist requires) and a port other nodes can dial, so
// neither may be empty or 0.
func validAdvertised(a string, ip bool) error {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return err
	}
	if host == "" {
		return errors.New("no host")
	}
	if ip && net.ParseIP(host) == nil {
		return errors.New("host must be an IP address")
	}
	p, err := strconv.Atoi(port)
	if err != nil || p <= 0 || p > 65535 {
		return errors.New("port must be in 1..65535")
	}
	return nil
}
