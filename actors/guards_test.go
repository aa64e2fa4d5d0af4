package actors_test

// Tests of the runtime's safety guards through its exported behaviour
// (kinds, handlers, Host, Router and store wrappers), each written so that
// the guard's mutation in tools/mutants fails it.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/ordo-actors/ordo/persistence"
	"github.com/ordo-actors/ordo/persistence/memory"
	"github.com/ordo-actors/ordo/proto/ordopb"
	"github.com/ordo-actors/ordo/proto/testpb"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/anypb"
)

// errTransient is a fence failure that leaves the shard unfenced without
// saying it is fenced by someone else (a store timeout, say).
var errTransient = errors.New("injected transient fence failure")

// fenceWatchStore wraps a memory store: it records which shards have a
// completed Fence and counts Loads of entities whose shard has none yet.
// Its Fence can fail the first call of a shard (failFirst) and hold later
// calls until unblock is called.
type fenceWatchStore struct {
	*memory.Store
	shards    uint32
	failFirst bool

	mu         sync.Mutex
	calls      map[uint32]int // Fence calls made, per shard
	returned   map[uint32]int // Fence calls that returned, per shard
	fenced     map[uint32]bool
	earlyLoads int
	loads      int
	gate       chan struct{} // nil: Fence does not wait
}

func newFenceWatchStore(shards uint32, failFirst bool) *fenceWatchStore {
	return &fenceWatchStore{
		Store: memory.New(), shards: shards, failFirst: failFirst,
		calls: map[uint32]int{}, returned: map[uint32]int{}, fenced: map[uint32]bool{},
		gate: make(chan struct{}),
	}
}

func (s *fenceWatchStore) Fence(ctx context.Context, shard uint32, epoch int64) error {
	s.mu.Lock()
	s.calls[shard]++
	first := s.calls[shard] == 1
	gate := s.gate
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.returned[shard]++
		s.mu.Unlock()
	}()
	if first && s.failFirst {
		return errTransient
	}
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := s.Store.Fence(ctx, shard, epoch); err != nil {
		return err
	}
	s.mu.Lock()
	s.fenced[shard] = true
	s.mu.Unlock()
	return nil
}

func (s *fenceWatchStore) Load(ctx context.Context, kind, id string) (persistence.Record, error) {
	shard := actors.ShardOf(actors.Ref{Kind: kind, ID: id}, s.shards)
	s.mu.Lock()
	s.loads++
	if !s.fenced[shard] {
		s.earlyLoads++
	}
	s.mu.Unlock()
	return s.Store.Load(ctx, kind, id)
}

// unblock lets every waiting and later Fence through.
func (s *fenceWatchStore) unblock() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gate != nil {
		close(s.gate)
		s.gate = nil
	}
}

func (s *fenceWatchStore) counts(shard uint32) (calls, returned, loads, early int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[shard], s.returned[shard], s.loads, s.earlyLoads
}

// S1: an entity's state is read only after its shard's fence completed.
// The fence Own starts in the background fails (as a store timeout
// would), so the first activation must fence the shard itself; its Fence
// is held, and by the time it is entered no Load may have happened.
func TestGuardNoLoadBeforeFence(t *testing.T) {
	store := newFenceWatchStore(1, true)
	cfg := actors.DefaultLocalConfig()
	cfg.Shards = 1
	host := startHost(t, cfg, actors.HostDeps{Store: store}, newCounterKind(&guard{}, &counters{}))
	require.NoError(t, host.Own(0, 1))
	// The background fence has failed and given the shard back unfenced.
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if _, returned, _, _ := store.counts(0); returned < 1 {
			return errPending
		}
		return nil
	})

	replies := make(chan *ordopb.Reply, 1)
	env, err := actors.Envelope(ref("f"), &testpb.Add{Delta: 1}, "f-1")
	require.NoError(t, err)
	host.Submit(env, func(r *ordopb.Reply) { replies <- r })
	// Either the activation reaches its own (held) Fence, or it loads
	// without one: wait for whichever comes first.
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if calls, _, loads, _ := store.counts(0); calls < 2 && loads == 0 {
			return errPending
		}
		return nil
	})
	_, _, loads, early := store.counts(0)
	require.Zero(t, early, "%d Load(s) before the shard's fence completed (%d in all)", early, loads)

	store.unblock()
	r := <-replies
	require.Nil(t, r.GetError(), "reply %v", r)
	_, _, loads, early = store.counts(0)
	require.Zero(t, early, "Loads before the fence completed")
	require.Equal(t, 1, loads)
	require.EqualValues(t, 1, store.FenceOf(0))
}

// reads counts read-handler runs of the guard kinds below.
type reads struct{ n atomic.Int64 }

// hookedKind's OnActivate gives a fresh entity the value 7: a write no
// request asked for.
func hookedKind(rd *reads) actors.Kind {
	return actors.MustKind("hooked", func() *testpb.Counter { return new(testpb.Counter) },
		actors.OnActivate(func(c *ctxC) {
			if c.State.Value == 0 {
				c.State.Value = 7
			}
		}),
		actors.OnRead(func(c *ctxC, m *testpb.Get) (*testpb.Value, error) {
			rd.n.Add(1)
			return &testpb.Value{Value: c.State.Value}, nil
		}),
	)
}

// contKind forwards an Add to another entity and adds the value of the
// reply to its own in the continuation: a write no request asked for.
// A negative Forward.Delta makes the handler send and then fail.
func contKind(rd *reads) actors.Kind {
	return actors.MustKind("cont", func() *testpb.Counter { return new(testpb.Counter) },
		actors.On(func(c *ctxC, m *testpb.Forward) (*testpb.Value, error) {
			actors.Request(c, actors.Ref{Kind: "counter", ID: m.To}, &testpb.Add{Delta: m.Delta}, m.RequestId,
				func(c *ctxC, v *testpb.Value, err error) {
					if err == nil {
						c.State.Value += v.GetValue()
					}
				})
			if m.Delta < 0 {
				c.State.Value = -1000 // must be rolled back
				return nil, actors.HandlerError("negative", "negative delta")
			}
			return &testpb.Value{Value: c.State.Value}, nil
		}),
		actors.OnRead(func(c *ctxC, m *testpb.Get) (*testpb.Value, error) {
			rd.n.Add(1)
			return &testpb.Value{Value: c.State.Value}, nil
		}),
	)
}

// routed is one message an entity sent through captureRouter.
type routed struct {
	env  *ordopb.Envelope
	done func(*ordopb.Reply)
}

// captureRouter records every routed message and answers none until the
// test does.
type captureRouter struct {
	mu   sync.Mutex
	msgs []routed
}

func (r *captureRouter) Route(ctx context.Context, env *ordopb.Envelope, _ actors.Sender, done func(*ordopb.Reply)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, routed{env: env, done: done})
}

func (r *captureRouter) sent() []routed {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]routed(nil), r.msgs...)
}

// storedValue is the durable value of a testpb.Counter entity (0 when
// never saved).
func storedValue(t *testing.T, store persistence.Store, kind, id string) int64 {
	t.Helper()
	rec, err := store.Load(context.Background(), kind, id)
	if errors.Is(err, persistence.ErrNotFound) {
		return 0
	}
	require.NoError(t, err)
	var er ordopb.EntityRecord
	require.NoError(t, protoUnmarshal(rec.Data, &er))
	var c testpb.Counter
	require.NoError(t, protoUnmarshal(er.State, &c))
	return c.Value
}

// readHeld submits two reads to r while saves are blocked and the entity
// has a write in flight (what) that no earlier reply waits for, and
// checks that the first read is not answered before that write is
// durable. It returns the channel the first read's reply arrives on.
func readHeld(t *testing.T, host *actors.Host, store *memory.Store, rd *reads, r actors.Ref,
	savesBefore int, what string) <-chan *ordopb.Reply {
	t.Helper()
	readsBefore := rd.n.Load()
	first := make(chan *ordopb.Reply, 1)
	env, err := actors.Envelope(r, &testpb.Get{}, "read-1")
	require.NoError(t, err)
	host.Submit(env, func(rep *ordopb.Reply) { first <- rep })
	// The second read is handled after the first (mailbox order), so once
	// it ran, the first reply has either left or been held.
	env2, err := actors.Envelope(r, &testpb.Get{}, "read-2")
	require.NoError(t, err)
	host.Submit(env2, func(*ordopb.Reply) {})
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if s, _ := store.Stats(); s <= savesBefore {
			return fmt.Errorf("the %s's write has not reached the store", what)
		}
		if rd.n.Load() < readsBefore+2 {
			return fmt.Errorf("reads not handled yet")
		}
		return nil
	})
	select {
	case rep := <-first:
		t.Fatalf("a read was answered before the %s's write was durable: %v", what, rep)
	default:
	}
	require.Zero(t, storedValue(t, store, r.Kind, r.ID), "the %s's write is durable already", what)
	return first
}

// S2: a read that follows a write made by OnActivate is answered only once
// that write is durable, though no reply of a request waits for it.
func TestGuardReadAfterActivationWriteWaitsForIt(t *testing.T) {
	rd := &reads{}
	store := memory.New()
	cfg := actors.DefaultLocalConfig()
	cfg.Shards = 4
	host := startHost(t, cfg, actors.HostDeps{Store: store}, hookedKind(rd))
	ownAll(t, host, cfg.Shards)
	release := store.BlockSaves()
	defer release()
	saves, _ := store.Stats()
	r := actors.Ref{Kind: "hooked", ID: "h"}

	first := readHeld(t, host, store, rd, r, saves, "hook")

	release()
	rep := <-first
	v, err := actors.DecodeReply[*testpb.Value](rep)
	require.NoError(t, err)
	require.EqualValues(t, 7, v.Value)
	require.EqualValues(t, 7, storedValue(t, store, "hooked", "h"), "the reply reported state that is not durable")
}

// S2: a read that follows a write made by a continuation is answered only
// once that write is durable.
func TestGuardReadAfterContinuationWriteWaitsForIt(t *testing.T) {
	rd := &reads{}
	store := memory.New()
	router := &captureRouter{}
	cfg := actors.DefaultLocalConfig()
	cfg.Shards = 4
	cfg.RequestTimeout = time.Minute // the test answers the request
	host := startHost(t, cfg, actors.HostDeps{Router: router, Store: store}, contKind(rd))
	ownAll(t, host, cfg.Shards)
	ctx := testCtx(t)
	r := actors.Ref{Kind: "cont", ID: "c"}
	_, err := actors.Call[*testpb.Value](ctx, host, r, &testpb.Forward{To: farID(r, cfg.Shards), Delta: 5, RequestId: "fwd-1"})
	require.NoError(t, err)
	// The forward's write is durable, so its request has been released.
	msgs := router.sent()
	require.Len(t, msgs, 1)

	release := store.BlockSaves()
	defer release()
	saves, _ := store.Stats()
	answer, err := anypb.New(&testpb.Value{Value: 5})
	require.NoError(t, err)
	msgs[0].done(&ordopb.Reply{RequestId: msgs[0].env.GetRequestId(), Payload: answer})

	// The continuation (queued first) writes 5; reads follow it.
	first := readHeld(t, host, store, rd, r, saves, "continuation")

	release()
	rep := <-first
	v, err := actors.DecodeReply[*testpb.Value](rep)
	require.NoError(t, err)
	require.EqualValues(t, 5, v.Value)
	require.EqualValues(t, 5, storedValue(t, store, "cont", "c"), "the reply reported state that is not durable")
}

// A handler that sends a message and then fails sends nothing: its
// outgoing messages are rolled back with its state.
func TestGuardFailedHandlerSendsNothing(t *testing.T) {
	rd := &reads{}
	store := memory.New()
	router := &captureRouter{}
	cfg := actors.DefaultLocalConfig()
	cfg.Shards = 4
	host := startHost(t, cfg, actors.HostDeps{Router: router, Store: store}, contKind(rd))
	ownAll(t, host, cfg.Shards)
	ctx := testCtx(t)
	r := actors.Ref{Kind: "cont", ID: "s"}
	dst := farID(r, cfg.Shards)
	_, err := actors.Call[*testpb.Value](ctx, host, r, &testpb.Forward{To: dst, Delta: -1, RequestId: "bad"})
	require.ErrorIs(t, err, actors.ErrHandler)
	// Messages leave before the reply they were made with (both wait for
	// the same write), so anything the failed handler sent is out by now.
	require.Empty(t, router.sent(), "a failed handler's message was sent")

	_, err = actors.Call[*testpb.Value](ctx, host, r, &testpb.Forward{To: dst, Delta: 1, RequestId: "good"})
	require.NoError(t, err)
	msgs := router.sent()
	require.Len(t, msgs, 1, "exactly the successful handler's message")
	require.Equal(t, "good", msgs[0].env.GetRequestId())
	v, err := actors.Call[*testpb.Value](ctx, host, r, &testpb.Get{})
	require.NoError(t, err)
	require.Zero(t, v.Value, "the failed handler's state change was kept")
}

// farID returns the ID of an entity of r's kind in another shard than r:
// a message to it goes through the router (one to r's own shard is handed
// over in memory).
func farID(r actors.Ref, shards uint32) string {
	for i := 0; ; i++ {
		id := fmt.Sprintf("dst-%d", i)
		if actors.ShardOf(actors.Ref{Kind: r.Kind, ID: id}, shards) != actors.ShardOf(r, shards) {
			return id
		}
	}
}
