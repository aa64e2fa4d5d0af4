package placement_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ordo-actors/ordo/etcdembed"
	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/ordo-actors/ordo/persistence"
	"github.com/ordo-actors/ordo/persistence/memory"
	"github.com/ordo-actors/ordo/placement"
)

// pickShard returns some shard owned by n and its epoch.
func pickShard(t *testing.T, n *placement.Agent) (uint32, int64) {
	t.Helper()
	for s, e := range n.Owned() {
		return s, e
	}
	t.Fatalf("%s owns no shard", n.ID())
	return 0, 0
}

// waitTakenOver waits until n owns shard and returns its epoch, which must
// be above old.
func waitTakenOver(t *testing.T, c *clientv3.Client, n *placement.Agent, prefix string, shard uint32, old int64) int64 {
	t.Helper()
	var epoch int64
	testutil.Eventually(t, 20*time.Second, 10*time.Millisecond, func() error {
		e, ok := n.Owned()[shard]
		if !ok {
			return fmt.Errorf("%s does not own shard %d yet", n.ID(), shard)
		}
		epoch = e
		return nil
	})
	if epoch <= old {
		t.Fatalf("new epoch %d not above old %d", epoch, old)
	}
	return epoch
}

// checkSelfFenced verifies the stale owner dropped every shard before its
// lease expired in etcd (lostAt before the key was seen deleted).
func checkSelfFenced(t *testing.T, host *recHost, n *placement.Agent, owned map[uint32]int64) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, 5*time.Millisecond, func() error {
		if n.Valid() {
			return errors.New("paused node still valid")
		}
		if host.lostCount() == 0 {
			return errors.New("Lost not called")
		}
		return nil
	})
	if len(n.Owned()) != 0 {
		t.Fatalf("paused node still owns %d shards", len(n.Owned()))
	}
	if len(host.activeCopy()) != 0 {
		t.Fatalf("host still runs %d shards", len(host.activeCopy()))
	}
	host.mu.Lock()
	defer host.mu.Unlock()
	for s := range owned {
		if _, ok := host.lostAt[s]; !ok {
			t.Fatalf("shard %d not reported lost", s)
		}
	}
}

// checkLostBeforeExpiry verifies that the host dropped shard before etcd
// deleted its key (the old lease expired). deadline, when set, is the
// validity deadline read before the pause.
func checkLostBeforeExpiry(t *testing.T, host *recHost, w *shardWatcher, prefix string, shard uint32, deadline time.Time) {
	t.Helper()
	host.mu.Lock()
	lostAt := host.lostAt[shard]
	host.mu.Unlock()
	deletedAt, ok := w.deletedAt(fmt.Sprintf("%s/shards/%d", prefix, shard))
	if !ok {
		t.Fatalf("deletion of shard %d not observed", shard)
	}
	if !lostAt.Before(deletedAt) {
		t.Fatalf("shard %d: Lost at %v, after etcd deleted the key at %v", shard, lostAt, deletedAt)
	}
	t.Logf("shard %d dropped %v before the lease expired in etcd", shard, deletedAt.Sub(lostAt))
	if !deadline.IsZero() {
		t.Logf("Lost %v after the validity deadline read before the pause", lostAt.Sub(deadline))
	}
}

// checkStaleWriteFenced plays the new owner fencing the store at newEpoch,
// then the stale owner writing at oldEpoch.
func checkStaleWriteFenced(t *testing.T, shard uint32, oldEpoch, newEpoch int64) {
	t.Helper()
	ctx := context.Background()
	store := memory.New()
	defer store.Close()
	if err := store.Fence(ctx, shard, oldEpoch); err != nil {
		t.Fatal(err)
	}
	if err := store.Fence(ctx, shard, newEpoch); err != nil {
		t.Fatal(err)
	}
	out, err := store.Save(ctx, []persistence.Record{{Kind: "account", ID: "alice", Shard: shard, Epoch: oldEpoch, Data: []byte("stale")}})
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(out[shard], persistence.ErrFenced) {
		t.Fatalf("stale save at epoch %d after fence %d: %v, want ErrFenced", oldEpoch, newEpoch, out[shard])
	}
}

func TestPausedOwnerSelfFences(t *testing.T) {
	srv := startEtcd(t)
	const prefix = "/ordo/pause"
	obs := newClient(t, srv.Endpoints()...)
	w := watchShards(t, obs, prefix)
	h := &history{}
	ha, hb := newRecHost("a", h), newRecHost("b", h)
	acfg, ka := withKeepalives(testConfig("a", prefix))
	a := startNode(t, acfg, newClient(t, srv.Endpoints()...), ha)
	b := startNode(t, testConfig("b", prefix), newClient(t, srv.Endpoints()...), hb)
	live := []string{"a", "b"}
	a.SetLive(live)
	b.SetLive(live)
	nodes := []*placement.Agent{a, b}
	testutil.Eventually(t, 20*time.Second, 20*time.Millisecond, func() error { return settled(256, nodes, live) })

	shard, oldEpoch := pickShard(t, a)
	owned := a.Owned()
	oldLease := a.Lease()
	deadline := a.Deadline()

	// Pause a: no more keepalives. memberlist would then declare it dead.
	ka.suspend(true)
	b.SetLive([]string{"b"})
	checkSelfFenced(t, ha, a, owned)
	newEpoch := waitTakenOver(t, obs, b, prefix, shard, oldEpoch)
	checkLostBeforeExpiry(t, ha, w, prefix, shard, deadline)
	testutil.Eventually(t, 20*time.Second, 20*time.Millisecond, func() error {
		if got := len(b.Owned()); got != 256 {
			return fmt.Errorf("b owns %d shards", got)
		}
		return nil
	})
	// etcd deleted a's keys only when its lease expired, after a stopped.
	resp, err := obs.TimeToLive(context.Background(), oldLease)
	if err != nil {
		t.Fatal(err)
	}
	if resp.TTL != -1 {
		t.Fatalf("old lease still alive: ttl %d", resp.TTL)
	}

	// a resumes and tries to write with its old epoch: fenced.
	ka.suspend(false)
	checkStaleWriteFenced(t, shard, oldEpoch, newEpoch)
	// It rejoins under a new lease, never the old one.
	testutil.Eventually(t, 20*time.Second, 20*time.Millisecond, func() error {
		if !a.Valid() {
			return errors.New("a has no valid session")
		}
		if a.Lease() == oldLease {
			return errors.New("a kept its old lease")
		}
		if _, ok := b.Table().Node("a"); !ok {
			return errors.New("a not registered again")
		}
		return nil
	})
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error { return w.matches(obs, prefix) })
	w.check(t)
}

func TestPartitionedOwnerSelfFencesAndRejoins(t *testing.T) {
	srv := startEtcd(t)
	const prefix = "/ordo/partition"
	px, err := etcdembed.StartProxy(srv.Endpoints()[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = px.Close() })
	obs := newClient(t, srv.Endpoints()...)
	w := watchShards(t, obs, prefix)
	h := &history{}
	ha, hb := newRecHost("a", h), newRecHost("b", h)
	a := startNode(t, testConfig("a", prefix), newClient(t, px.Endpoint()), ha)
	b := startNode(t, testConfig("b", prefix), newClient(t, srv.Endpoints()...), hb)
	live := []string{"a", "b"}
	a.SetLive(live)
	b.SetLive(live)
	nodes := []*placement.Agent{a, b}
	testutil.Eventually(t, 20*time.Second, 20*time.Millisecond, func() error { return settled(256, nodes, live) })

	shard, oldEpoch := pickShard(t, a)
	owned := a.Owned()
	oldLease := a.Lease()

	px.Partition()
	b.SetLive([]string{"b"})
	checkSelfFenced(t, ha, a, owned)
	newEpoch := waitTakenOver(t, obs, b, prefix, shard, oldEpoch)
	testutil.Eventually(t, 20*time.Second, 20*time.Millisecond, func() error {
		if got := len(b.Owned()); got != 256 {
			return fmt.Errorf("b owns %d shards", got)
		}
		return nil
	})
	checkLostBeforeExpiry(t, ha, w, prefix, shard, time.Time{})
	checkStaleWriteFenced(t, shard, oldEpoch, newEpoch)

	// Heal: a rejoins with a new lease and, once b sees it live again,
	// takes its shards back through graceful handoffs.
	px.Heal()
	b.SetLive(live)
	testutil.Eventually(t, 30*time.Second, 20*time.Millisecond, func() error {
		if a.Lease() == 0 || a.Lease() == oldLease {
			return fmt.Errorf("a lease %x (old %x)", int64(a.Lease()), int64(oldLease))
		}
		return settled(256, nodes, live)
	})
	if e := a.Owned()[shard]; e <= newEpoch {
		t.Fatalf("shard %d back on a at epoch %d, not above %d", shard, e, newEpoch)
	}
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error { return w.matches(obs, prefix) })
	w.check(t)
}
