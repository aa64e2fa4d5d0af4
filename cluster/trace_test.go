package cluster_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/cluster"
	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// tracer is one process's tracing: its provider and what it exported.
type tracer struct {
	exp *tracetest.InMemoryExporter
	tp  *sdktrace.TracerProvider
}

func newTracer(t *testing.T) tracer {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tracer{exp, tp}
}

// ownedBy returns the ID of an entity of kind whose shard node owns.
func ownedBy(t *testing.T, n *cluster.Node, kind actors.Kind, shards uint32) string {
	t.Helper()
	owned := n.Owned()
	for i := 0; i < 1000; i++ {
		id := fmt.Sprintf("e%d", i)
		if _, ok := owned[actors.ShardOf(kind.Ref(id), shards)]; ok {
			return id
		}
	}
	t.Fatalf("%s owns none of the first 1000 entities' shards", n.ID())
	return ""
}

// A client's call to an entity on one node, whose handler asks an entity
// on another node, is one trace: the client's call and attempt, the
// first node's handling and its message's routing, the second node's
// handling, each node's spans exported by its own provider and named by
// the node's ID.
func TestTracingCrossesNodes(t *testing.T) {
	e := newEnv(t, nil, 8)
	tr := map[string]tracer{"n1": newTracer(t), "n2": newTracer(t), "client": newTracer(t)}
	for _, id := range []string{"n1", "n2"} {
		cfg := e.config(id)
		cfg.TracerProvider = tr[id].tp
		e.startKinds(cfg, traceKind)
	}
	e.converged(e.nodes...)
	ccfg := e.clientConfig()
	ccfg.TracerProvider = tr["client"].tp
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	client, err := cluster.Dial(ctx, e.cl.Endpoints(), ccfg)
	require.NoError(t, err)
	defer client.Close()
	a, b := ownedBy(t, e.nodes[0], traceKind, e.shards), ownedBy(t, e.nodes[1], traceKind, e.shards)

	ctx, root := tr["client"].tp.Tracer("test").Start(ctx, "transfer")
	got, err := cluster.Call[*wrapperspb.StringValue](ctx, client, traceKind.Ref(a), wrapperspb.Bytes([]byte(b)))
	require.NoError(t, err)
	root.End()
	traceID := root.SpanContext().TraceID()

	// A reply can reach its caller before the run that made it has ended
	// its span (a read's reply leaves during the run; the continuation
	// answers at once, with ResolveNow): wait until the nodes' runs have
	// ended theirs.
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		for _, w := range []struct{ proc, name string }{{"n1", "ordo.handle"}, {"n1", "ordo.continue"}, {"n2", "ordo.handle"}} {
			ended := false
			for _, s := range tr[w.proc].exp.GetSpans() {
				ended = ended || s.Name == w.name
			}
			if !ended {
				return fmt.Errorf("%s has not ended its %s span", w.proc, w.name)
			}
		}
		return nil
	})

	// Each process's spans of the call (a shard's fence, made when the
	// shard was acquired, is a trace of its own).
	spans := map[string]tracetest.SpanStubs{}
	byID := map[trace.SpanID]tracetest.SpanStub{}
	for id, x := range tr {
		for _, s := range x.exp.GetSpans() {
			if s.Name == "ordo.store.fence" {
				continue
			}
			require.Equal(t, traceID, s.SpanContext.TraceID(), "%s's span %s is not in the call's trace", id, s.Name)
			if id != "client" {
				require.Equal(t, id, scopeAttr(s, "ordo.node"), "%s's span %s", id, s.Name)
			}
			spans[id] = append(spans[id], s)
			byID[s.SpanContext.SpanID()] = s
		}
	}
	one := func(proc, name, entity string) tracetest.SpanStub {
		t.Helper()
		var found []tracetest.SpanStub
		for _, s := range spans[proc] {
			if s.Name == name && (entity == "" || spanAttr(s, "ordo.id") == entity) {
				found = append(found, s)
			}
		}
		require.Len(t, found, 1, "%s's %s spans of %q", proc, name, entity)
		return found[0]
	}
	parent := func(s tracetest.SpanStub) tracetest.SpanStub {
		t.Helper()
		p, ok := byID[s.Parent.SpanID()]
		require.True(t, ok, "the parent of %s is not a span of the call", s.Name)
		return p
	}

	call := one("client", "ordo.call", a)
	require.Equal(t, root.SpanContext().SpanID(), call.Parent.SpanID())
	attempt := one("client", "ordo.attempt", "")
	require.Equal(t, call.SpanContext.SpanID(), attempt.Parent.SpanID())
	require.Equal(t, "n1", spanAttr(attempt, "ordo.owner"))

	handleA := one("n1", "ordo.handle", a)
	require.Equal(t, attempt.SpanContext.SpanID(), handleA.Parent.SpanID(), "n1 handles the client's attempt")
	relay := one("n1", "ordo.call", b)
	require.Equal(t, handleA.SpanContext.SpanID(), relay.Parent.SpanID(), "the handler's message continues its trace")
	relayAttempt := one("n1", "ordo.attempt", "")
	require.Equal(t, relay.SpanContext.SpanID(), relayAttempt.Parent.SpanID())
	require.Equal(t, "n2", spanAttr(relayAttempt, "ordo.owner"))
	cont := one("n1", "ordo.continue", a)
	require.Equal(t, handleA.SpanContext.SpanID(), cont.Parent.SpanID())

	handleB := one("n2", "ordo.handle", b)
	require.Equal(t, relayAttempt.SpanContext.SpanID(), handleB.Parent.SpanID(), "n2 handles n1's attempt")
	require.Equal(t, fmt.Sprintf("00-%s-%s-01", traceID, handleB.SpanContext.SpanID()), got.GetValue(),
		"the handler's metadata carries its span's context")

	// The entities' activations loaded them within their handling.
	for _, n := range []struct{ proc, id string }{{"n1", a}, {"n2", b}} {
		load := one(n.proc, "ordo.store.load", n.id)
		require.Equal(t, "ordo.handle", parent(load).Name)
	}
}

// Without a TracerProvider nothing is recorded, not even with a global
// one set, and calls carry no trace context.
func TestTracingOff(t *testing.T) {
	x := newTracer(t)
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(x.tp)
	t.Cleanup(func() { otel.SetTracerProvider(prev) })

	e := newEnv(t, nil, 8)
	e.startKinds(e.config("n1"), traceKind)
	e.startKinds(e.config("n2"), traceKind)
	e.converged(e.nodes...)
	client := e.dial()
	a, b := ownedBy(t, e.nodes[0], traceKind, e.shards), ownedBy(t, e.nodes[1], traceKind, e.shards)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ctx, root := x.tp.Tracer("test").Start(ctx, "transfer")
	got, err := cluster.Call[*wrapperspb.StringValue](ctx, client, traceKind.Ref(a), wrapperspb.Bytes([]byte(b)))
	require.NoError(t, err)
	root.End()
	require.Empty(t, got.GetValue(), "a traceparent reached the handler")
	spans := x.exp.GetSpans()
	require.Len(t, spans, 1, "spans were recorded")
	require.Equal(t, "transfer", spans[0].Name)
}

func spanAttr(s tracetest.SpanStub, key string) string {
	for _, a := range s.Attributes {
		if string(a.Key) == key {
			return a.Value.String()
		}
	}
	return ""
}

func scopeAttr(s tracetest.SpanStub, key string) string {
	v, _ := s.InstrumentationScope.Attributes.Value(attribute.Key(key))
	return v.String()
}
