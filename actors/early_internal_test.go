package actors

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/ordo-actors/ordo/persistence"
	"github.com/ordo-actors/ordo/persistence/memory"
	"github.com/ordo-actors/ordo/proto/ordopb"
	"github.com/ordo-actors/ordo/proto/testpb"
	"github.com/stretchr/testify/require"
)

// An entity whose writes only hold their own replies hears of none of
// them: the saver that makes a write durable releases its reply. One
// that passivates waits to hear of its last write, and no more.
func TestEntityHearsOnlyOfTheWritesItWaitsFor(t *testing.T) {
	store := memory.New()
	t.Cleanup(func() { store.Close() }) // after the host shuts down
	h := startCounter(t, store, nil, OnPassivate(func(c *Context[*testpb.Counter]) { c.State.Forwarded++ }))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := Ref{Kind: "n", ID: "a"}
	const writes = 50
	for i := range writes {
		v, err := Call[*testpb.Value](ctx, h, r, &testpb.Add{Delta: 1})
		require.NoError(t, err)
		require.EqualValues(t, i+1, v.Value)
	}
	require.Zero(t, h.told.Load(), "writes told to an entity that waited for none of them")
	saves, _ := store.Stats()
	require.GreaterOrEqual(t, saves, writes, "every write was awaited alone")

	// The write of its OnPassivate hook, still in flight when the shard
	// is released, is the one the draining entity waits to hear of before
	// it stops.
	release := store.BlockSaves()
	defer release()
	released := make(chan error, 1)
	go func() { released <- h.Release(ctx, 0, 1) }()
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		rt, err := h.Runtime(ctx, r)
		if err != nil {
			return err
		}
		if a := rt.Actor; a == nil || !a.Draining || a.Seq != writes+1 || a.Durable != writes {
			return fmt.Errorf("the hook's write is not in flight: %+v", rt.Actor)
		}
		return nil
	})
	require.Zero(t, h.told.Load())
	release()
	require.NoError(t, <-released)
	require.EqualValues(t, 1, h.told.Load(), "the draining entity did not hear of its last write alone")
	rec, err := h.LoadRecord(ctx, r)
	require.NoError(t, err)
	require.EqualValues(t, writes+1, rec.Seq, "the hook's write is durable when Release returns")
}

// A write's reply leaves once the write is durable, even while the entity
// is busy with its next message: it waits for no turn of the entity.
func TestWriteReplyWaitsForNoTurnOfTheEntity(t *testing.T) {
	store := memory.New()
	t.Cleanup(func() { store.Close() }) // after the host shuts down
	started, unblock := make(chan struct{}), make(chan struct{})
	h := startCounter(t, store, func(m *testpb.Add) {
		if m.Sender == "block" {
			close(started)
			<-unblock
		}
	})
	submit := submitter(t, h, Ref{Kind: "n", ID: "a"})
	release := store.BlockSaves()
	defer release()
	first := submit("first", &testpb.Add{Delta: 1})
	second := submit("second", &testpb.Add{Delta: 2, Sender: "block"})
	select {
	case <-started: // the first write is in flight, and the entity busy
	case <-time.After(10 * time.Second):
		t.Fatal("the second call never ran")
	}
	release()
	require.EqualValues(t, 1, valueOf(t, first, "the first write's reply waited for the entity"))
	close(unblock)
	require.EqualValues(t, 3, valueOf(t, second, "no reply to the second write"))
}

// An entity that stops between the two steps a saver takes for a durable
// write, raising en.durable and then taking the write's early replies,
// answers those replies: their write is durable. (It once failed them as
// if the write were lost: the entity learns of the write from en.durable,
// and a saga that asked to passivate stops as soon as it has.)
func TestStopBeforeTheSaverTakesDurableReplies(t *testing.T) {
	store := memory.New()
	t.Cleanup(func() { store.Close() }) // after the host shuts down
	// Forward adds its Delta and asks to passivate, as a settled saga.
	h := startCounter(t, store, nil, On(func(c *Context[*testpb.Counter], m *testpb.Forward) (*testpb.Value, error) {
		c.Passivate()
		c.State.Value += m.Delta
		return &testpb.Value{Value: c.State.Value}, nil
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := Ref{Kind: "n", ID: "a"}
	require.EqualValues(t, 1, valueOf(t, submitter(t, h, r)("first", &testpb.Add{Delta: 1}), "no reply to the Add"))
	release := store.BlockSaves()
	defer release()
	env, err := Envelope(r, &testpb.Forward{Delta: 1}, "last")
	require.NoError(t, err)
	last := make(chan *ordopb.Reply, 1)
	h.Submit(env, func(rep *ordopb.Reply) { last <- rep })
	var en *entry
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		h.mu.Lock()
		if sh := h.shards[0]; sh != nil {
			en = sh.entities[r]
		}
		h.mu.Unlock()
		if en == nil {
			return fmt.Errorf("%s is not active", r)
		}
		if n, dep := en.earlyHeld(); n != 1 || dep != 2 {
			return fmt.Errorf("%d early replies, the oldest waiting for write %d; want 1, for write 2", n, dep)
		}
		return nil
	})
	// The saver's first step for write 2, whose Save the store holds:
	// the write is durable, its reply not taken yet. The entity learns of
	// it at its next message, and passivates.
	en.advanceDurable(2)
	_, _ = h.Runtime(ctx, r)
	require.EqualValues(t, 2, valueOf(t, last, "no reply to the Forward"))
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if _, err := h.Runtime(ctx, r); !errors.Is(err, ErrNotActive) {
			return fmt.Errorf("%s has not passivated: %v", r, err)
		}
		return nil
	})
	release()
}

// startCounter starts a host of one shard, owned at epoch 1, over store,
// running kind "n": a counter whose Add adds (after block, when set, has
// returned), with opts.
func startCounter(t *testing.T, store persistence.Store, block func(*testpb.Add), opts ...Option[*testpb.Counter]) *Host {
	t.Helper()
	cfg := DefaultLocalConfig()
	cfg.Shards = 1
	cfg.IdleTimeout = time.Hour
	opts = append(opts, On(func(c *Context[*testpb.Counter], m *testpb.Add) (*testpb.Value, error) {
		if block != nil {
			block(m)
		}
		c.State.Value += m.Delta
		return &testpb.Value{Value: c.State.Value}, nil
	}))
	h, err := NewHost(cfg, HostDeps{Store: store}, MustKind("n", func() *testpb.Counter { return new(testpb.Counter) }, opts...))
	require.NoError(t, err)
	require.NoError(t, h.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, h.Shutdown(ctx))
	})
	require.NoError(t, h.Own(0, 1))
	return h
}

// submitter returns a function that submits Add{Delta: delta} to r on h
// under request ID rid and returns the channel of its reply.
func submitter(t *testing.T, h *Host, r Ref) func(rid string, m *testpb.Add) chan *ordopb.Reply {
	return func(rid string, m *testpb.Add) chan *ordopb.Reply {
		env, err := Envelope(r, m, rid)
		require.NoError(t, err)
		ch := make(chan *ordopb.Reply, 1)
		h.Submit(env, func(rep *ordopb.Reply) { ch <- rep })
		return ch
	}
}

// valueOf returns the value of the next reply on ch, failing the test
// with what when none comes within 10s.
func valueOf(t *testing.T, ch chan *ordopb.Reply, what string) int64 {
	t.Helper()
	select {
	case rep := <-ch:
		v, err := DecodeReply[*testpb.Value](rep)
		require.NoError(t, err)
		return v.Value
	case <-time.After(10 * time.Second):
		t.Fatal(what)
		return 0
	}
}

// gatedSaves is a memory store whose k-th Save waits for gates[k-1] (the
// later ones do not wait).
type gatedSaves struct {
	*memory.Store
	gates []chan struct{}
	saves atomic.Int64
}

func (s *gatedSaves) Save(ctx context.Context, recs []persistence.Record) (map[uint32]error, error) {
	if k := int(s.saves.Add(1)); k <= len(s.gates) {
		select {
		case <-s.gates[k-1]:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return s.Store.Save(ctx, recs)
}

// A Save releases the replies of the writes it made durable, and not
// those of the entity's later writes, in a later Save.
func TestSaveReleasesOnlyTheRepliesOfItsWrites(t *testing.T) {
	gates := []chan struct{}{make(chan struct{}), make(chan struct{})}
	var opened [2]sync.Once
	open := func(k int) { opened[k].Do(func() { close(gates[k]) }) }
	store := &gatedSaves{Store: memory.New(), gates: gates}
	t.Cleanup(func() { store.Close() }) // after the host shuts down
	h := startCounter(t, store, nil)
	defer open(1) // before the host shuts down, when the test fails
	defer open(0)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := Ref{Kind: "n", ID: "a"}
	submit := submitter(t, h, r)
	first := submit("first", &testpb.Add{Delta: 1})
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if n := store.saves.Load(); n != 1 {
			return fmt.Errorf("%d Saves started, want the first", n)
		}
		return nil
	})
	second := submit("second", &testpb.Add{Delta: 2})
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		rt, err := h.Runtime(ctx, r)
		if err != nil {
			return err
		}
		if a := rt.Actor; a == nil || a.Seq != 2 || a.Held != 2 {
			return fmt.Errorf("both replies are not held: %+v", rt.Actor)
		}
		return nil
	})
	open(0)
	require.EqualValues(t, 1, valueOf(t, first, "no reply to the first write"))
	// The saver that delivered the first reply is done with it once the
	// batcher answers (settled delivers a Save's replies together).
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		rt, err := h.Runtime(ctx, r)
		if err != nil {
			return err
		}
		if a := rt.Actor; a == nil || a.Durable != 1 {
			return fmt.Errorf("the first write is not known durable: %+v", rt.Actor)
		}
		return nil
	})
	select {
	case rep := <-second:
		t.Fatalf("the second write's reply left before its write was durable: %v", rep)
	default:
	}
	open(1)
	require.EqualValues(t, 3, valueOf(t, second, "no reply to the second write"))
}
