package actors_test

import (
	"context"
	"fmt"
	"time"

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

// A deferred reply: Echo waits until an Add resolves every waiting Echo
// with the new value. The waiting caller is answered once the resolving
// write is durable.
func ExampleContext_Defer() {
	type ctxC = actors.Context[*testpb.Counter]
	latch := actors.MustKind("latch", func() *testpb.Counter { return new(testpb.Counter) },
		actors.On(func(c *ctxC, m *testpb.Echo) (*testpb.Value, error) {
			c.Defer("opened")
			return nil, nil
		}),
		actors.On(func(c *ctxC, m *testpb.Add) (*testpb.Value, error) {
			c.State.Value += m.Delta
			c.Resolve("opened", &testpb.Value{Value: c.State.Value}, nil)
			return &testpb.Value{Value: c.State.Value}, nil
		}))
	ctx := context.Background()
	host := exampleHost(ctx, latch)
	defer host.Shutdown(ctx)

	waited := make(chan int64)
	go func() {
		v, err := actors.Call[*testpb.Value](ctx, host, latch.Ref("door"), &testpb.Echo{}, actors.WithRequestID("wait-1"))
		if err != nil {
			panic(err)
		}
		waited <- v.GetValue()
	}()
	// Open the door once the Echo is waiting (its retry would wait too).
	for {
		v, err := actors.Call[*testpb.Value](ctx, host, latch.Ref("door"), &testpb.Add{Delta: 0})
		if err != nil {
			panic(err)
		}
		select {
		case got := <-waited:
			fmt.Println("opened with", got, "after", v.GetValue() == 0)
			return
		case <-time.After(time.Millisecond):
		}
	}
	// Output:
	// opened with 0 after true
}

// Co-location: an entity placed with another lives in its shard, so the
// two always share a node and their messages stay in memory.
func ExampleColocated() {
	account := actors.Ref{Kind: "account", ID: "acct-1"}
	transfer, err := actors.Colocated("transfer", account, "t-42")
	if err != nil {
		panic(err)
	}
	with, _ := actors.PlacedWith(transfer)
	fmt.Println(transfer.ID, with == account, actors.ShardOf(transfer, 256) == actors.ShardOf(account, 256))
	// Output:
	// {account/acct-1}t-42 true true
}

func exampleHost(ctx context.Context, kinds ...actors.Kind) *actors.Host {
	cfg := actors.DefaultLocalConfig()
	cfg.Shards = 4
	host, err := actors.NewHost(cfg, memory.New(), kinds...)
	if err != nil {
		panic(err)
	}
	if err := host.Start(ctx); err != nil {
		panic(err)
	}
	for shard := uint32(0); shard < 4; shard++ {
		if err := host.Own(shard, 1); err != nil {
			panic(err)
		}
	}
	return host
}
