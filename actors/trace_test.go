package actors_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/ordo-actors/ordo/persistence/memory"
	"github.com/ordo-actors/ordo/proto/testpb"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// spanKind answers "who" with the span its handler's context carries and
// the traceparent of its metadata ("span/traceparent"), and relays a
// BytesValue's "who" to the entity it names, answering with that one's
// answer once it comes back.
var spanKind = actors.MustKind("span", func() *testpb.Counter { return new(testpb.Counter) },
	actors.On(func(c *ctxC, _ *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		c.State.Value++ // a write: the run's record goes through a Save
		tp, _ := actors.MetadataValue(c, "traceparent")
		return wrapperspb.String(trace.SpanFromContext(c).SpanContext().SpanID().String() + "/" + tp), nil
	}),
	actors.On(func(c *ctxC, m *wrapperspb.BytesValue) (*wrapperspb.StringValue, error) {
		key := "relay-" + c.RequestID()
		c.Defer(key)
		actors.Request(c, actors.Ref{Kind: "span", ID: string(m.Value)}, wrapperspb.String("who"), c.RequestID()+":fwd",
			func(c *ctxC, r *wrapperspb.StringValue, err error) { c.ResolveNow(key, r, err) })
		return nil, nil
	}))

func newTracer(t *testing.T) (*tracetest.InMemoryExporter, *sdktrace.TracerProvider) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return exp, tp
}

// One call and the entity-to-entity request its handler makes are one
// trace: the caller's span is the parent of the handling, whose context
// travels with the request to the other entity; the continuation, the
// store's load and the Saves hang from the runs that made them.
func TestTracingSpans(t *testing.T) {
	exp, tp := newTracer(t)
	cfg := actors.DefaultLocalConfig()
	cfg.Shards = 8
	cfg.Tracer = tp.Tracer(actors.TracerName)
	host := startHost(t, cfg, actors.HostDeps{Store: memory.New()}, spanKind)
	ownAll(t, host, cfg.Shards)

	ctx := testCtx(t)
	// The fences are made in the background when the shards are owned:
	// wait for their spans, so that only the call's spans follow.
	testutil.Eventually(t, 10*time.Second, 5*time.Millisecond, func() error {
		if n := len(named(exp.GetSpans(), "ordo.store.fence")); n != int(cfg.Shards) {
			return fmt.Errorf("%d fence spans, want %d", n, cfg.Shards)
		}
		return nil
	})
	exp.Reset()

	ctx, root := tp.Tracer("test").Start(ctx, "client")
	got, err := actors.Call[*wrapperspb.StringValue](ctx, host, actors.Ref{Kind: "span", ID: "a"}, wrapperspb.Bytes([]byte("b")))
	require.NoError(t, err)
	root.End()
	traceID := root.SpanContext().TraceID()

	// A reply can reach its caller before the run that made it has ended
	// its span: the saver releases a reply once its write is durable,
	// while the handler may still be returning, and the continuation
	// answers at once (ResolveNow). The continuation's write may still be
	// in its Save. So wait until both handlings' spans, the
	// continuation's and the span of every Save the store saw have
	// ended.
	var spans []tracetest.SpanStub
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		spans = exp.GetSpans()
		if handles, conts := len(named(spans, "ordo.handle")), len(named(spans, "ordo.continue")); handles < 2 || conts < 1 {
			return fmt.Errorf("%d handling spans and %d continuation spans ended, want 2 and 1", handles, conts)
		}
		if saves, stores := len(named(spans, "ordo.save")), len(named(spans, "ordo.store.save")); saves != stores {
			return fmt.Errorf("%d Save spans ended, %d store Save spans", saves, stores)
		}
		return nil
	})
	byID := map[trace.SpanID]tracetest.SpanStub{}
	for _, s := range spans {
		require.Equal(t, traceID, s.SpanContext.TraceID(), "span %s is not in the call's trace", s.Name)
		byID[s.SpanContext.SpanID()] = s
	}
	parentName := func(s tracetest.SpanStub) string { return byID[s.Parent.SpanID()].Name }

	handles := named(spans, "ordo.handle")
	require.Len(t, handles, 2)
	relay, who := handles[0], handles[1]
	if attr(relay, "ordo.id") != "a" {
		relay, who = who, relay
	}
	require.Equal(t, "a", attr(relay, "ordo.id"))
	require.Equal(t, "b", attr(who, "ordo.id"))
	require.Equal(t, root.SpanContext().SpanID(), relay.Parent.SpanID(), "the call's span is the handling's parent")
	require.Equal(t, relay.SpanContext.SpanID(), who.Parent.SpanID(), "the request continues the handler's trace")
	require.Equal(t, trace.SpanKindServer, who.SpanKind)

	// The handler's context carries its span, and so does its metadata:
	// what the messages it sends carry on.
	wantTP := fmt.Sprintf("00-%s-%s-01", traceID, who.SpanContext.SpanID())
	require.Equal(t, who.SpanContext.SpanID().String()+"/"+wantTP, got.GetValue())

	conts := named(spans, "ordo.continue")
	require.Len(t, conts, 1)
	require.Equal(t, relay.SpanContext.SpanID(), conts[0].Parent.SpanID())

	loads := named(spans, "ordo.store.load")
	require.Len(t, loads, 2, "each entity is loaded once, on activation")
	for _, l := range loads {
		require.Equal(t, "ordo.handle", parentName(l))
		require.Equal(t, attr(byID[l.Parent.SpanID()], "ordo.id"), attr(l, "ordo.id"))
	}

	saves := named(spans, "ordo.save")
	require.NotEmpty(t, saves)
	for _, s := range saves {
		require.Contains(t, []string{"ordo.handle", "ordo.continue"}, parentName(s))
	}
	stores := named(spans, "ordo.store.save")
	require.Len(t, stores, len(saves))
	for _, s := range stores {
		require.Equal(t, "ordo.save", parentName(s))
	}
}

// Without a Tracer the host makes no span, not even with a global
// TracerProvider set, and adds no trace context to the metadata.
func TestTracingOff(t *testing.T) {
	exp, tp := newTracer(t)
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	t.Cleanup(func() { otel.SetTracerProvider(prev) })

	cfg := actors.DefaultLocalConfig()
	cfg.Shards = 8
	host := startHost(t, cfg, actors.HostDeps{Store: memory.New()}, spanKind)
	ownAll(t, host, cfg.Shards)
	ctx, root := tp.Tracer("test").Start(testCtx(t), "client")
	got, err := actors.Call[*wrapperspb.StringValue](ctx, host, actors.Ref{Kind: "span", ID: "a"}, wrapperspb.Bytes([]byte("b")))
	require.NoError(t, err)
	root.End()
	require.Equal(t, trace.SpanID{}.String()+"/", got.GetValue(), "no span in the handler's context, no traceparent")
	for _, s := range exp.GetSpans() {
		require.Equal(t, "client", s.Name, "the host made a span")
	}
}

func named(spans tracetest.SpanStubs, name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

func attr(s tracetest.SpanStub, key string) string {
	for _, a := range s.Attributes {
		if string(a.Key) == key {
			return a.Value.String()
		}
	}
	return ""
}
