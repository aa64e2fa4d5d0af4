// Package netproxy forwards TCP connections, and optionally UDP datagrams,
// from a loopback port to a target, and can cut that traffic and heal it.
// Tests and the bank chaos orchestrator put one in front of an endpoint to
// partition it from whoever dials the proxy instead.
//
// A partition stalls TCP bytes in both directions (held, not lost, as TCP
// behaves across a partition: the peers' own timeouts decide when to give
// up) and drops UDP datagrams. A TCP connection whose target cannot be
// dialed is closed at once, as a refused connection would be, rather than
// left open and silent.
package netproxy

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// ErrClosed is returned by Close on a proxy already closed.
var ErrClosed = errors.New("netproxy: proxy closed")

// Options configures a Proxy.
type Options struct {
	// UDP also forwards UDP datagrams arriving on the proxy's port (the
	// same number as its TCP port), as gossip protocols such as memberlist
	// need. Replies the target sends back to the proxy's upstream socket
	// are relayed to the datagram's sender.
	UDP bool
	// DialTimeout bounds dialing the target for each TCP connection.
	// Default 2s.
	DialTimeout time.Duration
}

// Stats counts what a proxy forwarded.
type Stats struct {
	// Conns is the number of TCP connections forwarded to the target.
	Conns int64
	// Datagrams is the number of UDP datagrams forwarded to the target;
	// Dropped those dropped by a partition (either direction).
	Datagrams, Dropped int64
}

// Proxy forwards traffic to a target. Safe for concurrent use.
type Proxy struct {
	target string
	opts   Options
	ln     net.Listener
	pc     *net.UDPConn // nil without Options.UDP

	conns, datagrams, dropped atomic.Int64

	mu       sync.Mutex
	cond     *sync.Cond
	paused   bool
	delay    time.Duration
	closed   bool
	open     map[net.Conn]struct{}
	upstream map[string]*net.UDPConn // by sender address
	wg       sync.WaitGroup
}

// Listen starts a proxy on a free loopback port that forwards to target
// (host:port). With target "", the proxy refuses traffic (closes TCP
// connections, drops datagrams) until SetTarget: a server can then be told
// the proxy's address before it binds its own.
func Listen(target string, opts Options) (*Proxy, error) {
	if err := checkTarget(target); err != nil && target != "" {
		return nil, err
	}
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = 2 * time.Second
	}
	p := &Proxy{target: target, opts: opts, open: map[net.Conn]struct{}{}, upstream: map[string]*net.UDPConn{}}
	p.cond = sync.NewCond(&p.mu)
	var err error
	// The UDP port must be the TCP port's number; another process may hold
	// it, so try a few free TCP ports.
	for try := 0; ; try++ {
		if p.ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return nil, fmt.Errorf("netproxy: proxy to %s: %w", target, err)
		}
		if !opts.UDP {
			break
		}
		addr := p.ln.Addr().(*net.TCPAddr)
		p.pc, err = net.ListenUDP("udp", &net.UDPAddr{IP: addr.IP, Port: addr.Port})
		if err == nil {
			break
		}
		_ = p.ln.Close()
		if try == 10 {
			return nil, fmt.Errorf("netproxy: proxy to %s: no port free for both TCP and UDP: %w", target, err)
		}
	}
	p.wg.Add(1)
	go p.accept()
	if p.pc != nil {
		p.wg.Add(1)
		go p.readUDP()
	}
	return p, nil
}

// Addr is the proxy's host:port (TCP, and UDP with Options.UDP).
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target is the address the proxy forwards to ("" before SetTarget).
func (p *Proxy) Target() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.target
}

// SetTarget makes the proxy forward new connections and datagrams to
// target (host:port). Open TCP connections keep their target.
func (p *Proxy) SetTarget(target string) error {
	if err := checkTarget(target); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = target
	for k, u := range p.upstream {
		_ = u.Close()
		delete(p.upstream, k)
	}
	return nil
}

func checkTarget(target string) error {
	if _, _, err := net.SplitHostPort(target); err != nil {
		return fmt.Errorf("netproxy: target %q: %w", target, err)
	}
	return nil
}

// Stats returns the proxy's counters.
func (p *Proxy) Stats() Stats {
	return Stats{Conns: p.conns.Load(), Datagrams: p.datagrams.Load(), Dropped: p.dropped.Load()}
}

// Partition stalls TCP traffic and drops UDP datagrams until Heal.
func (p *Proxy) Partition() {
	p.mu.Lock()
	p.paused = true
	p.mu.Unlock()
}

// Heal ends a Partition; stalled TCP bytes flow again.
func (p *Proxy) Heal() {
	p.mu.Lock()
	p.paused = false
	p.cond.Broadcast()
	p.mu.Unlock()
}

// Delay adds latency to TCP traffic in both directions: each chunk of
// bytes is delivered d after the proxy read it. 0 removes it. Datagrams
// are not delayed.
func (p *Proxy) Delay(d time.Duration) {
	p.mu.Lock()
	p.delay = max(d, 0)
	p.cond.Broadcast()
	p.mu.Unlock()
}

// Partitioned reports whether the proxy is cut.
func (p *Proxy) Partitioned() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paused
}

// Close stops accepting, closes every connection and socket and waits for
// the proxy's goroutines. A second Close returns ErrClosed.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return ErrClosed
	}
	p.closed = true
	p.cond.Broadcast()
	for c := range p.open {
		_ = c.Close()
	}
	for _, u := range p.upstream {
		_ = u.Close()
	}
	p.mu.Unlock()
	err := p.ln.Close()
	if p.pc != nil {
		_ = p.pc.Close()
	}
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
		target := p.Target()
		if target == "" {
			_ = in.Close()
			continue
		}
		out, err := net.DialTimeout("tcp", target, p.opts.DialTimeout)
		if err != nil {
			_ = in.Close()
			continue
		}
		if !p.track(in, out) {
			return
		}
		p.conns.Add(1)
		p.wg.Add(4) // two pipes, each a reader and a writer
		go p.pipe(out, in)
		go p.pipe(in, out)
	}
}

// track registers a connection pair; false (both closed) once closed.
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
		p.open[c] = struct{}{}
	}
	return true
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

// untrack closes and forgets a connection pair.
func (p *Proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		_ = c.Close()
		delete(p.open, c)
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
		// Sleep without the lock, then check again (Delay, Partition or
		// Close may have changed meanwhile).
		p.mu.Unlock()
		time.Sleep(wait)
		p.mu.Lock()
	}
}

// maxDatagram is the largest UDP payload.
const maxDatagram = 65535

// readUDP forwards datagrams from senders to the target, each sender
// through its own upstream socket so that replies can be told apart.
func (p *Proxy) readUDP() {
	defer p.wg.Done()
	buf := make([]byte, maxDatagram)
	for {
		n, from, err := p.pc.ReadFromUDP(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		up, ok := p.upstreamFor(from)
		if !ok {
			return
		}
		if up == nil || p.Partitioned() {
			p.dropped.Add(1)
			continue
		}
		// Counted before the write: the reply may be back before it returns.
		p.datagrams.Add(1)
		_, _ = up.Write(buf[:n])
	}
}

// upstreamFor returns the upstream socket for datagrams from sender,
// creating it (and its reply relay) on first use; nil if the target cannot
// be dialed, false once the proxy is closed.
func (p *Proxy) upstreamFor(sender *net.UDPAddr) (*net.UDPConn, bool) {
	key := sender.String()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, false
	}
	if up := p.upstream[key]; up != nil {
		return up, true
	}
	if p.target == "" {
		return nil, true
	}
	raddr, err := net.ResolveUDPAddr("udp", p.target)
	if err != nil {
		return nil, true
	}
	up, err := net.DialUDP("udp", nil, raddr)
	if err != nil {
		return nil, true
	}
	p.upstream[key] = up
	p.wg.Add(1)
	go p.relay(up, sender)
	return up, true
}

// relay sends the target's replies on up back to sender.
func (p *Proxy) relay(up *net.UDPConn, sender *net.UDPAddr) {
	defer p.wg.Done()
	buf := make([]byte, maxDatagram)
	for {
		n, err := up.Read(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// A refused datagram (ICMP port unreachable: the target is
			// down) reports here; keep relaying.
			continue
		}
		if p.Partitioned() {
			p.dropped.Add(1)
			continue
		}
		_, _ = p.pc.WriteToUDP(buf[:n], sender)
	}
}
