package actors_test

import (
	"context"
	"fmt"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/proto/testpb"
	"github.com/ordo-actors/ordo/proto/testsvcpb"
)

// exampleCounter implements testsvcpb.CounterServiceServer, the handlers
// protoc-gen-ordo generated from proto/testsvcpb/counter.proto.
type exampleCounter struct{}

type typedCounterCtx = actors.Context[*testpb.Counter]

func (exampleCounter) Add(c *typedCounterCtx, m *testpb.Add) (*testpb.Value, error) {
	c.State.Value += m.Delta
	return &testpb.Value{Value: c.State.Value}, nil
}

// Get is a read handler: counter.proto marks it (ordo.v1.handler).read_only.
func (exampleCounter) Get(c *typedCounterCtx, _ *testpb.Get) (*testpb.Value, error) {
	return &testpb.Value{Value: c.State.Value}, nil
}

func (exampleCounter) Reject(c *typedCounterCtx, m *testpb.Reject) (*testpb.Value, error) {
	return nil, actors.HandlerError(m.Code, "rejected")
}

func (exampleCounter) Forward(c *typedCounterCtx, m *testpb.Forward) (*testpb.Value, error) {
	return nil, actors.HandlerError("unsupported", "no forwarding here")
}

// A kind declared as a protobuf service and called through the typed
// client generated for it (cmd/protoc-gen-ordo): the compiler checks every
// request and reply type, and the kind name comes from the service.
func Example_typedClient() {
	counter := testsvcpb.MustCounterServiceKind(func() *testpb.Counter { return new(testpb.Counter) }, exampleCounter{})
	ctx := context.Background()
	host := exampleHost(ctx, counter)
	defer host.Shutdown(ctx)

	client := testsvcpb.NewCounterServiceClient(host)
	v, err := client.Add(ctx, "c1", &testpb.Add{Delta: 5}, actors.WithRequestID("add-1"))
	fmt.Println(v.GetValue(), err)
	v, err = client.Add(ctx, "c1", &testpb.Add{Delta: 5}, actors.WithRequestID("add-1")) // a retry: applied once
	fmt.Println(v.GetValue(), err)
	v, err = client.Get(ctx, "c1", &testpb.Get{})
	fmt.Println(counter.Name(), v.GetValue(), err)
	_, err = client.Reject(ctx, "c1", &testpb.Reject{Code: "no"})
	fmt.Println(err)
	// Output:
	// 5 <nil>
	// 5 <nil>
	// counter 5 <nil>
	// actors: handler error: no: rejected
}
