package placement_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/ordo-actors/ordo/etcdembed"
	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/ordo-actors/ordo/placement"
)

func TestEtcdLeaderAndQuorumLoss(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := etcdembed.StartCluster(ctx, etcdembed.ClusterConfig{
		Dir: t.TempDir(), Members: 3, UnsafeNoFsync: true, Logger: zap.NewNop(), TickMs: 50, ElectionMs: 500,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)

	const prefix = "/ordo/quorum"
	obs := newClient(t, cl.Endpoints()...)
	w := watchShards(t, obs, prefix)
	h := &history{}
	ha, hb := newRecHost("a", h), newRecHost("b", h)
	cfgFor := func(id string) placement.Config {
		c := testConfig(id, prefix)
		c.LeaseTTL = 3 * time.Second
		c.ValidityMargin = 750 * time.Millisecond
		return c
	}
	a := startNode(t, cfgFor("a"), newClient(t, cl.Endpoints()...), ha)
	b := startNode(t, cfgFor("b"), newClient(t, cl.Endpoints()...), hb)
	live := []string{"a", "b"}
	a.SetLive(live)
	b.SetLive(live)
	nodes := []*placement.Agent{a, b}
	testutil.Eventually(t, 20*time.Second, 20*time.Millisecond, func() error { return settled(256, nodes, live) })

	// 1. Kill the leader: sessions survive, ownership does not move.
	ownedA, ownedB := a.Owned(), b.Owned()
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error { return w.matches(obs, prefix) })
	eventsBefore := w.count()
	var leader int
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		if leader = cl.Leader(); leader < 0 {
			return errors.New("no leader")
		}
		return nil
	})
	killed := time.Now()
	cl.Kill(leader)
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		if l := cl.Leader(); l < 0 || l == leader {
			return fmt.Errorf("leader %d", l)
		}
		return nil
	})
	// Wait until both nodes had a keepalive sent after the kill
	// acknowledged: their deadlines then lie beyond killed + TTL - margin.
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		min := killed.Add(3*time.Second - 750*time.Millisecond)
		for _, n := range nodes {
			if !n.Deadline().After(min) {
				return fmt.Errorf("%s: no keepalive acknowledged since the kill (deadline %v)", n.ID(), n.Deadline())
			}
		}
		return nil
	})
	if ha.lostCount() != 0 || hb.lostCount() != 0 {
		t.Fatalf("sessions lost during leader change: a %d, b %d", ha.lostCount(), hb.lostCount())
	}
	if !equalOwned(a.Owned(), ownedA) || !equalOwned(b.Owned(), ownedB) {
		t.Fatal("ownership changed during a leader change")
	}
	if err := w.matches(obs, prefix); err != nil {
		t.Fatal(err)
	}
	if n := w.count() - eventsBefore; n != 0 {
		t.Fatalf("%d shard key events during the leader change", n)
	}
	if err := cl.Restart(ctx, leader); err != nil {
		t.Fatal(err)
	}

	// 2. Kill two members: no quorum. Acquisitions fail with a clear error
	// and the nodes stop serving at their deadlines.
	survivor := (leader + 1) % 3
	var down []int
	for i := 0; i < 3; i++ {
		if i != survivor {
			cl.Kill(i)
			down = append(down, i)
		}
	}
	probe, err := placement.NewKeys("/ordo/quorum-probe")
	if err != nil {
		t.Fatal(err)
	}
	actx, acancel := context.WithTimeout(context.Background(), 2*time.Second)
	_, err = placement.Acquire(actx, obs, probe, 0, "probe", 0)
	acancel()
	if err == nil || !strings.HasPrefix(err.Error(), "placement: acquire shard 0:") {
		t.Fatalf("acquire without quorum: %v", err)
	}
	t.Logf("acquire without quorum: %v", err)
	testutil.Eventually(t, 15*time.Second, 10*time.Millisecond, func() error {
		for i, n := range nodes {
			if n.Valid() || len(n.Owned()) != 0 || []*recHost{ha, hb}[i].lostCount() == 0 {
				return fmt.Errorf("%s still valid or owning %d shards", n.ID(), len(n.Owned()))
			}
		}
		return nil
	})

	// 3. Quorum returns: both nodes open new sessions and own every shard
	// again.
	rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer rcancel()
	if err := cl.Restart(rctx, down[0]); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, 20*time.Millisecond, func() error {
		for _, n := range nodes {
			if !n.Valid() {
				return fmt.Errorf("%s has no session", n.ID())
			}
		}
		return settled(256, nodes, live)
	})
	if err := cl.Restart(rctx, down[1]); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error { return w.matches(obs, prefix) })
	w.check(t)
	if err := h.checkNoOverlap(); err != nil {
		t.Fatal(err)
	}
}
