package cluster_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/cluster"
	"github.com/ordo-actors/ordo/proto/testpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// traceKind answers with the traceparent its handler's context carries,
// and its relay forwards a request to another entity of the kind, so that
// a trace can be followed across nodes and entities.
var traceKind = actors.MustKind("trace", func() *testpb.Counter { return new(testpb.Counter) },
	actors.OnRead(func(c *counterCtx, m *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		tp, _ := actors.MetadataValue(c, "traceparent")
		return wrapperspb.String(tp), nil
	}),
	actors.On(func(c *counterCtx, m *wrapperspb.BytesValue) (*wrapperspb.StringValue, error) {
		key := "relay-" + c.RequestID()
		c.Defer(key)
		actors.Request(c, actors.Ref{Kind: "trace", ID: string(m.Value)}, wrapperspb.String("who"), c.RequestID()+":fwd",
			func(c *counterCtx, r *wrapperspb.StringValue, err error) { c.ResolveNow(key, r, err) })
		return nil, nil
	}))

// Metadata a client attaches to its context reaches the handler on the
// node that owns the entity, and a handler's own request carries it on.
func TestMetadataCrossesNodes(t *testing.T) {
	e := newEnv(t, nil, 8)
	e.startKinds(e.config("n1"), counterKind, traceKind)
	e.startKinds(e.config("n2"), counterKind, traceKind)
	e.converged(e.nodes...)
	client := e.dial()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ctx = actors.WithMetadata(ctx, "traceparent", tp)
	for i := 0; i < 8; i++ { // entities on both nodes
		ref := traceKind.Ref(fmt.Sprintf("e%d", i))
		got, err := cluster.Call[*wrapperspb.StringValue](ctx, client, ref, wrapperspb.String("who"))
		if err != nil || got.GetValue() != tp {
			t.Fatalf("%s saw traceparent %q (%v), want %q", ref, got.GetValue(), err, tp)
		}
		got, err = cluster.Call[*wrapperspb.StringValue](ctx, client, ref, wrapperspb.Bytes([]byte(fmt.Sprintf("f%d", i))))
		if err != nil || got.GetValue() != tp {
			t.Fatalf("the entity %s relayed to saw traceparent %q (%v), want %q", ref, got.GetValue(), err, tp)
		}
	}
}
