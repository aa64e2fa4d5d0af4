package cluster_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/cluster"
	"github.com/ordo-actors/ordo/cluster/clustertest"
	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/ordo-actors/ordo/persistence/memory"
	"github.com/ordo-actors/ordo/proto/testpb"
)

// BenchmarkRemoteCall measures calls from a client-only process to entities
// owned by two nodes, sequential and with 32 concurrent callers, reads and
// writes, and reports p50/p99 latency.
func BenchmarkRemoteCall(b *testing.B) {
	for _, op := range []string{"read", "write"} {
		for _, conc := range []int{1, 32} {
			b.Run(fmt.Sprintf("%s/conc=%d", op, conc), func(b *testing.B) {
				e := newBenchEnv(b)
				client := e.dialB(b)
				ctx := context.Background()
				msg := func() any { return nil }
				_ = msg
				call := func(i int) error {
					ref := counter(fmt.Sprintf("b%d", i%64))
					var err error
					if op == "read" {
						_, err = cluster.Call[*testpb.Value](ctx, client, ref, &testpb.Get{})
					} else {
						_, err = cluster.Call[*testpb.Value](ctx, client, ref, &testpb.Add{Delta: 1})
					}
					return err
				}
				for i := 0; i < 64; i++ { // activate
					if err := call(i); err != nil {
						b.Fatal(err)
					}
				}
				lat := make([]time.Duration, b.N)
				b.ResetTimer()
				var wg sync.WaitGroup
				next := make(chan int, b.N)
				for i := 0; i < b.N; i++ {
					next <- i
				}
				close(next)
				start := time.Now()
				for w := 0; w < conc; w++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := range next {
							t0 := time.Now()
							if err := call(i); err != nil {
								b.Error(err)
								return
							}
							lat[i] = time.Since(t0)
						}
					}()
				}
				wg.Wait()
				el := time.Since(start)
				sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
				b.ReportMetric(float64(b.N)/el.Seconds(), "calls/s")
				b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
				b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
			})
		}
	}
}

type benchEnv struct {
	*env
}

func newBenchEnv(b *testing.B) *benchEnv {
	e := newEnv(b, memory.New(), 16)
	e.startN(2)
	e.settled(e.nodes...)
	return &benchEnv{e}
}

func (e *benchEnv) dialB(b *testing.B) actors.Invoker {
	cfg := e.clientConfig()
	c, err := cluster.Dial(context.Background(), e.cl.Endpoints(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}

// BenchmarkFailover crashes a node (Kill: no drain) b.N times and measures
// the time until every entity it hosted answers again on the others, with
// production defaults: lease TTL 3s, memberlist LAN timers tuned in
// startMembership (probe 500ms, suspicion ×3). Run: go test -run '^$'
// -bench Failover -benchtime 10x ./cluster/
func BenchmarkFailover(b *testing.B) {
	e := newEnv(b, memory.New(), 64)
	prod := func(id string) cluster.Config {
		cfg := cluster.DefaultConfig()
		cfg.NodeID = id
		cfg.EtcdEndpoints = e.cl.Endpoints()
		cfg.Store = e.store
		cfg.Placement.Prefix = e.prefix
		cfg.Placement.Shards = e.shards
		cfg.Logger = testutil.Logger()
		cfg.TLS = nodeTLS(id)
		if len(e.nodes) > 0 {
			cfg.Join = []string{e.nodes[0].GossipAddr()}
		}
		return cfg
	}
	faults := map[*cluster.Node]*clustertest.Faults{}
	start := func(id string) *cluster.Node {
		cfg := prod(id)
		f := &clustertest.Faults{}
		cfg.Faults = f
		n, err := cluster.New(cfg, counterKind)
		if err != nil {
			b.Fatal(err)
		}
		if err := n.Start(context.Background()); err != nil {
			b.Fatal(err)
		}
		faults[n] = f
		return n
	}
	for i := 1; i <= 3; i++ {
		e.nodes = append(e.nodes, start(fmt.Sprintf("n%d", i)))
	}
	defer func() {
		for _, n := range e.nodes {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			_ = n.Shutdown(ctx)
			cancel()
		}
	}()
	cfg := e.clientConfig()
	client, err := cluster.Dial(context.Background(), e.cl.Endpoints(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()
	owned := func() int {
		total := 0
		for _, n := range e.nodes {
			total += len(n.Owned())
		}
		return total
	}
	var times []time.Duration
	b.ResetTimer()
	for it := 0; it < b.N; it++ {
		testutil.Eventually(b, 60*time.Second, 20*time.Millisecond, func() error {
			if o := owned(); o != int(e.shards) {
				return fmt.Errorf("%d shards owned", o)
			}
			return nil
		})
		victimIdx := it % len(e.nodes)
		victim := e.nodes[victimIdx]
		ids := entitiesOf(b, victim, e.shards, 20)
		for _, id := range ids {
			if _, err := cluster.Call[*testpb.Value](ctx, client, counter(id), &testpb.Add{Delta: 1}); err != nil {
				b.Fatal(err)
			}
		}
		t0 := time.Now()
		faults[victim].Kill()
		_ = victim.Shutdown(ctx) // after a crash: waits for it
		var wg sync.WaitGroup
		for _, id := range ids {
			wg.Add(1)
			go func(id string) {
				defer wg.Done()
				cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
				defer cancel()
				if _, err := cluster.Call[*testpb.Value](cctx, client, counter(id), &testpb.Get{}); err != nil {
					b.Error(err)
				}
			}(id)
		}
		wg.Wait()
		times = append(times, time.Since(t0))
		e.nodes[victimIdx] = start(victim.ID())
	}
	b.StopTimer()
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	b.ReportMetric(float64(times[len(times)/2].Milliseconds()), "p50-ms")
	b.ReportMetric(float64(times[(len(times)*99)/100].Milliseconds()), "p99-ms")
	b.ReportMetric(float64(times[len(times)-1].Milliseconds()), "max-ms")
}

// BenchmarkHandoff shuts a node down gracefully b.N times while 16 callers
// keep calling 200 entities, and reports the longest call (retries
// included) of each handoff window: the longest time an entity was
// unavailable to its callers. Run with -benchtime 10x.
func BenchmarkHandoff(b *testing.B) {
	e := newEnv(b, memory.New(), 64)
	start := func(id string) *cluster.Node {
		n, err := e.cl.StartNode(context.Background(), e.config(id), counterKind)
		if err != nil {
			b.Fatal(err)
		}
		return n
	}
	for i := 1; i <= 3; i++ {
		e.nodes = append(e.nodes, start(fmt.Sprintf("n%d", i)))
	}
	defer func() {
		for _, n := range e.nodes {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			_ = n.Shutdown(ctx)
			cancel()
		}
	}()
	cfg := e.clientConfig()
	client, err := cluster.Dial(context.Background(), e.cl.Endpoints(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()
	var worst []time.Duration
	var all []time.Duration
	b.ResetTimer()
	for it := 0; it < b.N; it++ {
		testutil.Eventually(b, 60*time.Second, 20*time.Millisecond, func() error {
			total := 0
			for _, n := range e.nodes {
				total += len(n.Owned())
			}
			if total != int(e.shards) {
				return fmt.Errorf("%d shards owned", total)
			}
			return nil
		})
		var stop atomic.Bool
		var mu sync.Mutex
		var lat []time.Duration
		var wg sync.WaitGroup
		for w := 0; w < 16; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				for i := 0; !stop.Load(); i++ {
					t0 := time.Now()
					if _, err := cluster.Call[*testpb.Value](ctx, client, counter(fmt.Sprintf("h%d", (w*13+i)%200)), &testpb.Add{Delta: 1}); err != nil {
						b.Error(err)
						return
					}
					d := time.Since(t0)
					mu.Lock()
					lat = append(lat, d)
					mu.Unlock()
				}
			}(w)
		}
		idx := it % len(e.nodes)
		leaving := e.nodes[idx]
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		if err := leaving.Shutdown(sctx); err != nil {
			b.Error(err)
		}
		cancel()
		e.nodes[idx] = start(leaving.ID()) // rejoin: shards hand back, also measured
		testutil.Eventually(b, 60*time.Second, 20*time.Millisecond, func() error {
			if len(e.nodes[idx].Owned()) == 0 {
				return fmt.Errorf("rejoined node owns nothing")
			}
			return nil
		})
		stop.Store(true)
		wg.Wait()
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		worst = append(worst, lat[len(lat)-1])
		all = append(all, lat...)
	}
	b.StopTimer()
	sort.Slice(worst, func(i, j int) bool { return worst[i] < worst[j] })
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	b.ReportMetric(float64(worst[len(worst)/2].Milliseconds()), "worst-p50-ms")
	b.ReportMetric(float64(worst[len(worst)-1].Milliseconds()), "worst-max-ms")
	b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "call-p99-µs")
}
