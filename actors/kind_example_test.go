package actors_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/proto/testpb"
)

// NewKind declares a kind: its name, a fresh state, and one handler per
// request type. Declaration errors are returned, not panicked (MustKind
// panics, for package-level declarations).
func ExampleNewKind() {
	type ctxC = actors.Context[*testpb.Counter]
	counter, err := actors.NewKind("counter", func() *testpb.Counter { return new(testpb.Counter) },
		actors.On(func(c *ctxC, m *testpb.Add) (*testpb.Value, error) { // a write: state saved before the reply leaves
			c.State.Value += m.Delta
			return &testpb.Value{Value: c.State.Value}, nil
		}),
		actors.OnRead(func(c *ctxC, m *testpb.Get) (*testpb.Value, error) { // a read: nothing written
			return &testpb.Value{Value: c.State.Value}, nil
		}))
	fmt.Println(counter.Name(), counter.Ref("c1"), err)

	_, err = actors.NewKind("Bad Name", func() *testpb.Counter { return new(testpb.Counter) })
	fmt.Println(err)
	// Output:
	// counter counter/c1 <nil>
	// actors: invalid kind name "Bad Name": want [a-z][a-z0-9_.-]{0,63}
}

// Call sends a request to an entity through any Invoker (a Host, a cluster
// node or client, a dev node) and decodes the reply as R. Errors match
// the package's sentinels.
func ExampleCall() {
	type ctxC = actors.Context[*testpb.Counter]
	counter := actors.MustKind("counter", func() *testpb.Counter { return new(testpb.Counter) },
		actors.On(func(c *ctxC, m *testpb.Add) (*testpb.Value, error) {
			c.State.Value += m.Delta
			return &testpb.Value{Value: c.State.Value}, nil
		}))
	ctx := context.Background()
	host := exampleHost(ctx, counter)
	defer host.Shutdown(ctx)

	v, err := actors.Call[*testpb.Value](ctx, host, counter.Ref("c1"), &testpb.Add{Delta: 2})
	fmt.Println(v.GetValue(), err)
	_, err = actors.Call[*testpb.Value](ctx, host, counter.Ref("c1"), &testpb.Echo{N: 1})
	fmt.Println(errors.Is(err, actors.ErrBadRequest))
	_, err = actors.Call[*testpb.Value](ctx, host, actors.Ref{Kind: "nope", ID: "x"}, &testpb.Add{Delta: 1})
	fmt.Println(errors.Is(err, actors.ErrUnknownKind))
	// Output:
	// 2 <nil>
	// true
	// true
}
