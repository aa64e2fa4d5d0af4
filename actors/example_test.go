package actors_test

import (
	"context"
	"fmt"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/persistence/memory"
	"github.com/ordo-actors/ordo/proto/testpb"
)

// A counter kind, a host owning every shard at epoch 1 over the in-memory
// store, and two calls: the retry with the same request ID is applied once.
func Example() {
	counter := actors.MustKind("counter", func() *testpb.Counter { return new(testpb.Counter) },
		actors.On(func(c *actors.Context[*testpb.Counter], m *testpb.Add) (*testpb.Value, error) {
			if m.Delta <= 0 {
				return nil, actors.HandlerError("invalid_amount", "delta %d is not positive", m.Delta)
			}
			c.State.Value += m.Delta
			return &testpb.Value{Value: c.State.Value}, nil
		}))

	ctx := context.Background()
	cfg := actors.DefaultLocalConfig()
	cfg.Shards = 4
	host, err := actors.NewHost(cfg, memory.New(), counter)
	if err != nil {
		panic(err)
	}
	if err := host.Start(ctx); err != nil {
		panic(err)
	}
	defer host.Shutdown(ctx)
	for shard := uint32(0); shard < 4; shard++ {
		if err := host.Own(shard, 1); err != nil {
			panic(err)
		}
	}

	for i := 0; i < 2; i++ {
		v, err := actors.Call[*testpb.Value](ctx, host, counter.Ref("c1"), &testpb.Add{Delta: 5}, actors.WithRequestID("req-1"))
		fmt.Println(v.GetValue(), err)
	}
	_, err = actors.Call[*testpb.Value](ctx, host, counter.Ref("c1"), &testpb.Add{Delta: -1})
	fmt.Println(err)
	// Output:
	// 5 <nil>
	// 5 <nil>
	// actors: handler error: invalid_amount: delta -1 is not positive
}
