package actors

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// parentBasedTracer returns a tracer that samples what its parent did
// (roots always), the spans it ended, and the context of an unsampled
// caller: a run started under it has a valid, unrecorded span.
func parentBasedTracer(t *testing.T) (*tracetest.InMemoryExporter, trace.Tracer, context.Context) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	unsampled := trace.ContextWithRemoteSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}}))
	return exp, tp.Tracer(TracerName), unsampled
}

// A Save is traced when any write it carries was made by a sampled run,
// whichever comes first in the batch: its parent is the first sampled
// write, every other write a link. A Save of unsampled writes only is not
// recorded.
func TestSaveSpanFollowsASampledWrite(t *testing.T) {
	exp, tracer, unsampledCaller := parentBasedTracer(t)
	ctx := context.Background()
	run := func(parent context.Context) *pending {
		_, span := tracer.Start(parent, "ordo.handle")
		t.Cleanup(func() { span.End() })
		return &pending{w: write{span: span}}
	}
	quiet1, quiet2, traced := run(unsampledCaller), run(unsampledCaller), run(ctx)
	require.False(t, quiet1.w.span.SpanContext().IsSampled())
	require.True(t, traced.w.span.SpanContext().IsSampled())
	b := &batcher{tracer: tracer}

	_, span := b.startSave(ctx, []*pending{quiet1, {w: write{}}, traced, quiet2})
	span.End()
	saves := named(exp.GetSpans(), "ordo.save")
	require.Len(t, saves, 1, "a Save with a traced write is traced")
	s := saves[0]
	require.Equal(t, traced.w.span.SpanContext().SpanID(), s.Parent.SpanID())
	require.Equal(t, traced.w.span.SpanContext().TraceID(), s.SpanContext.TraceID())
	var linked []trace.SpanID
	for _, l := range s.Links {
		linked = append(linked, l.SpanContext.SpanID())
	}
	require.ElementsMatch(t, []trace.SpanID{quiet1.w.span.SpanContext().SpanID(), quiet2.w.span.SpanContext().SpanID()}, linked)

	exp.Reset()
	_, span = b.startSave(ctx, []*pending{quiet1, quiet2})
	require.False(t, span.IsRecording())
	span.End()
	require.Empty(t, named(exp.GetSpans(), "ordo.save"), "a Save of unsampled writes only is not traced")
}

// A traced write that a newer write of its entity replaced before the
// Save (the newer state goes, once) is still traced with that Save.
func TestSaveSpanFollowsAReplacedTracedWrite(t *testing.T) {
	exp, tracer, unsampled := parentBasedTracer(t)
	ctx := context.Background()
	_, tracedRun := tracer.Start(ctx, "ordo.handle")
	_, quietRun := tracer.Start(unsampled, "ordo.handle")
	tracedRun.End()
	quietRun.End()

	p := newPending(write{span: tracedRun, done: func(error) {}}, nil)
	require.Same(t, p, p.add(write{span: quietRun, done: func(error) {}}, 60, false, nil), "the newer write replaces the older")
	b := &batcher{tracer: tracer}
	_, span := b.startSave(ctx, []*pending{p})
	span.End()
	saves := named(exp.GetSpans(), "ordo.save")
	require.Len(t, saves, 1)
	require.Equal(t, tracedRun.SpanContext().SpanID(), saves[0].Parent.SpanID())
	require.Len(t, saves[0].Links, 1)
	require.Equal(t, quietRun.SpanContext().SpanID(), saves[0].Links[0].SpanContext.SpanID())
}

func named(spans tracetest.SpanStubs, name string) tracetest.SpanStubs {
	var out tracetest.SpanStubs
	for _, s := range spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}
