package placement_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/ordo-actors/ordo/placement"
)

// An Acquire repeated under the lease that holds the lock returns the
// lock's epoch; under another lease or node, or without a lease, the
// lock stays taken.
func TestAcquireRepeatedUnderItsLease(t *testing.T) {
	srv := startEtcd(t)
	c := newClient(t, srv.Endpoints()...)
	ctx := context.Background()
	keys, err := placement.NewKeys("/ordo/reacquire")
	if err != nil {
		t.Fatal(err)
	}
	a, err := c.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	epoch, err := placement.Acquire(ctx, c, keys, 1, "n1", a.ID)
	if err != nil {
		t.Fatal(err)
	}
	again, err := placement.Acquire(ctx, c, keys, 1, "n1", a.ID)
	if err != nil || again != epoch {
		t.Fatalf("acquire repeated under its lease: epoch %d, err %v; want %d", again, err, epoch)
	}
	for _, try := range []struct {
		node  string
		lease clientv3.LeaseID
	}{{"n2", b.ID}, {"n1", b.ID}, {"n2", a.ID}, {"n1", 0}} {
		if e, err := placement.Acquire(ctx, c, keys, 1, try.node, try.lease); !errors.Is(err, placement.ErrShardTaken) {
			t.Errorf("acquire by %s under lease %x: epoch %d, err %v; want ErrShardTaken", try.node, try.lease, e, err)
		}
	}
}

// A lock held under the node's session that the node does not own (etcd
// applied its Acquire, the reply was lost) is served, at its epoch, not
// left locked and unserved for as long as the session lives.
func TestMislaidLockIsServed(t *testing.T) {
	srv := startEtcd(t)
	c := newClient(t, srv.Endpoints()...)
	ctx := context.Background()
	const prefix = "/ordo/mislaid"
	const shard = 3
	keys, err := placement.NewKeys(prefix)
	if err != nil {
		t.Fatal(err)
	}
	ghost, err := c.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = c.Revoke(context.Background(), ghost.ID) })
	epoch, err := placement.Acquire(ctx, c, keys, shard, "ghost", ghost.ID)
	if err != nil {
		t.Fatal(err)
	}

	cfg := testConfig("n1", prefix)
	cfg.Shards = 8
	host := newRecHost("n1", &history{})
	n := startNode(t, cfg, c, host)
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		if got := len(n.Owned()); got != int(cfg.Shards)-1 {
			return fmt.Errorf("n1 owns %d shards, want every one but %d", got, shard)
		}
		return nil
	})

	// The lock passes to n1's session as a lost Acquire reply leaves it:
	// held under its lease, unknown to the node.
	key := keys.Shard(shard)
	resp, err := c.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", epoch)).
		Then(clientv3.OpPut(key, "n1", clientv3.WithLease(n.Lease()))).
		Commit()
	if err != nil || !resp.Succeeded {
		t.Fatalf("moving the lock to n1's lease: %v (succeeded %v)", err, resp != nil && resp.Succeeded)
	}
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		if got, ok := n.Owned()[shard]; !ok || got != epoch {
			return fmt.Errorf("n1 owns shard %d: %v at epoch %d, want epoch %d", shard, ok, got, epoch)
		}
		if got, ok := host.activeCopy()[shard]; !ok || got != epoch {
			return fmt.Errorf("the host serves shard %d: %v at epoch %d, want epoch %d", shard, ok, got, epoch)
		}
		return nil
	})
}

// A shard the host gave up (Relinquish) is served again only under a new
// epoch: the reconciler never takes the lock being deleted for a mislaid
// one, however many unlocks are in flight.
func TestRelinquishedShardsComeBackUnderNewEpochs(t *testing.T) {
	srv := startEtcd(t)
	c := newClient(t, srv.Endpoints()...)
	cfg := testConfig("n1", "/ordo/relinquish")
	cfg.Shards = 16
	h := &history{}
	host := newRecHost("n1", h)
	n := startNode(t, cfg, c, host)
	all := func() error {
		if got := len(host.activeCopy()); got != int(cfg.Shards) {
			return fmt.Errorf("the host serves %d of %d shards", got, cfg.Shards)
		}
		return nil
	}
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, all)
	for round := range 10 {
		// The host drops every shard at once, as fenced writes make it.
		active := host.activeCopy()
		host.mu.Lock()
		host.active = map[uint32]int64{}
		host.mu.Unlock()
		for shard, epoch := range active {
			n.Relinquish(shard, epoch)
		}
		testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
			if err := all(); err != nil {
				return fmt.Errorf("round %d: %w", round, err)
			}
			return nil
		})
	}
	last := map[uint32]int64{}
	for _, e := range h.snapshot() {
		if e.kind != "acquired" {
			continue
		}
		if e.epoch <= last[e.shard] {
			t.Errorf("shard %d served at epoch %d after epoch %d", e.shard, e.epoch, last[e.shard])
		}
		last[e.shard] = e.epoch
	}
}

// A node that hands shards off to a node that joins never takes one back:
// the lock it just deleted, which its table may still show under its
// session for a moment, is not one to take back, nor a free shard to
// acquire again.
func TestHandedOffShardsStayHandedOff(t *testing.T) {
	srv := startEtcd(t)
	c := newClient(t, srv.Endpoints()...)
	const prefix = "/ordo/handed-off"
	h := &history{}
	acfg := testConfig("a", prefix)
	acfg.Shards = 256
	a := startNode(t, acfg, c, newRecHost("a", h))
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		return settled(acfg.Shards, []*placement.Agent{a}, []string{"a"})
	})
	bcfg := testConfig("b", prefix)
	bcfg.Shards = acfg.Shards
	live := []string{"a", "b"}
	b := startNode(t, bcfg, c, newRecHost("b", h))
	b.SetLive(live)
	a.SetLive(live)
	testutil.Eventually(t, 20*time.Second, 10*time.Millisecond, func() error {
		return settled(acfg.Shards, []*placement.Agent{a, b}, live)
	})
	if err := h.checkNoOverlap(); err != nil {
		t.Fatal(err)
	}
	acquired := map[uint32]int{}
	for _, e := range h.snapshot() {
		if e.node == "a" && e.kind == "acquired" {
			acquired[e.shard]++
		}
	}
	for s := uint32(0); s < acfg.Shards; s++ {
		if placement.Desired(s, live) == "b" && acquired[s] != 1 {
			t.Errorf("a acquired shard %d, handed off to b, %d times", s, acquired[s])
		}
	}
}
