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
	"github.com/ordo-actors/ordo/etcdembed"
	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/ordo-actors/ordo/ordotls"
	"github.com/ordo-actors/ordo/persistence/memory"
	"github.com/ordo-actors/ordo/proto/ordopb"
	"github.com/ordo-actors/ordo/proto/testpb"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
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
// side by side, each in plaintext and with mutual TLS (certificates from a
// throw-away CA; connections are long-lived, so TLS costs its record
// encryption, not handshakes). Reported: calls/s and latencies of each,
// ratio = ordo calls/s ÷ raw calls/s (plaintext both), tls-ratio = ordo
// with TLS ÷ ordo in plaintext, raw-tls-ratio = raw with TLS ÷ raw
// plaintext.
func BenchmarkRemoteVsRaw(b *testing.B) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := etcdembed.Start(context.Background(), etcdembed.Config{Dir: b.TempDir(), UnsafeNoFsync: true, Logger: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	ctx := context.Background()
	// One node and one client per security setting, each in its own
	// cluster (prefix) of the same etcd.
	start := func(prefix string, nodeSrc, clientSrc ordotls.Source) *Client {
		cfg := DefaultLocalConfig()
		cfg.NodeID = "n1"
		cfg.EtcdEndpoints = srv.Endpoints()
		cfg.Store = memory.New()
		cfg.Placement.Prefix = prefix
		cfg.Placement.Shards = 8
		cfg.Logger = quiet
		cfg.TLS, cfg.Insecure = nodeSrc, nodeSrc == nil
		n, err := New(cfg, echoKind)
		if err != nil {
			b.Fatal(err)
		}
		if err := n.Start(ctx); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = n.Shutdown(ctx) })
		testutil.Eventually(b, 30*time.Second, 10*time.Millisecond, func() error {
			if o := len(n.Owned()); o < 8 {
				return fmt.Errorf("the node holds %d of 8 shards", o)
			}
			return nil
		})
		ccfg := DefaultClientConfig()
		ccfg.Prefix = prefix
		ccfg.Logger = quiet
		ccfg.TLS, ccfg.Insecure = clientSrc, clientSrc == nil
		c, err := Dial(ctx, srv.Endpoints(), ccfg)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close() })
		return c
	}
	plainClient := start("/ordo/bench-raw", nil, nil)
	tlsClient := start("/ordo/bench-raw-tls", nodeTLS(b, "n1"), clientTLS(b, "bench"))

	payload, _ := anypb.New(&testpb.Echo{N: 1})
	rawServe := func(creds ...grpc.ServerOption) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		rawSrv := grpc.NewServer(creds...)
		rawSrv.RegisterService(&rawEcho, nil)
		go func() { _ = rawSrv.Serve(ln) }()
		b.Cleanup(rawSrv.Stop)
		return ln.Addr().String()
	}
	rawDial := func(addr string, creds credentials.TransportCredentials) *grpc.ClientConn {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { conn.Close() })
		return conn
	}
	rawPlain := rawDial(rawServe(), insecure.NewCredentials())
	rawTLS := rawDial(rawServe(grpc.Creds(credentials.NewTLS(nodeTLS(b, "raw").ServerConfig()))),
		credentials.NewTLS(clientTLS(b, "bench").ClientConfig("127.0.0.1")))

	for _, conc := range []int{1, 16} {
		b.Run(fmt.Sprintf("conc=%d", conc), func(b *testing.B) {
			ref := echoKind.Ref("e")
			raw := func(conn *grpc.ClientConn) func(int) error {
				return func(i int) error {
					env := &ordopb.Envelope{Target: ref.Proto(), RequestId: fmt.Sprint(i), Payload: payload}
					return conn.Invoke(ctx, "/bench.RawEcho/Call", env, new(ordopb.Reply))
				}
			}
			viaOrdo := func(c *Client) func(int) error {
				return func(i int) error {
					_, err := actors.Call[*testpb.Echo](ctx, c, echoKind.Ref(fmt.Sprintf("e%d", i%16)), &testpb.Echo{N: 1})
					return err
				}
			}
			for i := 0; i < 16; i++ {
				for _, f := range []func(int) error{viaOrdo(plainClient), viaOrdo(tlsClient), raw(rawPlain), raw(rawTLS)} {
					if err := f(i); err != nil {
						b.Fatal(err)
					}
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
			type measured struct {
				name string
				el   time.Duration
				lat  []time.Duration
			}
			var ms []measured
			for _, v := range []struct {
				name string
				f    func(int) error
			}{
				{"raw", raw(rawPlain)}, {"raw-tls", raw(rawTLS)}, {"ordo", viaOrdo(plainClient)}, {"ordo-tls", viaOrdo(tlsClient)},
			} {
				el, lat := run(v.f)
				ms = append(ms, measured{v.name, el, lat})
			}
			for _, m := range ms {
				b.ReportMetric(float64(b.N)/m.el.Seconds(), m.name+"-calls/s")
				b.ReportMetric(float64(m.lat[len(m.lat)/2].Microseconds()), m.name+"-p50-µs")
				b.ReportMetric(float64(m.lat[len(m.lat)*99/100].Microseconds()), m.name+"-p99-µs")
			}
			rawEl, rawTLSEl, ordoEl, ordoTLSEl := ms[0].el, ms[1].el, ms[2].el, ms[3].el
			b.ReportMetric(rawEl.Seconds()/ordoEl.Seconds(), "ratio")
			b.ReportMetric(ordoEl.Seconds()/ordoTLSEl.Seconds(), "tls-ratio")
			b.ReportMetric(rawEl.Seconds()/rawTLSEl.Seconds(), "raw-tls-ratio")
		})
	}
}
