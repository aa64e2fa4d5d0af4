package actors

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"github.com/ordo-actors/ordo/persistence"
	"github.com/ordo-actors/ordo/proto/ordopb"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Tracing. With HostConfig.Tracer set, a host makes these spans:
//
//   - "ordo.handle" (server): an entity handles a call, from its
//     activation (if the call activates it) until the handler's run is
//     committed; a child of the span whose context the envelope's
//     metadata carries (W3C traceparent). The handler's Context carries
//     this span (trace.SpanFromContext), and the messages it sends carry
//     its context in their metadata, so whoever handles them continues the
//     trace: one client call and every entity-to-entity message it leads
//     to are one trace.
//   - "ordo.continue": a continuation runs (the outcome of a Request came
//     back), a child of the span of the run that made the Request.
//   - "ordo.save": the batcher's Save of a group of writes, a child of
//     the span of the first run whose write it carries, linked to the
//     runs of the others (the latest write of each entity).
//   - "ordo.store.fence", "ordo.store.load", "ordo.store.save" (client):
//     each store call, a child of the span it was made under (a shard's
//     fence, made when the shard is acquired, starts a trace of its own).
//
// Without a Tracer none of this exists: no span, no metadata, no store
// wrapper; each hook is one nil check.

// TracerName is the instrumentation scope name of a host's spans: the name
// to pass to a TracerProvider's Tracer for HostConfig.Tracer.
const TracerName = "github.com/ordo-actors/ordo/actors"

// traceContext is the W3C Trace Context propagator: a span's context
// travels in an envelope's metadata as "traceparent" (and "tracestate").
var traceContext propagation.TraceContext

// Attribute keys of the host's spans.
const (
	attrKind    = attribute.Key("ordo.kind")
	attrID      = attribute.Key("ordo.id")
	attrMessage = attribute.Key("ordo.message")
	attrRequest = attribute.Key("ordo.request_id")
	attrShard   = attribute.Key("ordo.shard")
	attrEpoch   = attribute.Key("ordo.epoch")
	attrTarget  = attribute.Key("ordo.target")
	attrCode    = attribute.Key("ordo.code")
	attrRecords = attribute.Key("ordo.records")
	attrRefused = attribute.Key("ordo.refused_shards")
)

// startSpan starts the span of the call env to e, named msg.
func (e *entity) startSpan(env *ordopb.Envelope, msg protoreflect.FullName) {
	t := e.h.cfg.Tracer
	if t == nil {
		return
	}
	parent := traceContext.Extract(e.h.ctx, propagation.MapCarrier(env.GetMetadata()))
	_, e.span = t.Start(parent, "ordo.handle", trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attrKind.String(e.en.ref.Kind), attrID.String(e.en.ref.ID), attrMessage.String(string(msg)),
			attrRequest.String(env.GetRequestId()), attrShard.Int64(int64(e.en.shard.id)), attrEpoch.Int64(e.epoch)))
}

// startContSpan starts the span of the continuation of out: a child of
// the span of the run that sent out (the context its metadata carries).
func (e *entity) startContSpan(out *outMsg) {
	t := e.h.cfg.Tracer
	if t == nil {
		return
	}
	parent := traceContext.Extract(e.h.ctx, propagation.MapCarrier(out.env.GetMetadata()))
	_, e.span = t.Start(parent, "ordo.continue", trace.WithAttributes(attrKind.String(e.en.ref.Kind),
		attrID.String(e.en.ref.ID), attrTarget.String(out.to.String()), attrRequest.String(out.env.GetRequestId())))
}

// spanOutcome records how a handler ended on the entity's span: a panic
// or an error is an error; a handler's own refusal (ErrHandler) is an
// outcome and only named by its code.
func (e *entity) spanOutcome(err error, panicked any) {
	if e.span == nil {
		return
	}
	switch {
	case panicked != nil:
		e.span.SetStatus(codes.Error, fmt.Sprintf("handler panicked: %v", panicked))
	case err != nil:
		code := handlerErrorProto(err).GetCode()
		e.span.SetAttributes(attrCode.String(code.String()))
		if code != ordopb.Code_CODE_HANDLER {
			e.span.SetStatus(codes.Error, err.Error())
		}
	}
}

// endSpan ends the entity's span, if any.
func (e *entity) endSpan() {
	if e.span != nil {
		e.span.End()
		e.span = nil
	}
}

// withSpan returns ctx carrying the entity's span, if any.
func (e *entity) withSpan(ctx context.Context) context.Context {
	if e.span == nil {
		return ctx
	}
	return trace.ContextWithSpan(ctx, e.span)
}

// traced gives a run the entity's span, if any: its Context carries the
// span, and its metadata (which the messages it sends carry) the span's
// context in place of the caller's.
func (e *entity) traced(in runIn) runIn {
	if e.span == nil {
		return in
	}
	in.span = e.span
	md := make(map[string]string, len(in.md)+2)
	maps.Copy(md, in.md)
	for _, k := range traceContext.Fields() {
		delete(md, k)
	}
	traceContext.Inject(trace.ContextWithSpanContext(e.h.ctx, e.span.SpanContext()), propagation.MapCarrier(md))
	in.md = md
	return in
}

// startSave starts the span of a Save of batch.
func (b *batcher) startSave(ctx context.Context, batch []*pending) (context.Context, trace.Span) {
	if b.tracer == nil {
		return ctx, nil
	}
	// The Save's parent is the first write of a sampled run, so that a
	// Save carrying a traced write is traced under a sampler that follows
	// the parent's decision (sdktrace.ParentBased); every other write is
	// a link, the sampled writes a newer one of their entity replaced
	// too.
	var spans []trace.SpanContext
	first := -1
	add := func(span trace.Span) {
		sc := span.SpanContext()
		if first < 0 && sc.IsSampled() {
			first = len(spans)
		}
		spans = append(spans, sc)
	}
	for _, p := range batch {
		if p.w.span == nil {
			continue
		}
		add(p.w.span)
		for _, s := range p.traced { // the sampled writes p.w replaced
			add(s)
		}
	}
	if first < 0 && len(spans) > 0 {
		first = 0
	}
	var links []trace.Link
	if first >= 0 {
		ctx = trace.ContextWithSpanContext(ctx, spans[first])
		links = make([]trace.Link, 0, len(spans)-1)
		for i, sc := range spans {
			if i != first {
				links = append(links, trace.Link{SpanContext: sc})
			}
		}
	}
	return b.tracer.Start(ctx, "ordo.save", trace.WithLinks(links...), trace.WithAttributes(attrRecords.Int(len(batch))))
}

// endSave ends the span of a Save with its outcome.
func endSave(span trace.Span, outcome map[uint32]error, err error) {
	if span == nil {
		return
	}
	endStore(span, err, outcome)
}

// endStore ends the span of a store call: an error, or shards whose
// records were refused (a Save's outcome), make it an error.
func endStore(span trace.Span, err error, outcome map[uint32]error) {
	switch {
	case err != nil && !errors.Is(err, persistence.ErrNotFound):
		span.SetStatus(codes.Error, err.Error())
	case err == nil:
		refused := 0
		var first error
		for _, e := range outcome {
			if e != nil {
				refused++
				first = e
			}
		}
		if refused > 0 {
			span.SetAttributes(attrRefused.Int(refused))
			span.SetStatus(codes.Error, fmt.Sprintf("%d shards refused, e.g. %v", refused, first))
		}
	}
	span.End()
}

// tracedStore makes a span of every call to its store.
type tracedStore struct {
	persistence.Store
	tracer trace.Tracer
}

var _ persistence.Store = tracedStore{}

func (s tracedStore) Fence(ctx context.Context, shard uint32, epoch int64) error {
	ctx, span := s.tracer.Start(ctx, "ordo.store.fence", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attrShard.Int64(int64(shard)), attrEpoch.Int64(epoch)))
	err := s.Store.Fence(ctx, shard, epoch)
	endStore(span, err, nil)
	return err
}

func (s tracedStore) Load(ctx context.Context, kind, id string) (persistence.Record, error) {
	ctx, span := s.tracer.Start(ctx, "ordo.store.load", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attrKind.String(kind), attrID.String(id)))
	rec, err := s.Store.Load(ctx, kind, id)
	endStore(span, err, nil)
	return rec, err
}

func (s tracedStore) Save(ctx context.Context, recs []persistence.Record) (map[uint32]error, error) {
	ctx, span := s.tracer.Start(ctx, "ordo.store.save", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attrRecords.Int(len(recs))))
	outcome, err := s.Store.Save(ctx, recs)
	endStore(span, err, outcome)
	return outcome, err
}

// traceEnvelope gives env the context of ctx's span, if ctx has one and
// env carries no trace context yet. The envelope's metadata map is
// replaced, never changed in place (contexts may share it).
func traceEnvelope(ctx context.Context, env *ordopb.Envelope) {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return
	}
	md := env.GetMetadata()
	if _, ok := md["traceparent"]; ok {
		return
	}
	md = maps.Clone(md)
	if md == nil {
		md = make(map[string]string, 2)
	}
	traceContext.Inject(ctx, propagation.MapCarrier(md))
	env.Metadata = md
}
