package etcdembed

import (
	"fmt"
	"net/url"
	"time"

	"github.com/ordo-actors/ordo/internal/netproxy"
)

// Proxy is a TCP proxy (internal/netproxy) in front of one etcd client
// URL. A client given Endpoint() instead of the member's URL can be
// partitioned from etcd and healed, or slowed down.
//
// A connection whose target cannot be dialed (the member is down) is
// closed at once, as a dead host refuses it; it is never left open and
// silent, which a client would take for a live but mute server.
//
// Safe for concurrent use.
type Proxy struct {
	p        *netproxy.Proxy
	endpoint string
}

// StartProxy listens on a free loopback port and forwards to target (an
// http:// client URL).
func StartProxy(target string) (*Proxy, error) {
	to, err := url.Parse(target)
	if err != nil {
		return nil, fmt.Errorf("etcdembed: proxy target: %w", err)
	}
	if to.Host == "" {
		return nil, fmt.Errorf("etcdembed: proxy target %q has no host", target)
	}
	p, err := netproxy.Listen(to.Host, netproxy.Options{})
	if err != nil {
		return nil, fmt.Errorf("etcdembed: %w", err)
	}
	scheme := to.Scheme
	if scheme == "" {
		scheme = "http"
	}
	return &Proxy{p: p, endpoint: scheme + "://" + p.Addr()}, nil
}

// Endpoint returns the proxy's URL, to give to an etcd client.
func (p *Proxy) Endpoint() string { return p.endpoint }

// Partition stalls all traffic in both directions: open connections stay
// up but deliver nothing until Heal, as TCP behaves across a network
// partition (bytes are held, not lost; the peers' keepalive timeouts close
// the connections). New connections are accepted and stall too. Dropping
// bytes instead would corrupt the HTTP/2 framing of live connections,
// which gRPC then keeps reusing and failing long after the fault ends.
func (p *Proxy) Partition() { p.p.Partition() }

// Heal ends a Partition.
func (p *Proxy) Heal() { p.p.Heal() }

// Delay adds latency to traffic in both directions: each chunk of bytes
// is delivered d after the proxy read it. 0 removes it.
func (p *Proxy) Delay(d time.Duration) { p.p.Delay(d) }

// Close stops accepting, cuts every proxied connection and waits for the
// proxy's goroutines. Later calls return an error.
func (p *Proxy) Close() error { return p.p.Close() }
