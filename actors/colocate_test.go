package actors_test

import (
	"context"
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
)

// countingRouter counts the messages that leave through the router (the
// transport, in a cluster) and delivers them to the host.
type countingRouter struct {
	routed atomic.Int64
	host   atomic.Pointer[actors.Host]
}

func (r *countingRouter) Route(_ context.Context, env *ordopb.Envelope, _ actors.Sender, done func(*ordopb.Reply)) {
	r.routed.Add(1)
	r.host.Load().Submit(env, done)
}

func TestColocatedRefs(t *testing.T) {
	a := actors.Ref{Kind: "account", ID: "acct-1"}
	x, err := actors.Colocated("transfer", a, "t-1")
	require.NoError(t, err)
	require.Equal(t, "{account/acct-1}t-1", x.ID)
	with, ok := actors.PlacedWith(x)
	require.True(t, ok)
	require.Equal(t, a, with)
	for _, shards := range []uint32{1, 7, 256, 4096} {
		require.Equal(t, actors.ShardOf(a, shards), actors.ShardOf(x, shards))
	}
	_, err = actors.Colocated("transfer", actors.Ref{Kind: "account", ID: "a}b"}, "t")
	require.Error(t, err)
	_, err = actors.Colocated("transfer", actors.Ref{}, "t")
	require.Error(t, err)
	for _, id := range []string{"plain", "{}x", "{/}x", "{a/}x", "{/b}x", "{ab}x", "{a/b"} {
		_, ok := actors.PlacedWith(actors.Ref{Kind: "k", ID: id})
		require.False(t, ok, id)
	}
}

// A message between co-located entities never goes through the router,
// and the sender's write and the receiver's write share one Save.
func TestColocatedMessagesStayLocalAndShareASave(t *testing.T) {
	r := &countingRouter{}
	var mu sync.Mutex
	var batches []int
	h := newHarness(t, func(c *actors.HostConfig, d *actors.HostDeps) {
		d.Router = r
		d.OnBatch = func(n int) { mu.Lock(); batches = append(batches, n); mu.Unlock() }
	})
	r.host.Store(h.host)
	ctx := testCtx(t)
	_, err := h.add(ctx, "a", 1) // activate the receiver
	require.NoError(t, err)
	sender, err := actors.Colocated("counter", ref("a"), "x")
	require.NoError(t, err)
	_, err = actors.Call[*testpb.Value](ctx, h.host, sender, &testpb.Get{}) // activate the sender
	require.NoError(t, err)

	mu.Lock()
	batches = nil
	mu.Unlock()
	_, err = actors.Call[*testpb.Value](ctx, h.host, sender, &testpb.Forward{To: "a", Delta: 5, RequestId: "fwd-1"})
	require.NoError(t, err)
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if v, _ := h.stored("a"); v != 6 {
			return errPending
		}
		return nil
	})
	require.Zero(t, r.routed.Load(), "co-located messages through the router")
	mu.Lock()
	first := batches[0]
	mu.Unlock()
	require.Equal(t, 2, first, "records in the Save of the sender's write: want its own and the receiver's")

	// Control: a message to another shard goes through the router.
	var far string
	for i := 0; ; i++ {
		far = "far" + string(rune('a'+i))
		if actors.ShardOf(ref(far), h.cfg.Shards) != actors.ShardOf(ref("a"), h.cfg.Shards) {
			break
		}
	}
	_, err = actors.Call[*testpb.Value](ctx, h.host, sender, &testpb.Forward{To: far, Delta: 1, RequestId: "fwd-2"})
	require.NoError(t, err)
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if r.routed.Load() != 1 {
			return errPending
		}
		return nil
	})
}

// Many writes to one entity between two Saves cost one record encode (and
// one of its dedup record when they filled the record's part of the
// window).
func TestOneEncodePerSave(t *testing.T) {
	h := newHarness(t, nil)
	ctx := testCtx(t)
	_, err := h.add(ctx, "hot", 1)
	require.NoError(t, err)
	before := h.host.Stats().Batch

	release := h.store.BlockSaves()
	const n = 50
	replies := make(chan *ordopb.Reply, n+1)
	submit := func(i int) {
		env, err := actors.Envelope(ref("hot"), &testpb.Add{Delta: 1}, actors.NewRequestID())
		require.NoError(t, err)
		h.host.Submit(env, func(r *ordopb.Reply) { replies <- r })
	}
	submit(0) // its Save blocks in the store
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if h.host.Stats().Batch.Saves == before.Saves {
			return errPending
		}
		return nil
	})
	for i := 1; i <= n; i++ {
		submit(i)
	}
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if h.host.Stats().Batch.Writes-before.Writes < n+1 {
			return errPending
		}
		return nil
	})
	release()
	for i := 0; i <= n; i++ {
		require.Nil(t, (recv(t, replies)).GetError())
	}
	after := h.host.Stats().Batch
	require.EqualValues(t, n+1, after.Writes-before.Writes)
	// The first Save carries the entity's record; the second its record
	// and its dedup record (the 50 writes filled the record's own part of
	// the dedup window three times over: the newest copy is written).
	require.EqualValues(t, 3, after.Encodes-before.Encodes, "record encodes for %d writes in two Saves", n+1)
	require.Equal(t, after.Records-before.Records, after.Encodes-before.Encodes)
	v, _ := h.stored("hot")
	require.EqualValues(t, n+2, v)
}

// orderStore records, for every Save, when it started and ended and which
// entities it carried; Loads of one entity can be held.
type orderStore struct {
	*memory.Store
	mu       sync.Mutex
	saves    []saveSpan
	holdLoad string
	loadGate chan struct{}
	blockFor string // a Save carrying this entity waits for saveGate
	saveGate chan struct{}
}

type saveSpan struct {
	start, end time.Time
	ids        []string
}

func (s *orderStore) Load(ctx context.Context, kind, id string) (persistence.Record, error) {
	if id == s.holdLoad {
		<-s.loadGate
	}
	return s.Store.Load(ctx, kind, id)
}

func (s *orderStore) Save(ctx context.Context, recs []persistence.Record) (map[uint32]error, error) {
	span := saveSpan{start: time.Now()}
	block := false
	for _, r := range recs {
		span.ids = append(span.ids, r.ID)
		block = block || r.ID == s.blockFor
	}
	if block {
		<-s.saveGate
	}
	out, err := s.Store.Save(ctx, recs)
	span.end = time.Now()
	s.mu.Lock()
	s.saves = append(s.saves, span)
	s.mu.Unlock()
	return out, err
}

// The write of an entity that handled a co-located message made before
// its sender's write was durable never reaches the store before that
// write: here the sender's Save is in flight (and held) when the receiver
// writes, and Saves may run in parallel; the receiver's write waits.
func TestColocatedWriteNeverPrecedesItsSender(t *testing.T) {
	st := &orderStore{Store: memory.New(), loadGate: make(chan struct{}), saveGate: make(chan struct{})}
	cfg := actors.DefaultLocalConfig()
	cfg.Shards = 4
	cfg.BatchMaxInFlight = 4
	host := startHost(t, cfg, actors.HostDeps{Store: st}, newCounterKind(&guard{}, &counters{}))
	ownAll(t, host, cfg.Shards)
	ctx := testCtx(t)
	sender, err := actors.Colocated("counter", ref("rcv"), "snd")
	require.NoError(t, err)
	_, err = actors.Call[*testpb.Value](ctx, host, sender, &testpb.Get{}) // activate the sender
	require.NoError(t, err)

	// The receiver's activation waits (its Load is held), so the sender's
	// write goes alone, and is held in the store.
	st.holdLoad, st.blockFor = "rcv", sender.ID
	reply := make(chan error, 1)
	go func() {
		_, err := actors.Call[*testpb.Value](ctx, host, sender, &testpb.Forward{To: "rcv", Delta: 3, RequestId: "fwd"})
		reply <- err
	}()
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if host.Stats().Batch.Saves < 1 { // the Forward's write is in flight
			return errPending
		}
		return nil
	})
	close(st.loadGate) // the receiver handles the message and writes
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if w := host.Stats().Batch.Writes; w < 2 {
			return errPending
		}
		return nil
	})
	close(st.saveGate)
	require.NoError(t, <-reply)
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if v, _ := st.storedValue("rcv"); v != 3 {
			return errPending
		}
		return nil
	})
	st.mu.Lock()
	defer st.mu.Unlock()
	var senderEnd time.Time
	for _, s := range st.saves {
		for _, id := range s.ids {
			if id == sender.ID && senderEnd.IsZero() {
				senderEnd = s.end
			}
		}
	}
	for _, s := range st.saves {
		for _, id := range s.ids {
			if id == "rcv" {
				require.False(t, s.start.Before(senderEnd), "the receiver's write was sent before its sender's was durable")
			}
		}
	}
}

func (s *orderStore) storedValue(id string) (int64, error) {
	rec, err := s.Store.Load(context.Background(), "counter", id)
	if err != nil {
		return 0, err
	}
	var er ordopb.EntityRecord
	if err := protoUnmarshal(rec.Data, &er); err != nil {
		return 0, err
	}
	var c testpb.Counter
	if err := protoUnmarshal(er.State, &c); err != nil {
		return 0, err
	}
	return c.Value, nil
}

// A co-located message sent by an entity of an ownership that has ended
// never reaches the shard's next ownership: the receiver would write after
// a sender's write that can never become durable (fenced by the new
// epoch), and wait for it forever. Here the sender's handler is still
// running when its shard is dropped and owned again at a higher epoch; the
// message it sends afterwards is refused, and the receiver, in the new
// ownership, keeps answering.
func TestColocatedMessageOfEndedOwnershipIsRefused(t *testing.T) {
	entered, gate := make(chan struct{}), make(chan struct{})
	var sendErr atomic.Pointer[error]
	blocker := actors.MustKind("blocker", func() *testpb.Counter { return new(testpb.Counter) },
		actors.On(func(c *ctxC, m *testpb.Forward) (*testpb.Value, error) {
			close(entered)
			<-gate
			to := actors.Ref{Kind: "counter", ID: m.To}
			actors.Request(c, to, &testpb.Add{Delta: m.Delta}, m.RequestId,
				func(c *ctxC, v *testpb.Value, err error) {
					if err != nil {
						sendErr.Store(&err)
					}
				})
			c.State.Value++
			return &testpb.Value{Value: c.State.Value}, nil
		}),
	)
	st := memory.New()
	cfg := actors.DefaultLocalConfig()
	cfg.Shards = 4
	host := startHost(t, cfg, actors.HostDeps{Store: st}, newCounterKind(&guard{}, &counters{}), blocker)
	ownAll(t, host, cfg.Shards)
	ctx := testCtx(t)
	rcv := actors.Ref{Kind: "counter", ID: "rcv"}
	_, err := actors.Call[*testpb.Value](ctx, host, rcv, &testpb.Add{Delta: 1})
	require.NoError(t, err)
	sender, err := actors.Colocated("blocker", rcv, "snd")
	require.NoError(t, err)
	shard := actors.ShardOf(rcv, cfg.Shards)

	go func() {
		_, _ = actors.Call[*testpb.Value](ctx, host, sender, &testpb.Forward{To: "rcv", Delta: 5, RequestId: "fwd"})
	}()
	<-entered
	host.Drop(shard, actors.ErrNotHere)
	require.NoError(t, host.Own(shard, 2))
	close(gate)

	// The receiver answers in the new ownership, and never applied the
	// message of the old one.
	for i := 0; i < 3; i++ {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		v, err := actors.Call[*testpb.Value](cctx, host, rcv, &testpb.Add{Delta: 1})
		cancel()
		require.NoError(t, err, "call %d to the receiver", i)
		require.EqualValues(t, 2+i, v.Value)
	}
	got, err := st.Load(ctx, "counter", "rcv")
	require.NoError(t, err)
	require.NotEmpty(t, got.Data)
}

// A write an entity makes after its shard was dropped (its handler was
// running meanwhile) is withdrawn, never sent: even where the store's
// fence still has the dropped epoch, nothing of an ended ownership lands.
func TestWriteAfterDropIsWithdrawn(t *testing.T) {
	entered, gate := make(chan struct{}), make(chan struct{})
	slow := actors.MustKind("slow", func() *testpb.Counter { return new(testpb.Counter) },
		actors.On(func(c *ctxC, m *testpb.Add) (*testpb.Value, error) {
			close(entered)
			<-gate
			c.State.Value += m.Delta
			return &testpb.Value{Value: c.State.Value}, nil
		}),
	)
	st := memory.New()
	cfg := actors.DefaultLocalConfig()
	cfg.Shards = 2
	host := startHost(t, cfg, actors.HostDeps{Store: st}, slow)
	ownAll(t, host, cfg.Shards)
	ctx := testCtx(t)
	target := actors.Ref{Kind: "slow", ID: "s"}
	replied := make(chan error, 1)
	go func() {
		_, err := actors.Call[*testpb.Value](ctx, host, target, &testpb.Add{Delta: 7})
		replied <- err
	}()
	<-entered
	before := host.Stats().Batch
	host.Drop(actors.ShardOf(target, cfg.Shards), actors.ErrNotHere)
	close(gate)
	require.Error(t, <-replied) // the shard was dropped with the call
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if host.Stats().Batch.Canceled == before.Canceled {
			return errPending
		}
		return nil
	})
	after := host.Stats().Batch
	require.Equal(t, before.Writes+1, after.Writes)
	require.Equal(t, before.Saves, after.Saves, "a Save of the dropped ownership")
	_, err := st.Load(ctx, "slow", "s")
	require.ErrorIs(t, err, persistence.ErrNotFound)
}

// Two co-located entities that message each other while their writes
// wait behind a Save in flight: x's write (a Forward) sends to a, whose
// write depends on it; a's next write (a Forward back) sends to x, whose
// next write depends on that. Had each entity's second write joined its
// first, each would wait for the other for good (an account's settle
// reminder and its transfers' sagas do this in the bank). Both calls
// answer, and every write is stored.
func TestColocatedWritesNeverWaitForEachOther(t *testing.T) {
	h := newHarness(t, nil)
	ctx := testCtx(t)
	x, err := actors.Colocated("counter", ref("a"), "x")
	require.NoError(t, err)
	blocker := "blocker"
	for actors.ShardOf(ref(blocker), h.cfg.Shards) == actors.ShardOf(ref("a"), h.cfg.Shards) {
		blocker += "+"
	}
	for _, r := range []actors.Ref{ref("a"), x, ref(blocker)} {
		_, err := actors.Call[*testpb.Value](ctx, h.host, r, &testpb.Add{Delta: 1})
		require.NoError(t, err)
	}

	// A Save in flight that does not return: every write after it queues.
	release := h.store.BlockSaves()
	saves := h.host.Stats().Batch.Saves
	errs := make(chan error, 3)
	go func() { _, err := h.add(ctx, blocker, 1); errs <- err }()
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if h.host.Stats().Batch.Saves == saves {
			return errPending
		}
		return nil
	})
	// queuedAfter waits until r's queued write waits for a write of on.
	queuedAfter := func(r, on actors.Ref) {
		t.Helper()
		testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
			rt, err := h.host.Runtime(ctx, r)
			if err != nil {
				return err
			}
			if rt.Writes != nil {
				for _, q := range rt.Writes.Queued {
					for _, d := range q.After {
						if d.Ref == on {
							return nil
						}
					}
				}
			}
			return fmt.Errorf("%s: no queued write waits for %s: %+v", r, on, rt.Writes)
		})
	}
	go func() {
		_, err := actors.Call[*testpb.Value](ctx, h.host, x, &testpb.Forward{To: "a", Delta: 10, RequestId: "x-to-a"})
		errs <- err
	}()
	queuedAfter(ref("a"), x)
	go func() {
		_, err := actors.Call[*testpb.Value](ctx, h.host, ref("a"), &testpb.Forward{To: x.ID, Delta: 100, RequestId: "a-to-x"})
		errs <- err
	}()
	queuedAfter(x, ref("a"))

	release()
	for range 3 {
		require.NoError(t, <-errs)
	}
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if a, _ := h.stored("a"); a != 11 {
			return fmt.Errorf("a stored %d, want 11", a)
		}
		if v, _ := h.stored(x.ID); v != 101 {
			return fmt.Errorf("x stored %d, want 101", v)
		}
		return nil
	})
}
