package etcdembed

import (
	"fmt"
	"net/url"
	"time"

	"go.etcd.io/etcd/pkg/v3/proxy"
	"go.uber.org/zap"
)

// Proxy is a TCP proxy (go.etcd.io/etcd/pkg/v3/proxy) in front of one etcd
// client URL. A client given Endpoint() instead of the member's URL can be
// partitioned from etcd and healed, or slowed down. Safe for concurrent use.
type Proxy struct {
	srv      proxy.Server
	endpoint string
}

// StartProxy listens on a free loopback port and forwards to target (an
// http:// client URL). logger may be nil (silent).
func StartProxy(target string, logger *zap.Logger) (*Proxy, error) {
	to, err := url.Parse(target)
	if err != nil {
		return nil, fmt.Errorf("etcdembed: proxy target: %w", err)
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	ports, err := freePorts(1)
	if err != nil {
		return nil, err
	}
	from := url.URL{Scheme: "tcp", Host: fmt.Sprintf("127.0.0.1:%d", ports[0])}
	srv := proxy.NewServer(proxy.ServerConfig{Logger: logger, From: from, To: *to})
	select {
	case <-srv.Ready():
	case err := <-srv.Error():
		_ = srv.Close()
		return nil, fmt.Errorf("etcdembed: proxy: %w", err)
	case <-time.After(10 * time.Second):
		_ = srv.Close()
		return nil, fmt.Errorf("etcdembed: proxy to %s did not start", target)
	}
	// The proxy reports dial and copy errors on a 16-slot channel and
	// blocks its accept loop once that is full: drain it.
	go func() {
		for {
			select {
			case <-srv.Error():
			case <-srv.Done():
				return
			}
		}
	}()
	return &Proxy{srv: srv, endpoint: fmt.Sprintf("http://127.0.0.1:%d", ports[0])}, nil
}

// Endpoint returns the proxy's URL, to give to an etcd client.
func (p *Proxy) Endpoint() string { return p.endpoint }

// Partition stalls all traffic in both directions: open connections stay
// up but deliver nothing until Heal, as TCP behaves across a network
// partition (bytes are held, not lost; the peers' keepalive timeouts close
// the connections). Dropping bytes instead (Server().BlackholeTx) corrupts
// the HTTP/2 framing of live connections, which gRPC then keeps reusing and
// failing with PROTOCOL_ERROR long after the blackhole ends.
func (p *Proxy) Partition() {
	p.srv.PauseTx()
	p.srv.PauseRx()
}

// Heal ends a Partition.
func (p *Proxy) Heal() {
	p.srv.UnpauseTx()
	p.srv.UnpauseRx()
}

// Delay adds latency to traffic in both directions; 0 removes it.
func (p *Proxy) Delay(d time.Duration) {
	if d == 0 {
		p.srv.UndelayTx()
		p.srv.UndelayRx()
		return
	}
	p.srv.DelayTx(d, 0)
	p.srv.DelayRx(d, 0)
}

// Server returns the underlying proxy for finer faults (pausing accepts,
// one-way blackholes).
func (p *Proxy) Server() proxy.Server { return p.srv }

// Close stops the proxy. It waits until every proxied connection has been
// closed by its ends (the etcd proxy does not cut them): close the clients
// that use the proxy first.
func (p *Proxy) Close() error { return p.srv.Close() }
