package actors_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/persistence/memory"
	"github.com/ordo-actors/ordo/proto/ordopb"
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
	host, err := actors.NewHost(cfg, actors.HostDeps{Store: memory.New()}, counter)
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

// A handler passes its Context wherever a context.Context is expected: it
// carries the caller's deadline and metadata, and ends when the entity
// stops or the handler returns.
func ExampleContext() {
	type ctxC = actors.Context[*testpb.Counter]
	// rate stands for any library call that takes a context.
	rate := func(ctx context.Context, delta int64) (int64, error) {
		if err := ctx.Err(); err != nil {
			return 0, err // the caller gave up, or the entity is stopping
		}
		tenant, _ := actors.MetadataValue(ctx, "tenant")
		_, hasDeadline := ctx.Deadline()
		fmt.Println("tenant:", tenant, "deadline:", hasDeadline)
		return 2 * delta, nil
	}
	pricer := actors.MustKind("pricer", func() *testpb.Counter { return new(testpb.Counter) },
		actors.On(func(c *ctxC, m *testpb.Add) (*testpb.Value, error) {
			r, err := rate(c, m.Delta) // c is the request's context.Context
			if err != nil {
				return nil, err
			}
			c.State.Value += r
			return &testpb.Value{Value: c.State.Value}, nil
		}))
	ctx := context.Background()
	host := exampleHost(ctx, pricer)
	defer host.Shutdown(ctx)

	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cctx = actors.WithMetadata(cctx, "tenant", "acme")
	v, err := actors.Call[*testpb.Value](cctx, host, pricer.Ref("p1"), &testpb.Add{Delta: 21})
	fmt.Println("value:", v.GetValue(), err)
	// Output:
	// tenant: acme deadline: true
	// value: 42 <nil>
}

// OnPassivate runs before an idle entity stops; what it writes is durable
// before the entity is gone, and the next activation sees it.
func ExampleOnPassivate() {
	type ctxC = actors.Context[*testpb.Counter]
	napped := make(chan struct{}, 1)
	session := actors.MustKind("session", func() *testpb.Counter { return new(testpb.Counter) },
		actors.On(func(c *ctxC, m *testpb.Add) (*testpb.Value, error) {
			c.State.Value += m.Delta
			return &testpb.Value{Value: c.State.Value}, nil
		}),
		actors.OnPassivate(func(c *ctxC) {
			c.State.Forwarded++ // count the naps
			select {
			case napped <- struct{}{}:
			default:
			}
		}),
		actors.OnRead(func(c *ctxC, m *testpb.Get) (*testpb.Value, error) {
			return &testpb.Value{Value: c.State.Value, PrevSeq: uint64(c.State.Forwarded)}, nil
		}))
	ctx := context.Background()
	cfg := actors.DefaultLocalConfig()
	cfg.Shards = 4
	cfg.IdleTimeout = 10 * time.Millisecond
	host := exampleHostWith(ctx, cfg, session)
	defer host.Shutdown(ctx)

	if _, err := actors.Call[*testpb.Value](ctx, host, session.Ref("s1"), &testpb.Add{Delta: 5}); err != nil {
		panic(err)
	}
	<-napped // the entity went idle and passivates; a call now waits for its next activation
	v, err := actors.Call[*testpb.Value](ctx, host, session.Ref("s1"), &testpb.Get{})
	fmt.Println("value:", v.GetValue(), "naps:", v.GetPrevSeq(), err)
	// Output:
	// value: 5 naps: 1 <nil>
}

// attemptCounter is a Router that counts the attempts of each request ID
// and delivers them to its host.
type attemptCounter struct {
	host *actors.Host
	mu   sync.Mutex
	n    map[string]int
}

func (r *attemptCounter) Route(_ context.Context, env *ordopb.Envelope, _ actors.Sender, done func(*ordopb.Reply)) {
	r.mu.Lock()
	r.n[env.GetRequestId()]++
	r.mu.Unlock()
	r.host.Submit(env, done)
}

func (r *attemptCounter) attempts(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[id]
}

// Request with a retry policy. A retryable error (the target's shard has
// no owner: the host owns every shard but 1) is retried with backoff, up
// to the policy's three attempts, all with the same request ID; then the
// continuation gets the last error. A permanent error (an unknown kind)
// comes back after one attempt.
func ExampleRequest() {
	type ctxC = actors.Context[*testpb.Counter]
	outcome := make(chan error)
	policy := actors.RetryPolicy{Initial: time.Millisecond, Max: 10 * time.Millisecond, Multiplier: 2, Jitter: 0.5, MaxAttempts: 3}
	relay := actors.MustKind("relay", func() *testpb.Counter { return new(testpb.Counter) },
		actors.On(func(c *ctxC, m *testpb.Forward) (*testpb.Value, error) {
			kind, id, _ := strings.Cut(m.To, "/")
			actors.Request(c, actors.Ref{Kind: kind, ID: id}, &testpb.Add{Delta: m.Delta}, m.RequestId,
				func(c *ctxC, v *testpb.Value, err error) { outcome <- err },
				actors.WithRetry(policy))
			return &testpb.Value{}, nil
		}))
	counter := actors.MustKind("counter", func() *testpb.Counter { return new(testpb.Counter) },
		actors.On(func(c *ctxC, m *testpb.Add) (*testpb.Value, error) {
			c.State.Value += m.Delta
			return &testpb.Value{Value: c.State.Value}, nil
		}))

	ctx := context.Background()
	router := &attemptCounter{n: make(map[string]int)}
	cfg := actors.DefaultLocalConfig()
	cfg.Shards = 4
	host, err := actors.NewHost(cfg, actors.HostDeps{Router: router, Store: memory.New()}, relay, counter)
	if err != nil {
		panic(err)
	}
	router.host = host
	if err := host.Start(ctx); err != nil {
		panic(err)
	}
	defer host.Shutdown(ctx)
	for _, shard := range []uint32{0, 2, 3} { // counter/c1 is in shard 1, relay/r1 in 3
		if err := host.Own(shard, 1); err != nil {
			panic(err)
		}
	}

	for _, to := range []string{"counter/c1", "ghost/g1"} {
		id := "fwd-" + to
		_, err := actors.Call[*testpb.Value](ctx, host, relay.Ref("r1"), &testpb.Forward{To: to, Delta: 1, RequestId: id})
		if err != nil {
			panic(err)
		}
		err = <-outcome
		fmt.Printf("%s: %d attempt(s), retryable %v, not here %v\n",
			to, router.attempts(id), actors.Retryable(err), errors.Is(err, actors.ErrNotHere))
	}
	// Output:
	// counter/c1: 3 attempt(s), retryable true, not here true
	// ghost/g1: 1 attempt(s), retryable false, not here false
}

func exampleHost(ctx context.Context, kinds ...actors.Kind) *actors.Host {
	cfg := actors.DefaultLocalConfig()
	cfg.Shards = 4
	return exampleHostWith(ctx, cfg, kinds...)
}

func exampleHostWith(ctx context.Context, cfg actors.HostConfig, kinds ...actors.Kind) *actors.Host {
	host, err := actors.NewHost(cfg, actors.HostDeps{Store: memory.New()}, kinds...)
	if err != nil {
		panic(err)
	}
	if err := host.Start(ctx); err != nil {
		panic(err)
	}
	for shard := uint32(0); shard < uint32(cfg.Shards); shard++ {
		if err := host.Own(shard, 1); err != nil {
			panic(err)
		}
	}
	return host
}
