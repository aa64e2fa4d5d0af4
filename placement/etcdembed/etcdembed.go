package etcdembed

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"time"

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
	// LogLevel is etcd's zap log level; default "error".
	LogLevel string
	// UnsafeNoFsync disables fsync: faster, and only for tests.
	UnsafeNoFsync bool
	// Logger, when non-nil, replaces etcd's own logger (LogLevel is then
	// ignored); pass zap.NewNop() to silence the member entirely, e.g. the
	// error lines a member logs while it is being closed.
	Logger *zap.Logger
	// TickMs and ElectionMs are the raft heartbeat and election timeouts;
	// defaults 100 and 1000 (etcd's). Tests use shorter ones.
	TickMs, ElectionMs uint
}

// applyCommon copies the settings shared by single members and clusters.
func applyCommon(ec *embed.Config, cfg Config) {
	if cfg.Logger != nil {
		ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(cfg.Logger)
	}
	if cfg.TickMs != 0 {
		ec.TickMs = cfg.TickMs
	}
	if cfg.ElectionMs != 0 {
		ec.ElectionMs = cfg.ElectionMs
	}
}

// Server is a running embedded etcd member. Its methods are safe for
// concurrent use.
type Server struct {
	e     *embed.Etcd
	cfg   Config
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
	if cfg.LogLevel == "" {
		cfg.LogLevel = "error"
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
	ec.LogLevel = cfg.LogLevel
	ec.UnsafeNoFsync = cfg.UnsafeNoFsync
	applyCommon(ec, cfg)
	e, err := embed.StartEtcd(ec)
	if err != nil {
		return nil, fmt.Errorf("etcdembed: start: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("etcdembed: %w", err)
	case <-ctx.Done():
		e.Close()
		return nil, fmt.Errorf("etcdembed: waiting for the member to serve: %w", ctx.Err())
	case <-time.After(60 * time.Second):
		e.Close()
		return nil, errors.New("etcdembed: member did not become ready within 60s")
	}
	return &Server{e: e, cfg: cfg}, nil
}

// Endpoints returns the client URLs the member listens on, with the ports
// actually bound.
func (s *Server) Endpoints() []string {
	var eps []string
	for _, l := range s.e.Clients {
		eps = append(eps, "http://"+l.Addr().String())
	}
	return eps
}

// Close stops the member and waits for it to exit. It is idempotent
// (embed.Etcd.Close itself is not: a second call panics).
func (s *Server) Close() {
	s.close.Do(s.e.Close)
}
