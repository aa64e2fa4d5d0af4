package chaos

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"
)

// echo serves line echoes until closed.
func echo(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); c.Close() }()
		}
	}()
	return ln
}

func TestTCPProxy(t *testing.T) {
	srv := echo(t)
	p, err := startTCPProxy(srv.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
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
	p.Partition()
	if err := roundTrip("b", 200*time.Millisecond); err == nil {
		t.Fatal("answer through a partition")
	}
	p.Heal()
	// The stalled line arrives after the heal: bytes were held, not lost.
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if line, err := rd.ReadString('\n'); err != nil || line != "b\n" {
		t.Fatalf("after heal: %q %v", line, err)
	}

	// With the server gone, a new connection is closed at once.
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
	c.Close()
	if err := p.Close(); err == nil {
		t.Fatal("second Close accepted")
	}
}
