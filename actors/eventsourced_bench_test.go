package actors_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/persistence"
	"github.com/ordo-actors/ordo/persistence/memory"
	"github.com/ordo-actors/ordo/proto/testpb"
	"google.golang.org/protobuf/proto"
)

// An account as the bank keeps one: a balance and the transfers in flight
// (at most four here: each transfer forgets the oldest).
func transfer(s *testpb.Ledger, delta int64, id string) {
	s.Balance += delta
	s.Applied++
	if s.Pending == nil {
		s.Pending = make(map[string]int64)
	}
	s.Pending[id] = delta
	for len(s.Pending) > 4 {
		keys := make([]string, 0, len(s.Pending))
		for k := range s.Pending {
			keys = append(keys, k)
		}
		delete(s.Pending, slices.Min(keys))
	}
}

type ledgerCtx = actors.Context[*testpb.Ledger]

// ledgerKinds returns the state-based and the event-sourced account, with
// the same handler: Add{Delta, Sender: transfer ID}, and Ballast bytes of
// state (set once, on the first Add).
func ledgerKinds(ballast int) (state, events *actors.KindOf[*testpb.Ledger]) {
	newState := func() *testpb.Ledger { return new(testpb.Ledger) }
	state = actors.MustKind("counter", newState,
		actors.On(func(c *ledgerCtx, m *testpb.Add) (*testpb.Value, error) {
			if c.State.Ballast == nil {
				c.State.Ballast = make([]byte, ballast)
			}
			transfer(c.State, m.Delta, m.Sender)
			return &testpb.Value{Value: c.State.Balance}, nil
		}))
	events = actors.MustKind("counter", newState,
		actors.EventSourced(actors.EventSourcing[*testpb.Ledger]{
			Events: []proto.Message{(*testpb.Added)(nil)},
			// A tenth of the default, so that a run of a few hundred
			// transfers per account writes several snapshots.
			SnapshotEvery: 100,
			Apply: func(s *testpb.Ledger, ev proto.Message) error {
				a := ev.(*testpb.Added)
				if a.Ballast != nil {
					s.Ballast = a.Ballast
				}
				transfer(s, a.Delta, a.Note)
				return nil
			},
		}),
		actors.On(func(c *ledgerCtx, m *testpb.Add) (*testpb.Value, error) {
			ev := &testpb.Added{Delta: m.Delta, Note: m.Sender}
			if c.State.Ballast == nil {
				ev.Ballast = make([]byte, ballast)
			}
			c.Emit(ev)
			return &testpb.Value{Value: c.State.Balance}, nil
		}))
	return state, events
}

// byteCounter counts the bytes Save is given: records' data and events'.
type byteCounter struct {
	*memory.Store
	bytes atomic.Int64
}

func (s *byteCounter) Save(ctx context.Context, recs []persistence.Record) (map[uint32]error, error) {
	var n int64
	for _, r := range recs {
		n += int64(len(r.Data))
		for _, e := range r.Events {
			n += int64(len(e.Data))
		}
	}
	s.bytes.Add(n)
	return s.Store.Save(ctx, recs)
}

// BenchmarkEventSourcedAccount compares the event-sourced account with the
// state-based one, side by side in one run: 64 writers, each on its own
// account, make b.N transfers in all against each kind (a memory store,
// answering at once or after 1 ms per Save), for a small state and one
// carrying 2 KiB. It reports each kind's writes/s and the bytes each
// transfer hands to Save (records' data, snapshots included, plus event
// data), and the ratio of the event-sourced kind's throughput to the
// state-based one's. The event-sourced kind snapshots every 100 events.
// The kinds run in alternating rounds, each on a fresh host and store.
func BenchmarkEventSourcedAccount(b *testing.B) {
	for _, delay := range []time.Duration{0, time.Millisecond} {
		for _, ballast := range []int{0, 2048} {
			b.Run(fmt.Sprintf("delay=%v/state=%dB", delay, ballast), func(b *testing.B) {
				stateKind, eventKind := ledgerKinds(ballast)
				run := func(kind actors.Kind, n int) (elapsed time.Duration, ops, bytes int64) {
					mem := memory.New()
					defer mem.Close()
					mem.DelaySaves(delay)
					store := &byteCounter{Store: mem}
					cfg := actors.DefaultLocalConfig()
					cfg.Shards = 64
					h, err := actors.NewHost(cfg, actors.HostDeps{Store: store}, kind)
					if err != nil {
						b.Fatal(err)
					}
					ctx := context.Background()
					if err := h.Start(ctx); err != nil {
						b.Fatal(err)
					}
					defer func() {
						sctx, cancel := context.WithTimeout(ctx, time.Minute)
						defer cancel()
						_ = h.Shutdown(sctx)
					}()
					for s := range uint32(cfg.Shards) {
						if err := h.Own(s, 1); err != nil {
							b.Fatal(err)
						}
					}
					const writers = 64
					per := n/writers + 1
					call := func(w, i int) error {
						_, err := actors.Call[*testpb.Value](ctx, h, ref(fmt.Sprintf("acct-%d", w)),
							&testpb.Add{Delta: 1, Sender: fmt.Sprintf("t%08d", i)})
						return err
					}
					for w := range writers { // activation, and the ballast's first write
						if err := call(w, -1); err != nil {
							b.Fatal(err)
						}
					}
					store.bytes.Store(0)
					start := time.Now()
					var wg sync.WaitGroup
					for w := range writers {
						wg.Add(1)
						go func() {
							defer wg.Done()
							for i := range per {
								if err := call(w, i); err != nil {
									b.Error(err)
									return
								}
							}
						}()
					}
					wg.Wait()
					return time.Since(start), int64(writers * per), store.bytes.Load()
				}
				// Rounds alternate the kinds, so that both see the same
				// machine (a shared one varies by the second).
				const rounds = 3
				var st, et time.Duration
				var sops, eops, sbytes, ebytes int64
				b.ResetTimer()
				for range rounds {
					for _, k := range []actors.Kind{stateKind, eventKind} {
						runtime.GC()
						el, ops, bytes := run(k, b.N/rounds)
						if k == stateKind {
							st, sops, sbytes = st+el, sops+ops, sbytes+bytes
						} else {
							et, eops, ebytes = et+el, eops+ops, ebytes+bytes
						}
					}
				}
				sw, ew := float64(sops)/st.Seconds(), float64(eops)/et.Seconds()
				sb, eb := float64(sbytes)/float64(sops), float64(ebytes)/float64(eops)
				b.ReportMetric(sw, "state-writes/s")
				b.ReportMetric(ew, "es-writes/s")
				b.ReportMetric(ew/sw, "es/state-throughput")
				b.ReportMetric(sb, "state-B/transfer")
				b.ReportMetric(eb, "es-B/transfer")
			})
		}
	}
}

// BenchmarkEventSourcedActivation measures the activation of an account
// with 10,000 events: fence, record load and replay of the events after
// its snapshot, until it answers a read. With snapshots every 1,000 events
// (written by runs of seven events, so the last lands at 9,009) the
// activation replays 991 of them; without snapshots, all 10,000.
func BenchmarkEventSourcedActivation(b *testing.B) {
	for _, every := range []int{1000, 1 << 30} {
		name := fmt.Sprintf("snapshot-every=%d", every)
		if every > 10_000 {
			name = "no-snapshots"
		}
		b.Run(name, func(b *testing.B) {
			var ec esCounter
			kind := ec.kind(actors.EventSourcing[*testpb.Counter]{SnapshotEvery: every})
			store := memory.New()
			defer store.Close()
			cfg := actors.DefaultLocalConfig()
			cfg.Shards = 1
			ctx := context.Background()
			host := func(epoch int64) *actors.Host {
				h, err := actors.NewHost(cfg, actors.HostDeps{Store: store}, kind)
				if err != nil {
					b.Fatal(err)
				}
				if err := h.Start(ctx); err != nil {
					b.Fatal(err)
				}
				if err := h.Own(0, epoch); err != nil {
					b.Fatal(err)
				}
				return h
			}
			stop := func(h *actors.Host) { // no snapshot on the way out
				h.DropAll(errors.New("stopped"))
				sctx, cancel := context.WithTimeout(ctx, time.Minute)
				defer cancel()
				_ = h.Shutdown(sctx)
			}
			h := host(1)
			for written := 0; written < 10_000; {
				n := min(7, 10_000-written)
				if _, err := actors.Call[*testpb.Value](ctx, h, ref("a"), &testpb.Arm{Count: int32(n), Delta: 1}); err != nil {
					b.Fatal(err)
				}
				written += n
			}
			stop(h)
			var replayed int64
			var total time.Duration
			b.ResetTimer()
			for i := range b.N {
				b.StopTimer()
				h := host(int64(i + 2))
				before := ec.applies.Load()
				b.StartTimer()
				start := time.Now()
				v, err := esGet(ctx, h, "a")
				total += time.Since(start)
				b.StopTimer()
				if err != nil || v != 10_000 {
					b.Fatal(v, err)
				}
				replayed = ec.applies.Load() - before
				stop(h)
				b.StartTimer()
			}
			b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "ms/activation")
			b.ReportMetric(float64(replayed), "events-replayed")
		})
	}
}
