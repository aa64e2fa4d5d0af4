package placement_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/ordo-actors/ordo/placement"
)

func TestRevokeIfExpiring(t *testing.T) {
	srv := startEtcd(t)
	c := newClient(t, srv.Endpoints()...)
	ctx := context.Background()

	// A lease renewed on time is left alone.
	s, err := placement.NewSession(ctx, c, 3*time.Second, 500*time.Millisecond, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	revoked, err := placement.RevokeIfExpiring(ctx, c, s.ID())
	if err != nil || revoked {
		t.Fatalf("healthy lease: revoked %v, err %v", revoked, err)
	}

	// A lease nobody renews is revoked once a renewal is clearly missed.
	g, err := c.Grant(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, 50*time.Millisecond, func() error {
		revoked, err := placement.RevokeIfExpiring(ctx, c, g.ID)
		if err != nil {
			return err
		}
		if !revoked {
			return errors.New("not revoked yet")
		}
		return nil
	})
	ttl, err := c.TimeToLive(ctx, g.ID)
	if err != nil || ttl.TTL != -1 {
		t.Fatalf("lease still alive after revocation: %v %v", ttl, err)
	}
	// Gone leases are not an error.
	if revoked, err := placement.RevokeIfExpiring(ctx, c, g.ID); err != nil || revoked {
		t.Fatalf("gone lease: %v %v", revoked, err)
	}
	if !s.Valid() {
		t.Fatal("healthy session became invalid")
	}
}

func TestRevokeDeadAcceleratesFailover(t *testing.T) {
	srv := startEtcd(t)
	const prefix = "/ordo/revoke"
	live := []string{"a", "b", "c"}
	h := &history{}
	nodes := map[string]*placement.Agent{}
	hosts := map[string]*recHost{}
	suspenders := map[string]*keepalives{}
	for _, id := range live {
		cfg, k := withKeepalives(testConfig(id, prefix))
		suspenders[id] = k
		cfg.LeaseTTL = 3 * time.Second
		cfg.ValidityMargin = time.Second
		hosts[id] = newRecHost(id, h)
		nodes[id] = startNode(t, cfg, newClient(t, srv.Endpoints()...), hosts[id])
		nodes[id].SetLive(live)
	}
	all := []*placement.Agent{nodes["a"], nodes["b"], nodes["c"]}
	testutil.Eventually(t, 20*time.Second, 20*time.Millisecond, func() error { return settled(256, all, live) })

	// Pick a victim; the survivors agree on who revokes it.
	victim := "c"
	survivors := []string{"a", "b"}
	revoker := placement.Revoker(victim, survivors)
	other := survivors[0]
	if other == revoker {
		other = survivors[1]
	}
	oldLease := nodes[victim].Lease()
	suspenders[victim].suspend(true)
	for _, id := range survivors {
		nodes[id].SetLive(survivors)
	}
	// The non-chosen survivor never revokes.
	if ok, err := nodes[other].RevokeDead(context.Background(), victim, oldLease); ok || err != nil {
		t.Fatalf("%s (not the revoker) revoked: %v %v", other, ok, err)
	}
	start := time.Now()
	testutil.Eventually(t, 10*time.Second, 50*time.Millisecond, func() error {
		// A dead mark about another lease than the registration's (a
		// member that does not stand for it) never revokes.
		if ok, err := nodes[revoker].RevokeDead(context.Background(), victim, oldLease+1); ok || err != nil {
			t.Fatalf("revoked for a lease the victim is not registered under: %v %v", ok, err)
		}
		ok, err := nodes[revoker].RevokeDead(context.Background(), victim, oldLease)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("not revoked yet")
		}
		return nil
	})
	t.Logf("lease of %s revoked %v after it stopped renewing", victim, time.Since(start))
	survivorNodes := []*placement.Agent{nodes["a"], nodes["b"]}
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error { return settled(256, survivorNodes, survivors) })
	// The victim notices at its next keepalive or its deadline.
	suspenders[victim].suspend(false)
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		if hosts[victim].lostCount() == 0 {
			return errors.New("victim never told it lost its shards")
		}
		if l := nodes[victim].Lease(); l == oldLease || l == 0 {
			return fmt.Errorf("victim lease %x", int64(l))
		}
		return nil
	})
}

// slowHost refuses releases until allowed, counting handoffs.
type slowHost struct {
	*recHost
	mu       sync.Mutex
	refuse   bool
	refused  int
	releases []time.Time
}

func (s *slowHost) Release(ctx context.Context, shard uint32, epoch int64) error {
	s.mu.Lock()
	refuse := s.refuse
	if refuse {
		s.refused++
	} else {
		s.releases = append(s.releases, time.Now())
	}
	s.mu.Unlock()
	if refuse {
		return errors.New("busy")
	}
	return s.recHost.Release(ctx, shard, epoch)
}

func TestHandoffRateLimitedAndRefusable(t *testing.T) {
	srv := startEtcd(t)
	const prefix = "/ordo/handoff"
	h := &history{}
	ha := &slowHost{recHost: newRecHost("a", h), refuse: true}
	cfgA := testConfig("a", prefix)
	cfgA.HandoffRate = 50
	cfgA.HandoffBurst = 4
	a := startNode(t, cfgA, newClient(t, srv.Endpoints()...), ha)
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		if n := len(a.Owned()); n != 256 {
			return fmt.Errorf("a owns %d", n)
		}
		return nil
	})

	// b joins; a refuses to drain: it keeps every shard.
	b := startNode(t, testConfig("b", prefix), newClient(t, srv.Endpoints()...), newRecHost("b", h))
	live := []string{"a", "b"}
	a.SetLive(live)
	b.SetLive(live)
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		ha.mu.Lock()
		defer ha.mu.Unlock()
		if ha.refused >= 2*cfgA.HandoffBurst {
			return nil
		}
		return fmt.Errorf("%d handoffs refused so far", ha.refused)
	})
	if len(b.Owned()) != 0 || len(a.Owned()) != 256 {
		t.Fatalf("a refused to drain, yet a owns %d and b %d", len(a.Owned()), len(b.Owned()))
	}

	// a drains now: handoffs never exceed burst + rate * elapsed.
	ha.mu.Lock()
	ha.refuse = false
	ha.mu.Unlock()
	start := time.Now()
	testutil.Eventually(t, 30*time.Second, 5*time.Millisecond, func() error {
		ha.mu.Lock()
		n := len(ha.releases)
		ha.mu.Unlock()
		if limit := cfgA.HandoffBurst + int(cfgA.HandoffRate*time.Since(start).Seconds()) + 1; n > limit {
			t.Fatalf("%d handoffs after %v: rate limit %d", n, time.Since(start), limit)
		}
		return settled(256, []*placement.Agent{a, b}, live)
	})
	if err := h.checkNoOverlap(); err != nil {
		t.Fatal(err)
	}
}

func TestSessionEndsWhenLeaseRevoked(t *testing.T) {
	srv := startEtcd(t)
	c := newClient(t, srv.Endpoints()...)
	ctx := context.Background()
	s, err := placement.NewSession(ctx, c, 2*time.Second, 500*time.Millisecond, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !s.Valid() || time.Until(s.Deadline()) <= 0 {
		t.Fatal("new session not valid")
	}
	if _, err := c.Revoke(ctx, s.ID()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("session did not end after its lease was revoked")
	}
	if !errors.Is(s.Err(), placement.ErrLeaseLost) || s.Valid() {
		t.Fatalf("err %v, valid %v", s.Err(), s.Valid())
	}
	if _, err := placement.NewSession(ctx, c, time.Second, time.Second, time.Second); !errors.Is(err, placement.ErrInvalidConfig) {
		t.Fatalf("bad session timers accepted: %v", err)
	}
}
