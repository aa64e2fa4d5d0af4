package placement_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/ordo-actors/ordo/placement"
)

// countHost is a ShardRunner that closes full once it holds want shards.
type countHost struct {
	want int
	mu   sync.Mutex
	held map[uint32]bool
	full chan struct{}
}

func newCountHost(want int) *countHost {
	return &countHost{want: want, held: map[uint32]bool{}, full: make(chan struct{})}
}

func (h *countHost) Acquired(shard uint32, epoch int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.held[shard] = true
	if len(h.held) == h.want {
		close(h.full)
	}
}

func (h *countHost) Release(ctx context.Context, shard uint32, epoch int64) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.held, shard)
	return nil
}

func (h *countHost) Lost(shards []uint32) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range shards {
		delete(h.held, s)
	}
}

// BenchmarkAcquireAll measures one node taking all 256 shards of a fresh
// cluster prefix from cold: Start (config check, lease, registration,
// table) until ShardRunner.Acquired has been called for every shard.
//
//	go test -run '^$' -bench AcquireAll -benchtime 20x ./placement/
func BenchmarkAcquireAll(b *testing.B) {
	srv := startEtcd(b)
	c := newClient(b, srv.Endpoints()...)
	for _, conc := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("concurrency=%d", conc), func(b *testing.B) {
			var total time.Duration
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				cfg := testConfig("n1", fmt.Sprintf("/ordo/bench-acquire-%d-%d", conc, i))
				cfg.AcquireConcurrency = conc
				h := newCountHost(256)
				n, err := placement.New(cfg, c, h)
				if err != nil {
					b.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				b.StartTimer()
				start := time.Now()
				if err := n.Start(ctx); err != nil {
					b.Fatal(err)
				}
				select {
				case <-h.full:
				case <-ctx.Done():
					b.Fatal("shards not all acquired")
				}
				total += time.Since(start)
				b.StopTimer()
				_ = n.Shutdown(ctx)
				cancel()
				b.StartTimer()
			}
			b.ReportMetric(float64(256*b.N)/total.Seconds(), "shards/s")
		})
	}
}

// BenchmarkFailover measures the time from the moment a node owning about
// half of 256 shards stops (keepalives suspended) to the moment the other
// node holds all 256, with a 2s lease TTL (DefaultLocalConfig). In
// mode=revoke the dead node's lease is revoked at once (accelerated
// failover as RevokeDead does once a renewal is missed; the detection delay
// is not included). In mode=expire nobody revokes and etcd expires the
// lease after its TTL.
//
//	go test -run '^$' -bench Failover -benchtime 20x ./placement/
func BenchmarkFailover(b *testing.B) {
	srv := startEtcd(b)
	obs := newClient(b, srv.Endpoints()...)
	ca := newClient(b, srv.Endpoints()...)
	cb := newClient(b, srv.Endpoints()...)
	for _, mode := range []string{"revoke", "expire"} {
		b.Run("mode="+mode, func(b *testing.B) {
			var times []time.Duration
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				prefix := fmt.Sprintf("/ordo/bench-failover-%s-%d", mode, i)
				ha, hb := newCountHost(-1), newCountHost(256)
				acfg, ka := withKeepalives(testConfig("a", prefix))
				a, err := placement.New(acfg, ca, ha)
				if err != nil {
					b.Fatal(err)
				}
				bn, err := placement.New(testConfig("b", prefix), cb, hb)
				if err != nil {
					b.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				for _, n := range []*placement.Agent{a, bn} {
					n.SetLive([]string{"a", "b"})
					if err := n.Start(ctx); err != nil {
						b.Fatal(err)
					}
				}
				testutil.Eventually(b, 20*time.Second, 5*time.Millisecond, func() error {
					return settled(256, []*placement.Agent{a, bn}, []string{"a", "b"})
				})
				lease := a.Lease()
				b.StartTimer()
				start := time.Now()
				ka.suspend(true)
				bn.SetLive([]string{"b"})
				if mode == "revoke" {
					if _, err := obs.Revoke(ctx, lease); err != nil {
						b.Fatal(err)
					}
				}
				select {
				case <-hb.full:
				case <-ctx.Done():
					b.Fatal("failover did not complete")
				}
				times = append(times, time.Since(start))
				b.StopTimer()
				_ = a.Shutdown(ctx)
				_ = bn.Shutdown(ctx)
				cancel()
				b.StartTimer()
			}
			slices.Sort(times)
			pct := func(p float64) time.Duration { return times[int(p*float64(len(times)-1)+0.5)] }
			b.ReportMetric(float64(pct(0.5).Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(pct(0.99).Microseconds())/1000, "p99-ms")
		})
	}
}
