package placement_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/etcdembed"
	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/ordo-actors/ordo/placement"
)

// safetyHost checks, whenever its node acquires a shard, that no other node
// still holds that shard under a valid session and that the epoch is above
// every epoch seen before for the shard.
type safetyHost struct {
	*recHost
	cluster *chaosCluster
}

func (s *safetyHost) Acquired(shard uint32, epoch int64) {
	s.cluster.checkAcquire(s.id, shard, epoch)
	s.recHost.Acquired(shard, epoch)
}

type chaosCluster struct {
	mu     sync.Mutex
	nodes  map[string]*placement.Agent
	epochs map[uint32]int64
	errs   []error
}

func (c *chaosCluster) checkAcquire(id string, shard uint32, epoch int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for other, n := range c.nodes {
		if other == id || n == nil {
			continue
		}
		if e, ok := n.Holds(shard); ok {
			c.errs = append(c.errs, fmt.Errorf("%s acquired shard %d at epoch %d while %s holds it validly at %d", id, shard, epoch, other, e))
		}
	}
	if epoch <= c.epochs[shard] {
		c.errs = append(c.errs, fmt.Errorf("%s acquired shard %d at epoch %d, not above %d", id, shard, epoch, c.epochs[shard]))
	}
	c.epochs[shard] = epoch
}

// TestChaos pauses and partitions random nodes while the survivors take
// over, then heals everything and checks the histories. Seeded: replay a
// failure with ORDO_SEED.
func TestChaos(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("ORDO_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (replay with ORDO_SEED=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0))

	srv := startEtcd(t)
	const prefix = "/ordo/chaos"
	obs := newClient(t, srv.Endpoints()...)
	w := watchShards(t, obs, prefix)
	h := &history{}
	all := []string{"a", "b", "c"}
	cc := &chaosCluster{nodes: map[string]*placement.Agent{}, epochs: map[uint32]int64{}}
	proxies := map[string]*etcdembed.Proxy{}
	var nodes []*placement.Agent
	suspenders := map[string]*keepalives{}
	for _, id := range all {
		px, err := etcdembed.StartProxy(srv.Endpoints()[0])
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = px.Close() })
		proxies[id] = px
		host := &safetyHost{recHost: newRecHost(id, h), cluster: cc}
		cfg, k := withKeepalives(testConfig(id, prefix))
		suspenders[id] = k
		n := startNode(t, cfg, newClient(t, px.Endpoint()), host)
		cc.mu.Lock()
		cc.nodes[id] = n
		cc.mu.Unlock()
		nodes = append(nodes, n)
	}
	faulty := map[string]string{} // id -> "pause" or "partition"
	setLive := func() {
		var live []string
		for _, id := range all {
			if faulty[id] == "" {
				live = append(live, id)
			}
		}
		for _, n := range nodes {
			n.SetLive(live)
		}
	}
	setLive()
	testutil.Eventually(t, 20*time.Second, 20*time.Millisecond, func() error { return settled(256, nodes, all) })

	for step := 0; step < 8; step++ {
		id := all[rng.IntN(len(all))]
		switch {
		case faulty[id] == "pause":
			suspenders[id].suspend(false)
			delete(faulty, id)
		case faulty[id] == "partition":
			proxies[id].Heal()
			delete(faulty, id)
		case len(faulty) < len(all)-1 && rng.IntN(2) == 0:
			suspenders[id].suspend(true)
			faulty[id] = "pause"
		case len(faulty) < len(all)-1:
			proxies[id].Partition()
			faulty[id] = "partition"
		default:
			continue
		}
		t.Logf("step %d: %s -> %q", step, id, faulty[id])
		setLive()
		// The fault schedule: let the cluster run for a random while
		// (not a synchronisation; the checks below poll).
		<-time.After(time.Duration(200+rng.IntN(2500)) * time.Millisecond)
	}

	// Heal everything: the cluster converges.
	for id, f := range faulty {
		if f == "pause" {
			suspenders[id].suspend(false)
		} else {
			proxies[id].Heal()
		}
		delete(faulty, id)
	}
	setLive()
	testutil.Eventually(t, 60*time.Second, 20*time.Millisecond, func() error {
		for _, n := range nodes {
			if !n.Valid() {
				return fmt.Errorf("%s has no valid session", n.ID())
			}
		}
		return settled(256, nodes, all)
	})
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error { return w.matches(obs, prefix) })
	w.check(t)
	cc.mu.Lock()
	for i, err := range cc.errs {
		if i < 10 {
			t.Error(err)
		}
	}
	cc.mu.Unlock()
	t.Logf("%d shard events, %d host events", w.count(), len(h.snapshot()))
}
