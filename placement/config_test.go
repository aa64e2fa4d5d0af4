package placement_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/placement"
)

func TestConfigValidate(t *testing.T) {
	base := placement.DefaultConfig()
	base.NodeID = "n1"
	if err := base.Validate(); err != nil {
		t.Fatalf("default config: %v", err)
	}
	local := placement.DefaultLocalConfig()
	local.NodeID = "n1"
	if err := local.Validate(); err != nil {
		t.Fatalf("local config: %v", err)
	}
	cases := map[string]func(c *placement.Config){
		"empty prefix":       func(c *placement.Config) { c.Prefix = "" },
		"relative prefix":    func(c *placement.Config) { c.Prefix = "ordo/x" },
		"trailing slash":     func(c *placement.Config) { c.Prefix = "/ordo/x/" },
		"root prefix":        func(c *placement.Config) { c.Prefix = "/" },
		"whitespace prefix":  func(c *placement.Config) { c.Prefix = "/ordo/a b" },
		"zero shards":        func(c *placement.Config) { c.Shards = 0 },
		"too many shards":    func(c *placement.Config) { c.Shards = placement.MaxShards + 1 },
		"empty node ID":      func(c *placement.Config) { c.NodeID = "" },
		"slash in node ID":   func(c *placement.Config) { c.NodeID = "a/b" },
		"sub-second TTL":     func(c *placement.Config) { c.LeaseTTL = 500 * time.Millisecond },
		"fractional TTL":     func(c *placement.Config) { c.LeaseTTL = 1500 * time.Millisecond },
		"zero margin":        func(c *placement.Config) { c.ValidityMargin = 0 },
		"margin over TTL/2":  func(c *placement.Config) { c.ValidityMargin = 3 * time.Second },
		"keepalive too slow": func(c *placement.Config) { c.KeepAliveInterval = 4 * time.Second },
		"zero handoff rate":  func(c *placement.Config) { c.HandoffRate = 0 },
		"zero concurrency":   func(c *placement.Config) { c.AcquireConcurrency = 0 },
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			c := base
			mutate(&c)
			err := c.Validate()
			if !errors.Is(err, placement.ErrInvalidConfig) {
				t.Fatalf("got %v, want ErrInvalidConfig", err)
			}
			if _, err := placement.New(c, nil, nil); !errors.Is(err, placement.ErrInvalidConfig) {
				t.Fatalf("New: got %v, want ErrInvalidConfig", err)
			}
		})
	}
}

func TestShardCountMismatch(t *testing.T) {
	srv := startEtcd(t)
	c := newClient(t, srv.Endpoints()...)
	h := &history{}
	cfg := testConfig("n1", "/ordo/mismatch")
	startNode(t, cfg, c, newRecHost("n1", h))

	cfg2 := testConfig("n2", "/ordo/mismatch")
	cfg2.Shards = 128
	n2, err := placement.New(cfg2, c, newRecHost("n2", h))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = n2.Start(ctx)
	if !errors.Is(err, placement.ErrShardCountMismatch) {
		t.Fatalf("got %v, want ErrShardCountMismatch", err)
	}
	if !strings.Contains(err.Error(), "256") || !strings.Contains(err.Error(), "128") {
		t.Errorf("error does not name both counts: %v", err)
	}
	if err := n2.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown after a failed Start: %v", err)
	}
	// Nothing of n2 was registered.
	resp, err := c.Get(ctx, "/ordo/mismatch/nodes/n2")
	if err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("n2 left a registry entry: %v %v", resp, err)
	}
}

func TestNodeIDInUse(t *testing.T) {
	srv := startEtcd(t)
	c := newClient(t, srv.Endpoints()...)
	h := &history{}
	startNode(t, testConfig("n1", "/ordo/dup"), c, newRecHost("n1", h))
	n, err := placement.New(testConfig("n1", "/ordo/dup"), c, newRecHost("n1b", h))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := n.Start(ctx); !errors.Is(err, placement.ErrNodeIDInUse) {
		t.Fatalf("got %v, want ErrNodeIDInUse once ctx ended", err)
	}
}

// A node ID registered by a live session makes Start wait, and Start
// succeeds once that session ends (here: the first agent shuts down and
// revokes its lease).
func TestStartWaitsForNodeID(t *testing.T) {
	srv := startEtcd(t)
	c := newClient(t, srv.Endpoints()...)
	h := &history{}
	first, err := placement.New(testConfig("n1", "/ordo/wait"), c, newRecHost("n1", h))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := first.Start(ctx); err != nil {
		t.Fatal(err)
	}
	second, err := placement.New(testConfig("n1", "/ordo/wait"), c, newRecHost("n1b", h))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = second.Shutdown(context.Background()) })
	started := make(chan error, 1)
	changed := second.Changed()
	go func() { started <- second.Start(ctx) }()
	select {
	case err := <-started:
		t.Fatalf("Start returned %v while the node ID was registered", err)
	case <-time.After(300 * time.Millisecond): // it waits; nothing to poll for
	}
	if err := first.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-started; err != nil {
		t.Fatalf("Start after the first session ended: %v", err)
	}
	select {
	case <-changed:
	default:
		t.Fatal("Changed was not signalled when the session opened")
	}
	if !second.Valid() {
		t.Fatal("not valid after Start")
	}
}

func TestUnreachableEndpoints(t *testing.T) {
	// A port that was free a moment ago: nothing listens there.
	srv := startEtcd(t)
	eps := srv.Endpoints()
	srv.Close()
	c := newClient(t, eps...)
	n, err := placement.New(testConfig("n1", "/ordo/unreachable"), c, newRecHost("n1", &history{}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err = n.Start(ctx)
	if err == nil || !errors.Is(err, context.DeadlineExceeded) || !strings.HasPrefix(err.Error(), "placement:") {
		t.Fatalf("got %v, want a placement error wrapping the deadline", err)
	}
	if err := n.Start(ctx); !errors.Is(err, placement.ErrStarted) {
		t.Fatalf("second Start: %v", err)
	}
	if err := n.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}
