package cluster_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/cluster"
	"github.com/ordo-actors/ordo/persistence/memory"
	"github.com/ordo-actors/ordo/proto/testpb"
)

// BenchmarkRemoteCall measures calls from a client-only process to entities
// owned by two nodes, sequential and with 32 concurrent callers, reads and
// writes, and reports p50/p99 latency.
func BenchmarkRemoteCall(b *testing.B) {
	t := &testing.T{}
	_ = t
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
	t := &testing.T{}
	_ = t
	e := &env{etcd: startEtcd(b), store: memory.New(), shards: 16,
		prefix: fmt.Sprintf("/ordo/bench-%d", prefixSeq.Add(1)), faults: &cluster.GossipFaults{}}
	for i := 0; i < 2; i++ {
		cfg := e.config(fmt.Sprintf("n%d", i+1))
		n, err := cluster.New(cfg, counterKind)
		if err != nil {
			b.Fatal(err)
		}
		if err := n.Start(context.Background()); err != nil {
			b.Fatal(err)
		}
		e.nodes = append(e.nodes, n)
		b.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_ = n.Shutdown(ctx)
		})
	}
	checkFor(b, 30*time.Second, 20*time.Millisecond, func() error {
		total := 0
		for _, n := range e.nodes {
			total += len(n.Owned())
		}
		if total != int(e.shards) {
			return fmt.Errorf("%d shards owned", total)
		}
		return nil
	})
	return &benchEnv{e}
}

func (e *benchEnv) dialB(b *testing.B) actors.Invoker {
	cfg := cluster.DefaultClientConfig()
	cfg.Prefix = e.prefix
	cfg.Logger = testLogger()
	c, err := cluster.Dial(context.Background(), e.etcd.Endpoints(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}
