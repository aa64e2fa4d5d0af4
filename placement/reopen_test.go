package placement_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/ordo-actors/ordo/placement"
)

// revokeGate holds every LeaseRevoke until its context ends, as etcd does
// with a revoke a follower forwarded to a leader that just died (the
// proposal is lost and never answered), until open is called.
type revokeGate struct {
	mu       sync.Mutex
	isOpen   bool
	attempts int // LeaseRevoke requests issued
	held     int // of which held until their context ended
}

func (g *revokeGate) open() {
	g.mu.Lock()
	g.isOpen = true
	g.mu.Unlock()
}

func (g *revokeGate) counts() (attempts, held int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.attempts, g.held
}

func (g *revokeGate) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if !strings.HasSuffix(method, "/LeaseRevoke") {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	g.mu.Lock()
	g.attempts++
	hold := !g.isOpen
	if hold {
		g.held++
	}
	g.mu.Unlock()
	if hold {
		<-ctx.Done()
		return ctx.Err()
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// TestReopenDoesNotWaitForRevoke checks that a node whose session ended
// opens the next one without waiting for the ended lease's revocation, and
// that the revocation, bounded per attempt and retried, then frees the old
// shard locks so the node takes them again under new epochs.
func TestReopenDoesNotWaitForRevoke(t *testing.T) {
	srv := startEtcd(t)
	gate := &revokeGate{}
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   srv.Endpoints(),
		DialTimeout: 2 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(gate.intercept)},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	obs := newClient(t, srv.Endpoints()...)

	const prefix = "/ordo/reopen"
	cfg := testConfig("a", prefix)
	cfg.Shards = 16
	h := newRecHost("a", &history{})
	cfg, k := withKeepalives(cfg)
	n := startNode(t, cfg, c, h)
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		if got := len(n.Owned()); got != 16 {
			return fmt.Errorf("owns %d shards", got)
		}
		return nil
	})
	before := n.Owned()
	oldLease := n.Lease()

	// End the session: with keepalives suspended its deadline passes.
	k.suspend(true)
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		if n.Lease() != 0 {
			return errors.New("session still open")
		}
		return nil
	})
	if a, _ := gate.counts(); a != 0 {
		t.Fatalf("%d revokes sent while keepalives were suspended", a)
	}
	k.suspend(false)

	// A new session opens and registers while no revoke has got through.
	var newLease clientv3.LeaseID
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		newLease = n.Lease()
		if newLease == 0 || !n.Valid() {
			return errors.New("no new session yet")
		}
		return nil
	})
	if newLease == oldLease {
		t.Fatalf("node kept its old lease %x", int64(oldLease))
	}
	if attempts, held := gate.counts(); held != attempts {
		t.Fatalf("revokes: %d sent, %d held; want the new session opened with no revoke through", attempts, held)
	}
	resp, err := obs.Get(context.Background(), prefix+"/nodes/a")
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || clientv3.LeaseID(resp.Kvs[0].Lease) != newLease {
		t.Fatalf("registry entry %v, want one bound to lease %x", resp.Kvs, int64(newLease))
	}

	// The revoke is bounded per attempt and retried.
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		if a, _ := gate.counts(); a < 2 {
			return fmt.Errorf("%d revoke attempts", a)
		}
		return nil
	})

	// Once revokes get through, the old locks free and the node takes every
	// shard again under its new lease, at higher epochs.
	gate.open()
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		owned := n.Owned()
		if len(owned) != 16 {
			return fmt.Errorf("owns %d shards", len(owned))
		}
		for shard, epoch := range owned {
			if epoch <= before[shard] {
				return fmt.Errorf("shard %d at epoch %d, was %d", shard, epoch, before[shard])
			}
		}
		return nil
	})
	shards, err := obs.Get(context.Background(), prefix+"/shards/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range shards.Kvs {
		if clientv3.LeaseID(kv.Lease) != newLease {
			t.Fatalf("%s bound to lease %x, want %x", kv.Key, kv.Lease, int64(newLease))
		}
	}
	ttl, err := obs.TimeToLive(context.Background(), oldLease)
	if err != nil {
		t.Fatal(err)
	}
	if ttl.TTL != -1 {
		t.Fatalf("old lease %x still alive (ttl %d)", int64(oldLease), ttl.TTL)
	}
	if got := h.lostCount(); got != 1 {
		t.Fatalf("host saw %d Lost calls, want 1", got)
	}
}

// TestRegisterTakesOverOwnPreviousLease checks that Register moves a
// registry entry from the node's previous lease, and only from it.
func TestRegisterTakesOverOwnPreviousLease(t *testing.T) {
	srv := startEtcd(t)
	c := newClient(t, srv.Endpoints()...)
	ctx := context.Background()
	keys, err := placement.NewKeys("/ordo/register")
	if err != nil {
		t.Fatal(err)
	}
	grant := func() clientv3.LeaseID {
		resp, err := c.Grant(ctx, 30)
		if err != nil {
			t.Fatal(err)
		}
		return resp.ID
	}
	l1, l2, l3 := grant(), grant(), grant()
	info := placement.NodeInfo{ID: "a"}
	if err := placement.Register(ctx, c, keys, info, l1, 0); err != nil {
		t.Fatal(err)
	}
	if err := placement.Register(ctx, c, keys, info, l2, 0); !errors.Is(err, placement.ErrNodeIDInUse) {
		t.Fatalf("register under another lease without prev: %v, want ErrNodeIDInUse", err)
	}
	if err := placement.Register(ctx, c, keys, info, l2, l3); !errors.Is(err, placement.ErrNodeIDInUse) {
		t.Fatalf("register with a prev that does not hold the entry: %v, want ErrNodeIDInUse", err)
	}
	if err := placement.Register(ctx, c, keys, info, l2, l1); err != nil {
		t.Fatalf("register taking over the previous lease: %v", err)
	}
	if _, err := c.Revoke(ctx, l1); err != nil {
		t.Fatal(err)
	}
	resp, err := c.Get(ctx, keys.Node("a"))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || clientv3.LeaseID(resp.Kvs[0].Lease) != l2 {
		t.Fatalf("entry %v after revoking the previous lease, want one bound to %x", resp.Kvs, int64(l2))
	}
}
