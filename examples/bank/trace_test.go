package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/examples/bank/inproc"
	"github.com/ordo-actors/ordo/examples/bank/ledger"
	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/ordo-actors/ordo/placement"
	"github.com/ordo-actors/ordo/proto/bankpb"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// One transfer is one trace: submitted through a node that hosts neither
// account, it is routed to the source's node (saga and debit), whose
// credit goes to the destination's node; every one of the three nodes
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
	cl, err := inproc.Start(ctx, inproc.Config{Nodes: 3, Dir: t.TempDir(), UnsafeNoFsync: true, Shards: 16,
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
		ids := []string{"n1", "n2", "n3"}
		for s := uint32(0); s < cl.Shards(); s++ {
			for i, n := range cl.Nodes() {
				if _, owns := n.Owned()[s]; owns != (ids[i] == placement.Desired(s, ids)) {
					return fmt.Errorf("shard %d: %s owns it: %v", s, ids[i], owns)
				}
			}
		}
		return nil
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
	for p, x := range exps {
		for _, s := range x.GetSpans() {
			if s.Name != "ordo.store.fence" { // a shard's acquisition, a trace of its own
				spans = append(spans, span{p, s})
			}
		}
	}
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
		for _, s := range spans {
			if s.node == node && s.Name == name && attrOf(s.Attributes, "ordo.message") == message {
				return s
			}
		}
		t.Fatalf("no %s span of %s on %s", name, message, node)
		return span{}
	}
	call := find("n3", "ordo.call", "ordo.bank.v1.SubmitTransfer")
	require.False(t, call.Parent.IsValid(), "the transfer's call is the trace's root")
	submit := find("n1", "ordo.handle", "ordo.bank.v1.SubmitTransfer")
	debit := find("n1", "ordo.handle", "ordo.bank.v1.Debit")
	require.Equal(t, submit.SpanContext.SpanID(), debit.Parent.SpanID(), "the co-located debit is the saga's child")
	credit := find("n2", "ordo.handle", "ordo.bank.v1.Credit")
	require.True(t, credit.Parent.IsRemote(), "n2's credit continues n1's trace")
	find("n1", "ordo.call", "ordo.bank.v1.Credit")
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
			return a.Value.Emit()
		}
	}
	return ""
}
