package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/cluster/clustertest"
	"github.com/ordo-actors/ordo/examples/bank/ledger"
	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/ordo-actors/ordo/ordotls"
	"github.com/ordo-actors/ordo/proto/bankpb"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// One transfer is one trace: submitted through a node that hosts neither
// account, it is routed to the source's node (saga and debit), whose
// hold and release go to the destination's node; every one of the three nodes
// exports spans of that trace, and nothing else is traced meanwhile.
func TestTransferIsOneTrace(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	exps := map[string]*tracetest.InMemoryExporter{}
	tps := map[string]*sdktrace.TracerProvider{}
	for _, p := range []string{"n1", "n2", "n3", "client"} {
		exps[p] = tracetest.NewInMemoryExporter()
		tps[p] = sdktrace.NewTracerProvider(sdktrace.WithSyncer(exps[p]))
	}
	cl, err := clustertest.Start(ctx, clustertest.Config{Kinds: []actors.Kind{ledger.Account, ledger.Transfer}, Nodes: 3, Dir: t.TempDir(), UnsafeNoFsync: true, Shards: 16,
		Tracing: func(p string) trace.TracerProvider { return tps[p] }})
	require.NoError(t, err)
	defer func() {
		require.NoError(t, cl.Close(ctx))
		for _, tp := range tps {
			require.NoError(t, tp.Shutdown(ctx))
		}
	}()

	// Shards stop moving once each is with its desired owner.
	testutil.Eventually(t, 30*time.Second, 20*time.Millisecond, func() error {
		return clustertest.Converged(cl.Shards(), cl.Nodes()...)
	})
	// The source on n1, the destination on n2; the transfer enters at n3.
	account := func(node int) string {
		for i := 0; i < 1000; i++ {
			id := fmt.Sprintf("acct-%06d", i)
			if cl.Owner(ledger.AccountRef(id)) == node {
				return id
			}
		}
		t.Fatalf("node %d owns none of the first 1000 accounts", node)
		return ""
	}
	from, to := account(0), account(1)
	accounts := bankpb.NewAccountServiceClient(cl.Client())
	for _, id := range []string{from, to} {
		_, err := accounts.Open(ctx, id, &bankpb.Open{Initial: 100})
		require.NoError(t, err)
	}
	for _, x := range exps {
		x.Reset()
	}

	st, err := ledger.SubmitAndWait(ctx, cl.Node(2), "t1", from, to, 30)
	require.NoError(t, err)
	require.Equal(t, bankpb.TransferStatus_TRANSFER_STATUS_COMPLETED, st.GetStatus())

	type span struct {
		node string
		tracetest.SpanStub
	}
	var spans []span
	collect := func() {
		spans = spans[:0]
		for p, x := range exps {
			for _, s := range x.GetSpans() {
				if s.Name != "ordo.store.fence" { // a shard's acquisition, a trace of its own
					spans = append(spans, span{p, s})
				}
			}
		}
	}
	lookup := func(node, name, message string) (span, bool) {
		for _, s := range spans {
			if s.node == node && s.Name == name && attrOf(s.Attributes, "ordo.message") == message {
				return s, true
			}
		}
		return span{}, false
	}
	// A reply can reach its caller before the run that made it has ended
	// its span (the saver releases a write's reply once it is durable,
	// while the handler may still be returning): wait until the handlings
	// and the routed hold and release checked below have ended theirs.
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		collect()
		for _, w := range []struct{ node, name, message string }{
			{"n1", "ordo.handle", "ordo.bank.v1.SubmitTransfer"}, {"n1", "ordo.handle", "ordo.bank.v1.Debit"},
			{"n2", "ordo.handle", "ordo.bank.v1.Hold"}, {"n1", "ordo.call", "ordo.bank.v1.Hold"},
			{"n2", "ordo.handle", "ordo.bank.v1.Release"}, {"n1", "ordo.call", "ordo.bank.v1.Release"},
		} {
			if _, ok := lookup(w.node, w.name, w.message); !ok {
				return fmt.Errorf("no %s span of %s on %s yet", w.name, w.message, w.node)
			}
		}
		return nil
	})
	require.NotEmpty(t, spans)
	traceID := spans[0].SpanContext.TraceID()
	perNode := map[string]int{}
	for _, s := range spans {
		require.Equal(t, traceID, s.SpanContext.TraceID(), "%s's span %s %v is in another trace", s.node, s.Name, s.Attributes)
		perNode[s.node]++
	}
	require.Empty(t, perNode["client"], "the client made no call")
	for _, n := range []string{"n1", "n2", "n3"} {
		require.NotZero(t, perNode[n], "no span on %s: %v", n, perNode)
	}

	find := func(node, name, message string) span {
		t.Helper()
		s, ok := lookup(node, name, message)
		if !ok {
			t.Fatalf("no %s span of %s on %s", name, message, node)
		}
		return s
	}
	call := find("n3", "ordo.call", "ordo.bank.v1.SubmitTransfer")
	require.False(t, call.Parent.IsValid(), "the transfer's call is the trace's root")
	submit := find("n1", "ordo.handle", "ordo.bank.v1.SubmitTransfer")
	debit := find("n1", "ordo.handle", "ordo.bank.v1.Debit")
	require.Equal(t, submit.SpanContext.SpanID(), debit.Parent.SpanID(), "the co-located debit is the saga's child")
	for _, m := range []string{"ordo.bank.v1.Hold", "ordo.bank.v1.Release"} {
		handled := find("n2", "ordo.handle", m)
		require.True(t, handled.Parent.IsRemote(), "n2's %s continues n1's trace", m)
		find("n1", "ordo.call", m)
	}
	for _, n := range []string{"n1", "n2"} {
		found := false
		for _, s := range spans {
			found = found || s.node == n && s.Name == "ordo.store.save"
		}
		require.True(t, found, "no store Save on %s", n)
	}
}

func attrOf(attrs []attribute.KeyValue, key string) string {
	for _, a := range attrs {
		if string(a.Key) == key {
			return a.Value.String()
		}
	}
	return ""
}

// demo --trace=FILE writes the spans of the run to FILE, one JSON object
// per line, each transfer a trace across the nodes it reached.
// demoSpans runs a short demo that traces every operation and returns the
// path of its spans.
func demoSpans(t *testing.T, ctx context.Context, seed string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "spans.jsonl")
	code, out, stderr := runCLI(t, ctx, "demo", "--duration", "1s", "--no-kill", "--accounts", "10", "--concurrency", "2",
		"--unsafe-no-fsync", "-q", "--seed", seed, "--trace="+path, "--trace-ratio", "1")
	require.Equal(t, exitOK, code, "%s%s", out, stderr)
	return path
}

func TestDemoTrace(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	path := demoSpans(t, ctx, "3")

	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	type stub struct {
		Name        string
		SpanContext struct{ TraceID string }
		Attributes  []struct {
			Key   string
			Value struct{ Value any }
		}
		InstrumentationScope struct {
			Attributes []struct {
				Key   string
				Value struct{ Value any }
			}
		}
	}
	// Per trace: the processes its spans came from, and whether it is a
	// transfer's (the client's call of SubmitTransfer).
	procs := map[string]map[string]bool{}
	transfer := map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var s stub
		require.NoError(t, json.Unmarshal(sc.Bytes(), &s), "line %q", sc.Text())
		proc := "client"
		for _, a := range s.InstrumentationScope.Attributes {
			if a.Key == "ordo.node" {
				proc = fmt.Sprint(a.Value.Value)
			}
		}
		id := s.SpanContext.TraceID
		if procs[id] == nil {
			procs[id] = map[string]bool{}
		}
		procs[id][proc] = true
		for _, a := range s.Attributes {
			if s.Name == "ordo.call" && proc == "client" && a.Key == "ordo.message" && a.Value.Value == "ordo.bank.v1.SubmitTransfer" {
				transfer[id] = true
			}
		}
	}
	require.NoError(t, sc.Err())
	require.NotEmpty(t, transfer, "no transfer was traced")
	across := 0
	for id := range transfer {
		if len(procs[id]) >= 3 { // the client and two nodes at least
			across++
		}
	}
	require.NotZero(t, across, "no transfer's trace spans the client and two nodes")
}

// collector is an OTLP/gRPC trace collector that keeps what it receives.
type collector struct {
	coltracepb.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []*tracepb.ResourceSpans
}

func (c *collector) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.spans = append(c.spans, req.GetResourceSpans()...)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// names returns "service.instance.id/span name" of every span received.
func (c *collector) names() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, rs := range c.spans {
		instance := ""
		for _, a := range rs.GetResource().GetAttributes() {
			if a.GetKey() == "service.instance.id" {
				instance = a.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				out = append(out, instance+"/"+s.GetName())
			}
		}
	}
	return out
}

// bank node's --otlp-* flags send spans to a collector, in plaintext with
// --otlp-insecure, over TLS verified against --otlp-ca otherwise.
func TestNodeOTLP(t *testing.T) {
	ca, err := ordotls.NewCA("collector CA")
	require.NoError(t, err)
	certPEM, keyPEM, err := ca.Issue("collector", "127.0.0.1")
	require.NoError(t, err)
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	require.NoError(t, err)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(caFile, ca.CAPEM(), 0o600))

	for _, secure := range []bool{false, true} {
		t.Run(fmt.Sprintf("tls=%v", secure), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var opts []grpc.ServerOption
			f := otlpFlags{ratio: 1}
			if secure {
				opts = append(opts, grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})))
				f.ca = caFile
			} else {
				f.insecure = true
			}
			srv := grpc.NewServer(opts...)
			col := &collector{}
			coltracepb.RegisterTraceServiceServer(srv, col)
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			go func() { _ = srv.Serve(ln) }()
			defer srv.Stop()
			f.endpoint = ln.Addr().String()
			require.NoError(t, f.validate())

			tp, err := f.provider(ctx, "n1")
			require.NoError(t, err)
			_, span := tp.Tracer("test").Start(ctx, "work")
			span.End()
			require.NoError(t, tp.ForceFlush(ctx))
			require.NoError(t, tp.Shutdown(ctx))
			require.Equal(t, []string{"n1/work"}, col.names())
		})
	}
}
