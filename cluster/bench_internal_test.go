package cluster

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/ordo-actors/ordo/persistence/memory"
	"github.com/ordo-actors/ordo/placement/etcdembed"
	"github.com/ordo-actors/ordo/proto/ordopb"
	"github.com/ordo-actors/ordo/proto/testpb"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/anypb"
)

var echoKind = actors.MustKind("echo", func() *testpb.Counter { return new(testpb.Counter) },
	actors.OnRead(func(c *actors.Context[*testpb.Counter], m *testpb.Echo) (*testpb.Echo, error) { return m, nil }))

// BenchmarkRemoteVsRaw compares a call from a client-only process through
// ordo (routing, remote, entity, output gate) with a raw protoactor
// RequestFuture to a plain actor on the same node process, same payload,
// same two actor systems, side by side. ratio = ordo calls/s ÷ raw calls/s.
func BenchmarkRemoteVsRaw(b *testing.B) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := etcdembed.Start(context.Background(), etcdembed.Config{Dir: b.TempDir(), UnsafeNoFsync: true, Logger: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	cfg := DefaultLocalConfig()
	cfg.NodeID = "n1"
	cfg.EtcdEndpoints = srv.Endpoints()
	cfg.Store = memory.New()
	cfg.Placement.Prefix = "/ordo/bench-raw"
	cfg.Placement.Shards = 8
	cfg.Logger = quiet
	n, err := New(cfg, echoKind)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if err := n.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer n.Shutdown(ctx)
	testutil.Eventually(b, 30*time.Second, 10*time.Millisecond, func() error {
		if o := len(n.Owned()); o < 8 {
			return fmt.Errorf("the node holds %d of 8 shards", o)
		}
		return nil
	})
	ccfg := DefaultClientConfig()
	ccfg.Prefix = cfg.Placement.Prefix
	ccfg.Logger = quiet
	c, err := Dial(ctx, srv.Endpoints(), ccfg)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()

	payload, _ := anypb.New(&testpb.Echo{N: 1})
	n.tr.system.Root.SpawnNamed(actor.PropsFromFunc(func(ac actor.Context) {
		if env, ok := ac.Message().(*ordopb.Envelope); ok {
			ac.Respond(&ordopb.Reply{RequestId: env.RequestId, Payload: env.Payload})
		}
	}), "raw-echo")
	rawPID := actor.NewPID(n.tr.addr, "raw-echo")

	for _, conc := range []int{1, 16} {
		b.Run(fmt.Sprintf("conc=%d", conc), func(b *testing.B) {
			ref := echoKind.Ref("e")
			raw := func(i int) error {
				env := &ordopb.Envelope{Target: ref.Proto(), RequestId: fmt.Sprint(i), Payload: payload}
				_, err := c.tr.system.Root.RequestFuture(rawPID, env, 5*time.Second).Result()
				return err
			}
			viaOrdo := func(i int) error {
				_, err := actors.Call[*testpb.Echo](ctx, c, echoKind.Ref(fmt.Sprintf("e%d", i%16)), &testpb.Echo{N: 1})
				return err
			}
			for i := 0; i < 16; i++ {
				if err := viaOrdo(i); err != nil {
					b.Fatal(err)
				}
			}
			run := func(f func(int) error) (time.Duration, []time.Duration) {
				lat := make([]time.Duration, b.N)
				next := make(chan int, b.N)
				for i := 0; i < b.N; i++ {
					next <- i
				}
				close(next)
				var wg sync.WaitGroup
				start := time.Now()
				for w := 0; w < conc; w++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := range next {
							t0 := time.Now()
							if err := f(i); err != nil {
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
				return el, lat
			}
			b.ResetTimer()
			rawEl, rawLat := run(raw)
			ordoEl, ordoLat := run(viaOrdo)
			b.ReportMetric(float64(b.N)/rawEl.Seconds(), "raw-calls/s")
			b.ReportMetric(float64(b.N)/ordoEl.Seconds(), "ordo-calls/s")
			b.ReportMetric(rawEl.Seconds()/ordoEl.Seconds(), "ratio")
			b.ReportMetric(float64(rawLat[len(rawLat)/2].Microseconds()), "raw-p50-µs")
			b.ReportMetric(float64(rawLat[len(rawLat)*99/100].Microseconds()), "raw-p99-µs")
			b.ReportMetric(float64(ordoLat[len(ordoLat)/2].Microseconds()), "ordo-p50-µs")
			b.ReportMetric(float64(ordoLat[len(ordoLat)*99/100].Microseconds()), "ordo-p99-µs")
		})
	}
}
