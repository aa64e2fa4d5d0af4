package cluster

import (
	"context"
	"maps"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/proto/ordopb"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// TracerName is the instrumentation scope name of the spans a node's or a
// client's router makes (Config.TracerProvider, ClientConfig.TracerProvider).
// A node's tracers, this one and the entity host's (actors.TracerName),
// carry the scope attribute "ordo.node": the node's ID.
const TracerName = "github.com/ordo-actors/ordo/cluster"

// traceContext is the W3C Trace Context propagator: a span's context
// travels in an envelope's metadata as "traceparent" (and "tracestate").
var traceContext propagation.TraceContext

// Attribute keys of the router's spans.
const (
	attrNode    = attribute.Key("ordo.node")
	attrKind    = attribute.Key("ordo.kind")
	attrID      = attribute.Key("ordo.id")
	attrMessage = attribute.Key("ordo.message")
	attrRequest = attribute.Key("ordo.request_id")
	attrShard   = attribute.Key("ordo.shard")
	attrAttempt = attribute.Key("ordo.attempt")
	attrOwner   = attribute.Key("ordo.owner")
	attrCode    = attribute.Key("ordo.code")
)

// tracerOf returns tp's tracer of scope name for node ("" in a client),
// nil when tp is nil (tracing off).
func tracerOf(tp trace.TracerProvider, name, node string) trace.Tracer {
	if tp == nil {
		return nil
	}
	if node == "" {
		return tp.Tracer(name)
	}
	return tp.Tracer(name, trace.WithInstrumentationAttributes(attrNode.String(node)))
}

// tracedInvoke is invoke in an "ordo.call" span: a call of a client or
// of this node's caller, or a message an entity sends. Its parent is
// ctx's span, or else the span whose context the envelope carries (an
// entity's message: the run that sent it).
func (r *router) tracedInvoke(ctx context.Context, env *ordopb.Envelope, from actors.Sender) (*ordopb.Reply, error) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		ctx = traceContext.Extract(ctx, propagation.MapCarrier(env.GetMetadata()))
	}
	target := env.GetTarget()
	ctx, span := r.tracer.Start(ctx, "ordo.call", trace.WithAttributes(attrKind.String(target.GetKind()),
		attrID.String(target.GetId()), attrMessage.String(string(env.GetPayload().MessageName())),
		attrRequest.String(env.GetRequestId())))
	rep, err := r.invoke(ctx, env, from)
	endSpan(span, rep, err)
	return rep, err
}

// tracedAttempt is attempt in an "ordo.attempt" span, whose context the
// attempt's envelope carries to the owner: the owner's handling of the
// call is the attempt's child.
func (r *router) tracedAttempt(ctx context.Context, attempt int, shard uint32, env *ordopb.Envelope) (*ordopb.Reply, error) {
	attrs := []attribute.KeyValue{attrAttempt.Int(attempt), attrShard.Int64(int64(shard))}
	if owner, ok := r.table.Lookup(shard); ok {
		attrs = append(attrs, attrOwner.String(owner.NodeID))
	}
	ctx, span := r.tracer.Start(ctx, "ordo.attempt", trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	rep, err := r.attempt(ctx, shard, withTraceContext(ctx, env))
	endSpan(span, rep, err)
	return rep, err
}

// withTraceContext returns a shallow copy of env whose metadata carries
// the context of ctx's span. env itself is never changed: its sender may
// still read it (an earlier attempt, an entity's retry).
func withTraceContext(ctx context.Context, env *ordopb.Envelope) *ordopb.Envelope {
	md := make(map[string]string, len(env.GetMetadata())+2)
	maps.Copy(md, env.GetMetadata())
	for _, k := range traceContext.Fields() {
		delete(md, k)
	}
	traceContext.Inject(ctx, propagation.MapCarrier(md))
	cp := new(ordopb.Envelope)
	m := cp.ProtoReflect()
	env.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		m.Set(fd, v)
		return true
	})
	cp.Metadata = md
	return cp
}

// endSpan ends a call's or an attempt's span with its outcome: an error,
// or an error reply other than a handler's own refusal (ErrHandler), is an
// error.
func endSpan(span trace.Span, rep *ordopb.Reply, err error) {
	switch {
	case err != nil:
		span.SetStatus(codes.Error, err.Error())
	case rep.GetError() != nil:
		code := rep.GetError().GetCode()
		span.SetAttributes(attrCode.String(code.String()))
		if code != ordopb.Code_CODE_HANDLER {
			span.SetStatus(codes.Error, actors.ErrorFromProto(rep.GetError()).Error())
		}
	}
	span.End()
}
