package etcdembed

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Config describes one embedded single-member etcd.
type Config struct {
	// Dir is the data directory (required; a test passes t.TempDir()).
	Dir string
	// Name is the member name; default "ordo".
	Name string
	// ClientURL is where clients connect; default http://127.0.0.1:0 (a
	// free port, see Server.Endpoints for the one chosen).
	ClientURL string
	// PeerURL is the peer listener; default http://127.0.0.1:0.
	PeerURL string
	// MaxRequestBytes bounds one client request; default 8 MiB, so that a
	// 1 MiB entity state fits in one transaction with room to spare.
	MaxRequestBytes uint
	// MaxTxnOps bounds operations in one transaction; default 1024.
	MaxTxnOps uint
	// Slog receives the member's logs; default slog.Default(). Its handler
	// decides what shows. etcd's info messages narrate the member's own
	// workings (raft, snapshots, listeners) and go to debug; its warnings
	// and errors keep their level, except a few expected ones that go to
	// debug too: the errors its serving goroutines log when Close closes
	// their listeners, and two notes it logs at every start about settings
	// that are deliberate here (one port for gRPC and HTTP, the auth token
	// type of a member that never enables auth). A start and a Close
	// therefore log nothing above info.
	Slog *slog.Logger
	// LogLevel, when not "", drops etcd's messages below this level
	// ("debug", "info", "warn", "error") before they reach Slog. Default ""
	// (Slog's handler decides alone).
	LogLevel string
	// UnsafeNoFsync disables fsync: faster, and only for tests.
	UnsafeNoFsync bool
	// Logger, when non-nil, is the zap logger etcd uses instead of Slog
	// (LogLevel is then ignored, and nothing is moved to debug); pass
	// zap.NewNop() to silence the member entirely.
	Logger *zap.Logger
	// TickMs and ElectionMs are the raft heartbeat and election timeouts;
	// defaults 100 and 1000 (etcd's). Tests use shorter ones.
	TickMs, ElectionMs uint
	// ClientTLS, when set, serves clients over TLS only: ClientURL must
	// then be https:// (the default becomes https://127.0.0.1:0), and
	// with ClientTLS.CA set every client must present a certificate
	// issued by it.
	ClientTLS *TLSFiles
	// RootPassword, when set, turns etcd's authentication on once the
	// member serves: a user "root" with this password and the root role
	// is created, then auth is enabled, so that every client must log in
	// (clientv3.Config Username and Password).
	RootPassword string
}

// TLSFiles names the PEM files of a member's client listener.
type TLSFiles struct {
	// CA, when set, is the bundle client certificates must verify
	// against; a client without one is refused. "": no client
	// certificate is asked for.
	CA string
	// Cert and Key are the member's certificate (valid for the client
	// URL's host, for server and client authentication: the member calls
	// itself through its client URL) and its key.
	Cert, Key string
}

// applyCommon copies the settings shared by single members and clusters,
// with ml the logger of this run of the member.
func applyCommon(ec *embed.Config, cfg Config, ml *memberLog) error {
	lg := cfg.Logger
	if lg == nil {
		sl := cfg.Slog
		if sl == nil {
			sl = slog.Default()
		}
		var err error
		if lg, err = ml.logger(sl, cfg.LogLevel); err != nil {
			return err
		}
	}
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(lg)
	// embed.NewConfig leaves this at 0 (etcd's command line sets 300ms),
	// which makes etcd log every request at warn unless debug is enabled.
	ec.WarningUnaryRequestDuration = embed.DefaultWarningUnaryRequestDuration
	if cfg.TickMs != 0 {
		ec.TickMs = cfg.TickMs
	}
	if cfg.ElectionMs != 0 {
		ec.ElectionMs = cfg.ElectionMs
	}
	return nil
}

// Server is a running embedded etcd member. Its methods are safe for
// concurrent use.
type Server struct {
	e     *embed.Etcd
	cfg   Config
	log   *memberLog
	close sync.Once
}

// Start starts a single-member etcd and waits until it serves, ctx ends, or
// it fails.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Dir == "" {
		return nil, errors.New("etcdembed: Config.Dir is required")
	}
	if cfg.Name == "" {
		cfg.Name = "ordo"
	}
	if cfg.ClientURL == "" {
		cfg.ClientURL = "http://127.0.0.1:0"
		if cfg.ClientTLS != nil {
			cfg.ClientURL = "https://127.0.0.1:0"
		}
	}
	if cfg.PeerURL == "" {
		cfg.PeerURL = "http://127.0.0.1:0"
	}
	if cfg.MaxRequestBytes == 0 {
		cfg.MaxRequestBytes = 8 << 20
	}
	if cfg.MaxTxnOps == 0 {
		cfg.MaxTxnOps = 1024
	}
	curl, err := url.Parse(cfg.ClientURL)
	if err != nil {
		return nil, fmt.Errorf("etcdembed: client URL: %w", err)
	}
	purl, err := url.Parse(cfg.PeerURL)
	if err != nil {
		return nil, fmt.Errorf("etcdembed: peer URL: %w", err)
	}
	ec := embed.NewConfig()
	ec.Name = cfg.Name
	ec.Dir = cfg.Dir
	ec.ListenClientUrls = []url.URL{*curl}
	ec.AdvertiseClientUrls = []url.URL{*curl}
	ec.ListenPeerUrls = []url.URL{*purl}
	ec.AdvertisePeerUrls = []url.URL{*purl}
	ec.InitialCluster = ec.InitialClusterFromName(cfg.Name)
	ec.MaxRequestBytes = cfg.MaxRequestBytes
	ec.MaxTxnOps = cfg.MaxTxnOps
	ec.UnsafeNoFsync = cfg.UnsafeNoFsync
	if t := cfg.ClientTLS; t != nil {
		if curl.Scheme != "https" {
			return nil, fmt.Errorf("etcdembed: ClientTLS needs an https:// client URL, not %q", cfg.ClientURL)
		}
		ec.ClientTLSInfo = transport.TLSInfo{CertFile: t.Cert, KeyFile: t.Key, TrustedCAFile: t.CA, ClientCertAuth: t.CA != ""}
	}
	ml := &memberLog{}
	if err := applyCommon(ec, cfg, ml); err != nil {
		return nil, err
	}
	e, err := embed.StartEtcd(ec)
	if err != nil {
		return nil, fmt.Errorf("etcdembed: start: %w", err)
	}
	s := &Server{e: e, cfg: cfg, log: ml}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		s.Close()
		return nil, fmt.Errorf("etcdembed: %w", err)
	case <-ctx.Done():
		s.Close()
		return nil, fmt.Errorf("etcdembed: waiting for the member to serve: %w", ctx.Err())
	case <-time.After(60 * time.Second):
		s.Close()
		return nil, errors.New("etcdembed: member did not become ready within 60s")
	}
	if cfg.RootPassword != "" {
		if err := enableAuth(ctx, s, cfg.RootPassword); err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

// enableAuth creates the root user with password and the root role, then
// enables authentication, through the member's own API (no client: the
// member may require client certificates).
func enableAuth(ctx context.Context, s *Server, password string) error {
	es := s.e.Server
	if _, err := es.UserAdd(ctx, &pb.AuthUserAddRequest{Name: "root", Password: password}); err != nil {
		return fmt.Errorf("etcdembed: adding the root user: %w", err)
	}
	if _, err := es.UserGrantRole(ctx, &pb.AuthUserGrantRoleRequest{User: "root", Role: "root"}); err != nil {
		return fmt.Errorf("etcdembed: granting the root role: %w", err)
	}
	if _, err := es.AuthEnable(ctx, &pb.AuthEnableRequest{}); err != nil {
		return fmt.Errorf("etcdembed: enabling auth: %w", err)
	}
	return nil
}

// Endpoints returns the client URLs the member listens on, with the ports
// actually bound.
func (s *Server) Endpoints() []string {
	scheme := "http://"
	if s.cfg.ClientTLS != nil {
		scheme = "https://"
	}
	var eps []string
	for _, l := range s.e.Clients {
		eps = append(eps, scheme+l.Addr().String())
	}
	return eps
}

// Close stops the member and waits for it to exit. It is idempotent
// (embed.Etcd.Close itself is not: a second call panics).
func (s *Server) Close() {
	s.close.Do(func() {
		s.log.closing.Store(true)
		s.e.Close()
	})
}
