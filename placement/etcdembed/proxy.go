package etcdembed

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"sync"
	"time"

	"go.uber.org/zap"
)

// proxyDialTimeout bounds the proxy's dial of its target for one accepted
// connection.
const proxyDialTimeout = 2 * time.Second

// Proxy is a TCP proxy in front of one etcd client URL. A client given
// Endpoint() instead of the member's URL can be partitioned from etcd and
// healed, or slowed down.
//
// A connection whose target cannot be dialed (the member is down) is
// closed at once, as a dead host refuses it; it is never left open and
// silent, which a client would take for a live but mute server.
// (go.etcd.io/etcd/pkg/v3/proxy, used before, leaves it open.)
//
// Safe for concurrent use.
type Proxy struct {
	ln       net.Listener
	target   string
	endpoint string
	logger   *zap.Logger

	mu     sync.Mutex
	cond   *sync.Cond // signalled when paused, delay or closed change
	paused bool
	delay  time.Duration
	closed bool
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

// StartProxy listens on a free loopback port and forwards to target (an
// http:// client URL). logger may be nil (silent).
func StartProxy(target string, logger *zap.Logger) (*Proxy, error) {
	to, err := url.Parse(target)
	if err != nil {
		return nil, fmt.Errorf("etcdembed: proxy target: %w", err)
	}
	if to.Host == "" {
		return nil, fmt.Errorf("etcdembed: proxy target %q has no host", target)
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("etcdembed: proxy: %w", err)
	}
	p := &Proxy{
		ln:       ln,
		target:   to.Host,
		endpoint: "http://" + ln.Addr().String(),
		logger:   logger,
		conns:    map[net.Conn]struct{}{},
	}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Endpoint returns the proxy's URL, to give to an etcd client.
func (p *Proxy) Endpoint() string { return p.endpoint }

// Partition stalls all traffic in both directions: open connections stay
// up but deliver nothing until Heal, as TCP behaves across a network
// partition (bytes are held, not lost; the peers' keepalive timeouts close
// the connections). New connections are accepted and stall too.
func (p *Proxy) Partition() {
	p.mu.Lock()
	p.paused = true
	p.mu.Unlock()
}

// Heal ends a Partition.
func (p *Proxy) Heal() {
	p.mu.Lock()
	p.paused = false
	p.cond.Broadcast()
	p.mu.Unlock()
}

// Delay adds latency to traffic in both directions: each chunk of bytes
// is delivered d after the proxy read it. 0 removes it.
func (p *Proxy) Delay(d time.Duration) {
	p.mu.Lock()
	p.delay = max(d, 0)
	p.cond.Broadcast()
	p.mu.Unlock()
}

// Close stops accepting, cuts every proxied connection and waits for the
// proxy's goroutines. Later calls return an error.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return errors.New("etcdembed: proxy already closed")
	}
	p.closed = true
	p.cond.Broadcast()
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.DialTimeout("tcp", p.target, proxyDialTimeout)
		if err != nil {
			p.logger.Debug("etcdembed: proxy cannot reach its target; closing the client connection",
				zap.String("target", p.target), zap.Error(err))
			_ = in.Close()
			continue
		}
		if !p.track(in, out) {
			return
		}
		p.wg.Add(4)
		go p.pipe(out, in)
		go p.pipe(in, out)
	}
}

// track registers a connection pair; false (both closed) once the proxy
// is closed.
func (p *Proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		for _, c := range cs {
			_ = c.Close()
		}
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *Proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		_ = c.Close()
		delete(p.conns, c)
	}
}

// chunk is bytes read from one side, with the time they were read.
type chunk struct {
	b  []byte
	at time.Time
}

// pipe copies src to dst through a queue: a reader timestamps what it
// reads, a writer delivers each chunk once the delay has passed and no
// partition holds it. When either side ends, both connections close.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	q := make(chan chunk, 64)
	go func() {
		defer p.wg.Done()
		defer close(q)
		for {
			buf := make([]byte, 32*1024)
			n, err := src.Read(buf)
			if n > 0 {
				q <- chunk{b: buf[:n], at: time.Now()}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range q {
		if !p.waitDeliver(c.at) {
			break
		}
		if _, err := dst.Write(c.b); err != nil {
			break
		}
	}
	p.untrack(dst, src)
	for range q {
		// Drain so the reader, unblocked by the close, can end.
	}
}

// waitDeliver blocks until a chunk read at `at` may be written: no
// partition and the delay elapsed. False when the proxy closed.
func (p *Proxy) waitDeliver(at time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		if p.closed {
			return false
		}
		if p.paused {
			p.cond.Wait()
			continue
		}
		wait := time.Until(at.Add(p.delay))
		if wait <= 0 {
			return true
		}
		// Sleep without the lock, then check again (Delay or Partition may
		// have changed meanwhile).
		p.mu.Unlock()
		time.Sleep(wait)
		p.mu.Lock()
	}
}
