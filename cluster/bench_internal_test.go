package cluster

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/ordo-actors/ordo/persistence/memory"
	"github.com/ordo-actors/ordo/placement/etcdembed"
	"github.com/ordo-actors/ordo/proto/ordopb"
	"github.com/ordo-actors/ordo/proto/testpb"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/anypb"
)

var echoKind = actors.MustKind("echo", func() *testpb.Counter { return new(testpb.Counter) },
	actors.OnRead(func(c *actors.Context[*testpb.Counter], m *testpb.Echo) (*testpb.Echo, error) { return m, nil }))

// rawEcho is a plain gRPC unary service answering an envelope with a
// reply carrying its payload: the baseline of BenchmarkRemoteVsRaw.
var rawEcho = grpc.ServiceDesc{
	ServiceName: "bench.RawEcho",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{MethodName: "Call", Handler: func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
		env := new(ordopb.Envelope)
		if err := dec(env); err != nil {
			return nil, err
		}
		return &ordopb.Reply{RequestId: env.RequestId, Payload: env.Payload}, nil
	}}},
}

// BenchmarkRemoteVsRaw compares a call from a client-only process through
// ordo (routing, transport, entity, output gate) with a raw gRPC unary
// call of the same envelope to a plain handler in the node's process,
// side by side. ratio = ordo calls/s ÷ raw calls/s.
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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	rawSrv := grpc.NewServer()
	rawSrv.RegisterService(&rawEcho, nil)
	go func() { _ = rawSrv.Serve(ln) }()
	defer rawSrv.Stop()
	rawConn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer rawConn.Close()

	for _, conc := range []int{1, 16} {
		b.Run(fmt.Sprintf("conc=%d", conc), func(b *testing.B) {
			ref := echoKind.Ref("e")
			raw := func(i int) error {
				env := &ordopb.Envelope{Target: ref.Proto(), RequestId: fmt.Sprint(i), Payload: payload}
				return rawConn.Invoke(ctx, "/bench.RawEcho/Call", env, new(ordopb.Reply))
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
