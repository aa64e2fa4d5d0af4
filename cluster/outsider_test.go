package cluster_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/cluster"
	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/ordo-actors/ordo/proto/testpb"
)

// Random bytes from an outsider on a node's gossip port (TCP and UDP) and
// admin port never bring it down: afterwards both nodes are still live to
// each other, ready, and answering calls.
func TestOutsiderBytesOnGossipAndAdminPorts(t *testing.T) {
	e := newEnv(t, nil, 8)
	cfg := e.config("n1")
	cfg.AdminAddr = "127.0.0.1:0"
	n1 := e.start(cfg)
	n2 := e.start(e.config("n2"))
	e.converged(n1, n2)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	junk := func(max int) []byte {
		b := make([]byte, 1+rng.IntN(max))
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	targets := []struct{ network, addr string }{
		{"tcp", n1.GossipAddr()}, {"udp", n1.GossipAddr()}, {"tcp", n1.AdminAddr()},
	}
	for _, tg := range targets {
		for i := 0; i < 50; i++ {
			c, err := net.Dial(tg.network, tg.addr)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = c.Write(junk(2048))
			c.Close()
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	testutil.Eventually(t, 20*time.Second, 20*time.Millisecond, func() error {
		for _, n := range []*cluster.Node{n1, n2} {
			if err := n.Readiness(); err != nil {
				return fmt.Errorf("%s (seed %d): %v", n.ID(), seed, err)
			}
		}
		return nil
	})
	for i := 0; i < 8; i++ {
		if _, err := cluster.Call[*testpb.Value](ctx, n2, counter(fmt.Sprintf("o%d", i)), &testpb.Add{Delta: 1}); err != nil {
			t.Fatalf("after outsider bytes (seed %d): %v", seed, err)
		}
	}
	e.converged(n1, n2) // nobody was declared dead: shards did not move
}
