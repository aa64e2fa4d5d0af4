package cluster

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"reflect"
	"strconv"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/internal/configerr"
	"github.com/ordo-actors/ordo/ordotls"
	"github.com/ordo-actors/ordo/persistence"
	"github.com/ordo-actors/ordo/placement"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/trace"
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
	// EtcdTLS secures the connections to etcd: its RootCAs verify etcd's
	// certificate (nil RootCAs: the system's), its certificate is the
	// client certificate etcd may require. EtcdEndpoints must then be
	// https:// URLs (or host:port); an http:// one is refused, since it
	// would silently run in plaintext. etcd's transport.TLSInfo
	// ClientConfig builds one from PEM files, re-reading the certificate
	// at each handshake. Nil: plaintext for http:// endpoints (a warning
	// is logged when one is not on loopback), the system's CAs for
	// https:// ones. Ignored when Etcd is set, as are the two below.
	EtcdTLS *tls.Config
	// EtcdUsername authenticates to etcd when its auth is enabled: a user
	// with read and write access to the cluster's prefix. Requires
	// EtcdPassword.
	EtcdUsername string
	// EtcdPassword is EtcdUsername's password. Read it from a file or the
	// environment, never a command-line flag; ordo never logs it.
	EtcdPassword string
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
	// TLS secures the transport with mutual TLS (TLS 1.3): the node's
	// listener requires a client certificate issued by one of the
	// source's CAs, and its calls to other nodes present its certificate
	// and verify theirs against the same CAs and the address dialed. The
	// certificate must therefore be valid for server and client
	// authentication and name the host of the node's advertised remote
	// address. ordotls.Load reads it from files and re-reads them when
	// they change; ordotls.NewMaterial and a throw-away ordotls.CA give
	// fixed material. The node knows each caller by its certificate:
	// a node certificate (valid for server authentication) makes it a
	// node, any other an external client, each named by its subject
	// common name; handlers see it (actors.Context.Caller), and clients
	// may not send the messages kinds declare internal (actors.Internal).
	TLS ordotls.Source
	// Insecure runs the transport in plaintext: anyone who can reach the
	// port can call any entity, internal messages (actors.Internal)
	// included: callers are actors.CallerUnknown and the host trusts them
	// (actors.HostConfig.TrustUnauthenticated is set). Traffic can be
	// read and altered on the way. Start logs a warning. It excludes TLS,
	// and a config must set one of the two: Validate refuses one that sets
	// neither.
	Insecure bool
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
	// /readyz, /metrics; see Node.Handler) listens; "" disables it. On a
	// loopback address it needs no protection. Bound to any other address
	// it must be protected: Start refuses it unless AdminTLS, TLS or
	// AdminToken is set.
	AdminAddr string
	// AdminTLS serves the admin endpoint over TLS with the source's
	// certificate. A client certificate is verified when presented but
	// not required, so that probes of /healthz and /readyz need none.
	// Off loopback and without AdminToken, every other path requires a
	// client certificate that verifies against the source's CAs. Default
	// nil: plain HTTP on a loopback address, the node's TLS on any other.
	AdminTLS ordotls.Source
	// AdminToken, when set, is a bearer token ("Authorization: Bearer
	// <token>", at least 16 bytes) the admin endpoint requires of every
	// request but /healthz and /readyz; a request without it, or with
	// another, is answered 401. Read it from a file, never a command-line
	// flag. It also guards Handler when mounted on a server of the
	// caller's. The nodes of a cluster must share one token: a node's
	// dashboard reads the other nodes' admin endpoints with its own (and
	// only those of nodes that match their etcd registration).
	AdminToken string
	// Pprof serves net/http/pprof under /debug/pprof/ on the admin
	// endpoint. With AdminToken set, pprof requires the token, on any
	// address, even with a client certificate; without one, Start refuses
	// Pprof unless the admin endpoint is bound to loopback.
	Pprof bool
	// Placement configures shards, the lease and handoffs. Its NodeID,
	// RemoteAddr and GossipAddr are filled in by the node.
	Placement placement.Config
	// Host configures the entity runtime. Its Shards is set to
	// Placement.Shards, its Tracer when TracerProvider is set, and its
	// Logger, if nil, to Logger; the host's dependencies (store, router,
	// lease) are the node's own.
	Host actors.HostConfig
	// TracerProvider, when set, turns OpenTelemetry tracing on: spans of
	// the calls the node routes ("ordo.call") and each of their attempts
	// ("ordo.attempt"), and, through Host.Tracer, of entity handling,
	// continuations, Saves and store calls (see package actors). A span's
	// context travels in the envelope's metadata (W3C traceparent) to
	// other nodes and entities, so one client call and everything it leads
	// to are one trace. The node's tracers carry its ID as the scope
	// attribute "ordo.node". Default nil: no tracing, at the cost of a nil
	// check per call.
	TracerProvider trace.TracerProvider
	// Retry is how calls are retried.
	Retry RetryPolicy
	// Logger receives the node's logs, its etcd client's included.
	// Default slog.Default().
	Logger *slog.Logger
	// Faults is the node's fault seam (see Faults): nil in production; a
	// test harness sets it to pause, partition or crash the node. It is
	// also the placement agent's (Placement.Faults is not used).
	Faults Faults
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

// Validate reports the first invalid setting; the error wraps
// ErrInvalidConfig.
func (c *Config) Validate() error {
	if err := c.validate(); err != nil {
		return invalidConfig(err)
	}
	return nil
}

// Validate reports the first invalid setting.
func (c *Config) validate() error {
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
	if err := requireTLSChoice(c.TLS, c.Insecure); err != nil {
		return err
	}
	if err := checkEtcdSecurity(c.EtcdEndpoints, c.EtcdTLS, c.EtcdUsername, c.EtcdPassword); c.Etcd == nil && err != nil {
		return err
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
	if err := nilSource("AdminTLS", c.AdminTLS); err != nil {
		return err
	}
	if c.AdminToken != "" && len(c.AdminToken) < minAdminToken {
		return fmt.Errorf("cluster: AdminToken is %d bytes, want at least %d", len(c.AdminToken), minAdminToken)
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
	hc.Shards = c.Placement.Shards
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

// errNoTLSChoice refuses a config that sets neither TLS nor Insecure.
var errNoTLSChoice = errors.New("cluster: set TLS (mutual TLS, see package ordotls) or Insecure (plaintext: anyone who can reach the port can call any entity)")

// requireTLSChoice checks the transport security settings of a Config or
// ClientConfig: TLS and Insecure exclude each other, and a config must set
// one of them.
func requireTLSChoice(src ordotls.Source, insecure bool) error {
	if err := nilSource("TLS", src); err != nil {
		return err
	}
	if src != nil && insecure {
		return errors.New("cluster: TLS and Insecure are both set")
	}
	if src == nil && !insecure {
		return errNoTLSChoice
	}
	return nil
}

// nilSource refuses a Source that is a nil pointer: a nil
// *ordotls.Reloader from a failed Load, stored unchecked, is a non-nil
// Source that cannot serve.
func nilSource(field string, src ordotls.Source) error {
	if src == nil {
		return nil
	}
	if v := reflect.ValueOf(src); v.Kind() == reflect.Pointer && v.IsNil() {
		return errors.New("cluster: " + field + " is a nil " + v.Type().String() + " (was its loading error ignored?)")
	}
	return nil
}

// plaintextWarning is logged once by every node and client whose
// transport runs without TLS.
const plaintextWarning = "transport without TLS: anyone who can reach the port can call any entity"

// warnPlaintext logs plaintextWarning unless src is set.
func warnPlaintext(log *slog.Logger, src ordotls.Source) {
	if src == nil {
		log.Warn(plaintextWarning, "setting", "Insecure")
	}
}

// invalidConfig makes a Validate error: err, also matching ErrInvalidConfig.
func invalidConfig(err error) error { return configerr.Wrap(ErrInvalidConfig, err) }
