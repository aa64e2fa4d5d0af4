package etcdembed_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/ordo-actors/ordo/etcdembed"
	"github.com/ordo-actors/ordo/internal/testutil"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// Idle peer HTTP connections between closed members (see the
		// placement package's TestMain).
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreAnyFunction("net/http.(*connReader).backgroundRead"),
		goleak.IgnoreAnyFunction("net/http.(*conn).serve"),
	)
}

func client(t *testing.T, eps ...string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func put(c *clientv3.Client, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	_, err := c.Put(ctx, "k", "v")
	return err
}

// stopLeader starts a 3-member cluster, stops its leader with stop and
// waits until another member leads and takes writes.
func stopLeader(t *testing.T, ctx context.Context, stop func(cl *etcdembed.Cluster, i int)) (cl *etcdembed.Cluster, c *clientv3.Client, leader int) {
	t.Helper()
	cl, err := etcdembed.StartCluster(ctx, etcdembed.ClusterConfig{Dir: t.TempDir(), UnsafeNoFsync: true, Logger: zap.NewNop(), TickMs: 50, ElectionMs: 500})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	if cl.Size() != 3 {
		t.Fatalf("size %d", cl.Size())
	}
	c = client(t, cl.Endpoints()...)
	if err := put(c, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		if leader = cl.Leader(); leader < 0 {
			return errors.New("no leader")
		}
		return nil
	})
	stop(cl, leader)
	if cl.Running(leader) {
		t.Fatal("stopped member still running")
	}
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		if l := cl.Leader(); l < 0 || l == leader {
			return fmt.Errorf("leader %d", l)
		}
		return put(c, time.Second)
	})
	return cl, c, leader
}

func TestClusterKillRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, c, leader := stopLeader(t, ctx, (*etcdembed.Cluster).Kill)
	// Without quorum writes fail; with it back they succeed.
	other := (leader + 1) % 3
	cl.Kill(other)
	if err := put(c, 500*time.Millisecond); err == nil {
		t.Fatal("write succeeded without quorum")
	}
	if err := cl.Restart(ctx, leader); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error { return put(c, time.Second) })
	if err := cl.Restart(ctx, other); err != nil {
		t.Fatal(err)
	}
}

func TestProxyPartition(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := etcdembed.Start(ctx, etcdembed.Config{Dir: t.TempDir(), UnsafeNoFsync: true, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	px, err := etcdembed.StartProxy(srv.Endpoints()[0])
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = px.Close() }()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{px.Endpoint()}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }() // before the proxy closes
	if err := put(c, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	px.Partition()
	if err := put(c, 300*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("write through a partition: %v", err)
	}
	px.Heal()
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error { return put(c, time.Second) })
	px.Delay(50 * time.Millisecond)
	start := time.Now()
	if err := put(c, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Fatalf("delayed write took only %v", d)
	}
	px.Delay(0)
}

// TestProxyToDeadTargetRefuses checks that the proxy closes a connection
// whose target cannot be reached, as a dead host would refuse it, instead
// of leaving it open and silent.
func TestProxyToDeadTargetRefuses(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	_ = ln.Close()
	px, err := etcdembed.StartProxy(dead)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = px.Close() }()
	conn, err := net.Dial("tcp", strings.TrimPrefix(px.Endpoint(), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	// The deadline only keeps a broken proxy from hanging the test.
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = conn.Read(make([]byte, 1))
	var ne net.Error
	if err == nil || errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("read from a proxied connection to a dead target: %v, want it closed", err)
	}
}

func TestClusterCrashRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, c, leader := stopLeader(t, ctx, (*etcdembed.Cluster).Crash)
	if err := cl.Restart(ctx, leader); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error { return put(c, time.Second) })
}
