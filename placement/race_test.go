package placement_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/ordo-actors/ordo/placement"
)

func TestRaceForShards(t *testing.T) {
	for _, nodes := range []int{2, 3} {
		t.Run(fmt.Sprintf("%d nodes", nodes), func(t *testing.T) { testRace(t, nodes) })
	}
}

func testRace(t *testing.T, count int) {
	srv := startEtcd(t)
	prefix := fmt.Sprintf("/ordo/race%d", count)
	watchClient := newClient(t, srv.Endpoints()...)
	w := watchShards(t, watchClient, prefix)
	h := &history{}
	live := ids(count)

	nodes := make([]*placement.Agent, count)
	hosts := make([]*recHost, count)
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i, id := range live {
		hosts[i] = newRecHost(id, h)
		cfg := testConfig(id, prefix)
		c := newClient(t, srv.Endpoints()...)
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := placement.New(cfg, c, hosts[i])
			if err != nil {
				t.Error(err)
				return
			}
			n.SetLive(live)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := n.Start(ctx); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			nodes[i] = n
			mu.Unlock()
		}()
	}
	wg.Wait()
	for _, n := range nodes {
		if n == nil {
			t.FailNow()
		}
		t.Cleanup(func() { _ = n.Shutdown(context.Background()) })
	}
	testutil.Eventually(t, 30*time.Second, 20*time.Millisecond, func() error { return settled(256, nodes, live) })
	for i, n := range nodes {
		if got, want := hosts[i].activeCopy(), n.Owned(); !equalOwned(got, want) {
			t.Fatalf("%s: host holds %d shards, node owns %d", n.ID(), len(got), len(want))
		}
	}

	// The last node leaves gracefully; the others take its shards.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := nodes[count-1].Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	rest, restLive := nodes[:count-1], live[:count-1]
	for _, n := range rest {
		n.SetLive(restLive)
	}
	testutil.Eventually(t, 30*time.Second, 20*time.Millisecond, func() error { return settled(256, rest, restLive) })

	// Check the histories: etcd's (every revision) and the hosts'.
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error { return w.matches(watchClient, prefix) })
	w.check(t)
	if err := h.checkNoOverlap(); err != nil {
		t.Fatal(err)
	}
	if len(w.owners) != 256 {
		t.Fatalf("watcher sees %d owned shards", len(w.owners))
	}
	t.Logf("%d shard events, %d host events", w.count(), len(h.snapshot()))
}

func equalOwned(a, b map[uint32]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
