package chaos

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// cutter is a proxy a fault can stall and heal.
type cutter interface {
	Partition()
	Heal()
}

// tcpProxy forwards TCP connections to a target, for stores that are not
// etcd (the etcd proxies are etcdembed's). Like those, Partition stalls
// bytes in both directions rather than dropping them, and a connection
// whose target cannot be dialed (the server is restarting) is closed at
// once, as a refused connection would be, instead of being left open and
// silent. Safe for concurrent use.
type tcpProxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	cond   *sync.Cond
	paused bool
	closed bool
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

// startTCPProxy listens on a free loopback port and forwards to target
// (host:port).
func startTCPProxy(target string) (*tcpProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("chaos: proxy to %s: %w", target, err)
	}
	p := &tcpProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *tcpProxy) Addr() string { return p.ln.Addr().String() }

func (p *tcpProxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.DialTimeout("tcp", p.target, 2*time.Second)
		if err != nil {
			_ = in.Close()
			continue
		}
		if !p.track(in, out) {
			return
		}
		p.wg.Add(2)
		go p.pipe(out, in)
		go p.pipe(in, out)
	}
}

// track registers a connection pair; false (both closed) once closed.
func (p *tcpProxy) track(cs ...net.Conn) bool {
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

// pipe copies src to dst, holding bytes while partitioned; it closes both
// when either side ends.
func (p *tcpProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	buf := make([]byte, 32*1024)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.waitOpen() {
				break
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	_ = dst.Close()
	_ = src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}

// waitOpen blocks while partitioned; false when the proxy closed.
func (p *tcpProxy) waitOpen() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.paused && !p.closed {
		p.cond.Wait()
	}
	return !p.closed
}

// Partition stalls all traffic until Heal.
func (p *tcpProxy) Partition() {
	p.mu.Lock()
	p.paused = true
	p.mu.Unlock()
}

// Heal ends a Partition.
func (p *tcpProxy) Heal() {
	p.mu.Lock()
	p.paused = false
	p.cond.Broadcast()
	p.mu.Unlock()
}

// Close stops accepting, closes every connection and waits for the
// proxy's goroutines.
func (p *tcpProxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return errors.New("chaos: proxy already closed")
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
