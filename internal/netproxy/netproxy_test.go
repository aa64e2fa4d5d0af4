package netproxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echoTCP serves echoes until the test ends or the listener is closed.
func echoTCP(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); c.Close() }()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln
}

func TestTCP(t *testing.T) {
	srv := echoTCP(t)
	p, err := Listen(srv.Addr().String(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rd := bufio.NewReader(c)
	roundTrip := func(msg string, wait time.Duration) error {
		if _, err := c.Write([]byte(msg + "\n")); err != nil {
			return err
		}
		_ = c.SetReadDeadline(time.Now().Add(wait))
		_, err := rd.ReadString('\n')
		return err
	}
	if err := roundTrip("a", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if got := p.Stats().Conns; got != 1 {
		t.Fatalf("Conns = %d, want 1", got)
	}
	p.Partition()
	// Nothing comes back through a partition, however long one waits; the
	// short wait only bounds the test (a pass cannot be a false one).
	if err := roundTrip("b", 200*time.Millisecond); err == nil {
		t.Fatal("answer through a partition")
	}
	p.Heal()
	// The stalled line arrives after the heal: bytes were held, not lost.
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if line, err := rd.ReadString('\n'); err != nil || line != "b\n" {
		t.Fatalf("after heal: %q %v", line, err)
	}

	// With the target gone, a new connection is closed at once.
	srv.Close()
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	_ = c2.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c2.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("connection to a dead target: %v, want EOF", err)
	}
	c2.Close()

	// Close ends the live connection too.
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := rd.ReadString('\n'); err == nil {
		t.Fatal("connection alive after Close")
	}
	if err := p.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Close: %v, want ErrClosed", err)
	}
}

// echoUDP answers every datagram with itself until the test ends.
func echoUDP(t *testing.T) *net.UDPConn {
	t.Helper()
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 2048)
		for {
			n, from, err := pc.ReadFromUDP(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteToUDP(buf[:n], from)
		}
	}()
	t.Cleanup(func() { pc.Close(); <-done })
	return pc
}

func TestUDP(t *testing.T) {
	srv := echoUDP(t)
	// The target's TCP side: the UDP proxy shares its port with a TCP one.
	p, err := Listen(srv.LocalAddr().String(), Options{UDP: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("udp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// UDP may drop; a datagram is resent until its echo comes back.
	echoed := func(msg string, tries int) bool {
		buf := make([]byte, 64)
		for i := 0; i < tries; i++ {
			if _, err := c.Write([]byte(msg)); err != nil {
				t.Fatal(err)
			}
			_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
			for {
				n, err := c.Read(buf)
				if err != nil {
					break
				}
				if string(buf[:n]) == msg {
					return true
				}
			}
		}
		return false
	}
	if !echoed("one", 25) {
		t.Fatal("no echo through the proxy")
	}
	if s := p.Stats(); s.Datagrams < 1 {
		t.Fatalf("Datagrams = %d, want ≥ 1", s.Datagrams)
	}
	p.Partition()
	if echoed("two", 3) {
		t.Fatal("echo through a partition")
	}
	if s := p.Stats(); s.Dropped < 3 {
		t.Fatalf("Dropped = %d, want ≥ 3 (one per datagram sent while cut)", s.Dropped)
	}
	p.Heal()
	if !echoed("three", 25) {
		t.Fatal("no echo after heal")
	}
}

func TestListenBadTarget(t *testing.T) {
	if _, err := Listen("no-port", Options{}); err == nil {
		t.Fatal("target without a port accepted")
	}
}

func TestSetTarget(t *testing.T) {
	p, err := Listen("", Options{UDP: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	// No target yet: connections are refused.
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("connection without a target: %v, want EOF", err)
	}
	c.Close()
	if err := p.SetTarget("bad"); err == nil {
		t.Fatal("target without a port accepted")
	}
	srv := echoTCP(t)
	if err := p.SetTarget(srv.Addr().String()); err != nil {
		t.Fatal(err)
	}
	if p.Target() != srv.Addr().String() {
		t.Fatalf("Target() = %q", p.Target())
	}
	c, err = net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("x\n")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || line != "x\n" {
		t.Fatalf("through the new target: %q %v", line, err)
	}
}

// Delay holds each chunk for the delay in each direction: a round trip
// takes at least twice the delay (a lower bound, which slowness cannot
// break).
func TestDelay(t *testing.T) {
	srv := echoTCP(t)
	p, err := Listen(srv.Addr().String(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rd := bufio.NewReader(c)
	const d = 100 * time.Millisecond
	p.Delay(d)
	start := time.Now()
	if _, err := c.Write([]byte("x\n")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := rd.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	if rtt := time.Since(start); rtt < 2*d {
		t.Fatalf("round trip %v through a %v delay each way", rtt, d)
	}
	p.Delay(0)
	if _, err := c.Write([]byte("y\n")); err != nil {
		t.Fatal(err)
	}
	if line, err := rd.ReadString('\n'); err != nil || line != "y\n" {
		t.Fatalf("after removing the delay: %q %v", line, err)
	}
}
