package actors_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/ordo-actors/ordo/persistence"
	"github.com/ordo-actors/ordo/proto/ordopb"
	"github.com/ordo-actors/ordo/proto/testpb"
	"google.golang.org/protobuf/types/known/anypb"
)

// BenchmarkRequestReply compares one entity call through a Host with a raw
// protoactor RequestFuture to a plain actor carrying the same envelope and
// reply, run side by side in the same benchmark, in alternating chunks of
// benchChunk calls. throughput-ratio is raw ns/call ÷ ordo ns/call (1.0
// means as fast as raw protoactor).
const benchChunk = 500

func BenchmarkRequestReply(b *testing.B) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	system := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }))
	defer system.Shutdown()
	payload, _ := anypb.New(&testpb.Value{Value: 1})
	reply := &ordopb.Reply{Payload: payload}
	pid := system.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		if env, ok := c.Message().(*ordopb.Envelope); ok {
			r := &ordopb.Reply{RequestId: env.RequestId, Payload: reply.Payload}
			c.Respond(r)
		}
	}))

	for _, op := range []string{"read", "write"} {
		b.Run(op, func(b *testing.B) {
			h := newHarness(b, nil)
			ctx := context.Background()
			var msg = func() *ordopb.Envelope {
				var env *ordopb.Envelope
				if op == "read" {
					env, _ = actors.Envelope(ref("bench"), &testpb.Get{}, actors.NewRequestID())
				} else {
					env, _ = actors.Envelope(ref("bench"), &testpb.Add{Delta: 1}, actors.NewRequestID())
				}
				return env
			}
			if _, err := h.host.Invoke(ctx, msg()); err != nil { // activate
				b.Fatal(err)
			}
			b.ResetTimer()
			// Raw and ordo calls alternate in chunks, so that the machine's
			// drift over the run weighs on both alike.
			var raw, ordo time.Duration
			for done := 0; done < b.N; {
				n := min(benchChunk, b.N-done)
				start := time.Now()
				for i := 0; i < n; i++ {
					if _, err := system.Root.RequestFuture(pid, msg(), 10*time.Second).Result(); err != nil {
						b.Fatal(err)
					}
				}
				raw += time.Since(start)
				start = time.Now()
				for i := 0; i < n; i++ {
					r, err := h.host.Invoke(ctx, msg())
					if err != nil || r.GetError() != nil {
						b.Fatal(err, r.GetError())
					}
				}
				ordo += time.Since(start)
				done += n
			}
			b.ReportMetric(float64(raw.Nanoseconds())/float64(b.N), "raw-ns/call")
			b.ReportMetric(float64(ordo.Nanoseconds())/float64(b.N), "ordo-ns/call")
			b.ReportMetric(float64(raw)/float64(ordo), "throughput-ratio")
		})
	}
}

// BenchmarkGroupCommit measures entity writes/s and writes per Save with 256
// concurrent writers on distinct entities, for batch limits 1, 64 and 512,
// against a store that answers at once and one with 1 ms per Save.
func BenchmarkGroupCommit(b *testing.B) {
	for _, delay := range []time.Duration{0, time.Millisecond} {
		for _, limit := range []int{1, 64, 512} {
			b.Run(fmt.Sprintf("delay=%v/limit=%d", delay, limit), func(b *testing.B) {
				h := newHarness(b, func(c *actors.HostConfig, d *actors.HostDeps) { c.BatchMaxRecords = limit })
				h.store.DelaySaves(delay)
				const writers = 256
				ctx := context.Background()
				per := b.N/writers + 1
				b.ResetTimer()
				start := time.Now()
				var wg sync.WaitGroup
				for w := 0; w < writers; w++ {
					wg.Add(1)
					go func(w int) {
						defer wg.Done()
						for i := 0; i < per; i++ {
							if _, err := h.add(ctx, fmt.Sprintf("w%d", w), 1); err != nil {
								b.Error(err)
								return
							}
						}
					}(w)
				}
				wg.Wait()
				el := time.Since(start)
				st := h.host.Stats().Batch
				b.ReportMetric(float64(st.Writes)/el.Seconds(), "writes/s")
				b.ReportMetric(float64(st.Writes)/float64(st.Saves), "writes/save")
				b.ReportMetric(float64(st.Records)/float64(st.Saves), "records/save")
			})
		}
	}
}

// BenchmarkIdleEntityMemory activates n entities (one write each) and
// reports the heap bytes each idle active entity costs the node. The
// store acknowledges writes without keeping them (entity state lives in
// etcd or PostgreSQL, not in the node's heap), so the figure is the
// runtime's own: actor, mailbox, registry entry, state, dedup window.
func BenchmarkIdleEntityMemory(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprintf("entities=%d", n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				idleEntityMemory(b, n)
			}
		})
	}
}

func idleEntityMemory(b *testing.B, n int) {
	cfg := actors.DefaultLocalConfig()
	cfg.Shards = 8
	cfg.MaxActive = 2 * n
	cfg.IdleTimeout = time.Hour // nothing passivates while the entities are counted
	st := discardStore{}
	host, err := actors.NewHost(cfg, actors.HostDeps{Store: st}, newCounterKind(&guard{}, &counters{}))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if err := host.Start(ctx); err != nil {
		b.Fatal(err)
	}
	for s := range cfg.Shards {
		if err := host.Own(uint32(s), 1); err != nil {
			b.Fatal(err)
		}
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 512)
	for j := 0; j < n; j++ {
		wg.Add(1)
		sem <- struct{}{}
		go func(j int) {
			defer wg.Done()
			defer func() { <-sem }()
			if _, err := actors.Call[*testpb.Value](ctx, host, ref(fmt.Sprintf("m%07d", j)), &testpb.Add{Delta: 1}); err != nil {
				b.Error(err)
			}
		}(j)
	}
	wg.Wait()
	runtime.GC()
	runtime.ReadMemStats(&after)
	if a := host.Stats().Active; a != n {
		b.Fatalf("%d active, want %d", a, n)
	}
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(n), "bytes/entity")
	ctx2, cancel := context.WithTimeout(ctx, 5*time.Minute)
	_ = host.Shutdown(ctx2)
	cancel()
}

// discardStore acknowledges every write and keeps nothing.
type discardStore struct{}

func (discardStore) Fence(context.Context, uint32, int64) error { return nil }
func (discardStore) Load(context.Context, string, string) (persistence.Record, error) {
	return persistence.Record{}, persistence.ErrNotFound
}
func (discardStore) Save(_ context.Context, recs []persistence.Record) (map[uint32]error, error) {
	out := make(map[uint32]error)
	for _, r := range recs {
		out[r.Shard] = nil
	}
	return out, nil
}
func (discardStore) Close() error { return nil }

// BenchmarkForward measures the entity-to-entity path: each op is a client
// write to a counter whose handler sends a Request to another counter
// (testpb.Forward), and that request's write and continuation. The target
// is in another shard (the message is encoded and routed, as between
// nodes, here through the host's local router) or in the sender's own
// (co-located: handed over in memory). 32 senders run at once; the op's
// allocations are the whole chain's.
func BenchmarkForward(b *testing.B) {
	for _, where := range []string{"other-shard", "same-shard"} {
		b.Run(where, func(b *testing.B) {
			h := newHarness(b, nil)
			const senders = 32
			from, to := make([]string, senders), make([]string, senders)
			for i := range senders {
				from[i] = fmt.Sprintf("s%d", i)
				sh := actors.ShardOf(ref(from[i]), h.cfg.Shards)
				for j := 0; ; j++ {
					t := fmt.Sprintf("t%d-%d", i, j)
					if same := actors.ShardOf(ref(t), h.cfg.Shards) == sh; same == (where == "same-shard") {
						to[i] = t
						break
					}
				}
			}
			ctx := context.Background()
			forward := func(i int) {
				m := &testpb.Forward{To: to[i], Delta: 1, RequestId: actors.NewRequestID()}
				if _, err := actors.Call[*testpb.Value](ctx, h.host, ref(from[i]), m); err != nil {
					b.Error(err)
				}
			}
			for i := range senders { // activate both ends
				forward(i)
			}
			waitAdds(b, h, senders)
			h.n.adds.Store(0)
			b.ReportAllocs()
			b.ResetTimer()
			var wg sync.WaitGroup
			for i := range senders {
				n := b.N/senders + min(1, max(0, b.N%senders-i))
				wg.Go(func() {
					for range n {
						forward(i)
					}
				})
			}
			wg.Wait()
			waitAdds(b, h, int64(b.N))
		})
	}
}

// waitAdds waits until the harness's counters applied n Adds.
func waitAdds(b *testing.B, h *harness, n int64) {
	testutil.Eventually(b, 30*time.Second, 100*time.Microsecond, func() error {
		if got := h.n.adds.Load(); got < n {
			return fmt.Errorf("%d of %d forwarded adds applied", got, n)
		}
		return nil
	})
}
