package memory_test

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ordo-actors/ordo/persistence"
	"github.com/ordo-actors/ordo/persistence/memory"
	"github.com/ordo-actors/ordo/persistence/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) persistence.Store { return memory.New() })
}

func fenced(t *testing.T, s *memory.Store, shard uint32, epoch int64) {
	t.Helper()
	if err := s.Fence(t.Context(), shard, epoch); err != nil {
		t.Fatal(err)
	}
}

func rec(id string) persistence.Record {
	return persistence.Record{Kind: "k", ID: id, Shard: 1, Epoch: 1, Data: []byte(id)}
}

func TestFailNextSaves(t *testing.T) {
	s := memory.New()
	defer s.Close()
	fenced(t, s, 1, 1)
	s.FailNextSaves(2, nil)
	for i := range 2 {
		out, err := s.Save(t.Context(), []persistence.Record{rec("a")})
		if err != nil || !errors.Is(out[1], memory.ErrInjected) {
			t.Fatalf("save %d: %v, %v; want injected failure", i, out, err)
		}
		if _, err := s.Load(t.Context(), "k", "a"); !errors.Is(err, persistence.ErrNotFound) {
			t.Fatalf("failed save wrote: %v", err)
		}
	}
	custom := errors.New("disk on fire")
	s.FailNextSaves(1, custom)
	out, _ := s.Save(t.Context(), []persistence.Record{rec("a")})
	if !errors.Is(out[1], custom) {
		t.Fatalf("got %v, want %v", out[1], custom)
	}
	out, err := s.Save(t.Context(), []persistence.Record{rec("a")})
	if err != nil || out[1] != nil {
		t.Fatalf("save after the injected failures: %v, %v", out, err)
	}
	if saves, recs := s.Stats(); saves != 4 || recs != 4 {
		t.Fatalf("Stats = %d, %d; want 4, 4", saves, recs)
	}
}

// BlockSavesOf holds only the Saves carrying a matching record, says when
// the first one waits, and lets them write once released; a Save made
// after the release does not wait. A held Save ends with its context.
func TestBlockSavesOf(t *testing.T) {
	s := memory.New()
	defer s.Close()
	fenced(t, s, 1, 1)
	type result struct {
		out map[uint32]error
		err error
	}
	save := func(ctx context.Context, ids ...string) <-chan result {
		res := make(chan result, 1)
		go func() {
			var recs []persistence.Record
			for _, id := range ids {
				recs = append(recs, rec(id))
			}
			out, err := s.Save(ctx, recs)
			res <- result{out, err}
		}()
		return res
	}
	reached, release := s.BlockSavesOf(func(r persistence.Record) bool { return r.ID == "held" })
	select {
	case <-reached:
		t.Fatal("reached before any Save")
	default:
	}
	held := save(t.Context(), "other", "held")
	<-reached
	if r := <-save(t.Context(), "free"); r.err != nil || r.out[1] != nil {
		t.Fatalf("a Save without a matching record: %v, %v", r.out, r.err)
	}
	if _, err := s.Load(t.Context(), "k", "other"); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("a held Save is visible: %v", err)
	}
	select {
	case r := <-held:
		t.Fatalf("held Save returned %v, %v", r.out, r.err)
	default:
	}
	release()
	release() // idempotent
	if r := <-held; r.err != nil || r.out[1] != nil {
		t.Fatalf("released Save: %v, %v", r.out, r.err)
	}
	if r := <-save(t.Context(), "held"); r.err != nil || r.out[1] != nil {
		t.Fatalf("a Save after the release: %v, %v", r.out, r.err)
	}

	reached, release = s.BlockSavesOf(func(persistence.Record) bool { return true })
	defer release()
	ctx, cancel := context.WithCancel(t.Context())
	res := save(ctx, "c")
	<-reached
	cancel()
	if r := <-res; r.err != nil || !errors.Is(r.out[1], context.Canceled) {
		t.Fatalf("canceled held Save: %v, %v", r.out, r.err)
	}
}

func TestBlockSaves(t *testing.T) {
	s := memory.New()
	defer s.Close()
	fenced(t, s, 1, 1)
	release := s.BlockSaves()
	type result struct {
		out map[uint32]error
		err error
	}
	res := make(chan result, 1)
	go func() {
		out, err := s.Save(t.Context(), []persistence.Record{rec("a")})
		res <- result{out, err}
	}()
	// The blocked save is counted but writes nothing until released.
	storetest.CheckFor(t, 10*time.Second, time.Millisecond, func() error {
		if n, _ := s.Stats(); n != 1 {
			return errors.New("save not started")
		}
		return nil
	})
	if _, err := s.Load(t.Context(), "k", "a"); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("blocked save is visible: %v", err)
	}
	select {
	case r := <-res:
		t.Fatalf("blocked save returned %v, %v", r.out, r.err)
	default:
	}
	release()
	release() // idempotent
	if r := <-res; r.err != nil || r.out[1] != nil {
		t.Fatalf("released save: %v, %v", r.out, r.err)
	}

	// A blocked save ends with its context, and with Close.
	release = s.BlockSaves()
	defer release()
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		out, err := s.Save(ctx, []persistence.Record{rec("b")})
		res <- result{out, err}
	}()
	cancel()
	if r := <-res; r.err != nil || !errors.Is(r.out[1], context.Canceled) {
		t.Fatalf("canceled blocked save: %v, %v", r.out, r.err)
	}
	go func() {
		out, err := s.Save(t.Context(), []persistence.Record{rec("c")})
		res <- result{out, err}
	}()
	storetest.CheckFor(t, 10*time.Second, time.Millisecond, func() error {
		if n, _ := s.Stats(); n != 3 {
			return errors.New("save not started")
		}
		return nil
	})
	s.Close()
	if r := <-res; r.err != nil || !errors.Is(r.out[1], persistence.ErrClosed) {
		t.Fatalf("save blocked across Close: %v, %v", r.out, r.err)
	}
}

func TestDelaySaves(t *testing.T) {
	s := memory.New()
	defer s.Close()
	fenced(t, s, 1, 1)
	s.DelaySaves(time.Hour)
	ctx, cancel := context.WithCancel(t.Context())
	res := make(chan error, 1)
	go func() {
		out, err := s.Save(ctx, []persistence.Record{rec("a")})
		if err == nil {
			err = out[1]
		}
		res <- err
	}()
	cancel()
	if err := <-res; !errors.Is(err, context.Canceled) {
		t.Fatalf("delayed save: %v", err)
	}
	s.DelaySaves(time.Millisecond)
	out, err := s.Save(t.Context(), []persistence.Record{rec("a")})
	if err != nil || out[1] != nil {
		t.Fatalf("short delay: %v, %v", out, err)
	}
	s.DelaySaves(0)
}

func TestFenceOf(t *testing.T) {
	s := memory.New()
	defer s.Close()
	if got := s.FenceOf(3); got != 0 {
		t.Fatalf("FenceOf(unfenced) = %d", got)
	}
	fenced(t, s, 3, 4)
	if got := s.FenceOf(3); got != 4 {
		t.Fatalf("FenceOf = %d, want 4", got)
	}
}

func TestLoseNextAcks(t *testing.T) {
	s := memory.New()
	defer s.Close()
	fenced(t, s, 1, 1)
	s.LoseNextAcks(1, nil)
	stale := persistence.Record{Kind: "k", ID: "stale", Shard: 2, Epoch: 1, Data: []byte("x")}
	out, err := s.Save(t.Context(), []persistence.Record{rec("a"), stale})
	if err != nil || !errors.Is(out[1], memory.ErrInjected) || !errors.Is(out[2], persistence.ErrFenced) {
		t.Fatalf("got %v, %v; want a lost ack for shard 1 and ErrFenced for shard 2", out, err)
	}
	// The write happened although it was not acknowledged.
	if r, err := s.Load(t.Context(), "k", "a"); err != nil || string(r.Data) != "a" {
		t.Fatalf("Load = %+v, %v", r, err)
	}
	out, err = s.Save(t.Context(), []persistence.Record{rec("b")})
	if err != nil || out[1] != nil {
		t.Fatalf("next save: %v, %v", out, err)
	}
}

// LimitSaves counts a group's events with its records, as etcd counts
// puts, and limits each event's data as a record's.
func TestLimitSavesCountsEvents(t *testing.T) {
	s := memory.New()
	defer s.Close()
	fenced(t, s, 1, 1)
	s.LimitSaves(4, 3)
	r := rec("a")
	r.Events = []persistence.Event{{Seq: 1, Data: []byte("1")}, {Seq: 2, Data: []byte("2")}}
	if out, err := s.Save(t.Context(), []persistence.Record{r}); err != nil || out[1] != nil {
		t.Fatalf("3 of 3: %v, %v", out, err)
	}
	r.Events = []persistence.Event{{Seq: 3, Data: []byte("3")}, {Seq: 4, Data: []byte("4")}, {Seq: 5, Data: []byte("5")}}
	if out, _ := s.Save(t.Context(), []persistence.Record{r}); !errors.Is(out[1], persistence.ErrTooLarge) {
		t.Fatalf("4 of 3: %v", out[1])
	}
	r.Events = []persistence.Event{{Seq: 3, Data: []byte("12345")}}
	if out, _ := s.Save(t.Context(), []persistence.Record{r}); !errors.Is(out[1], persistence.ErrTooLarge) {
		t.Fatalf("5 bytes of 4: %v", out[1])
	}
	if last, err := s.LastSeq(t.Context(), "k", "a"); err != nil || last != 2 {
		t.Fatalf("LastSeq = %d, %v", last, err)
	}
}

// A record rewritten at about the same size keeps its buffer: the store
// copies the caller's data into it rather than into a new one, and what
// Load returned earlier does not change.
func TestRewriteKeepsItsBuffer(t *testing.T) {
	s := memory.New()
	defer s.Close()
	fenced(t, s, 1, 1)
	const size, rewrites = 64 << 10, 64
	data := bytes.Repeat([]byte{'a'}, size)
	save := func() {
		t.Helper()
		out, err := s.Save(t.Context(), []persistence.Record{{Kind: "k", ID: "big", Shard: 1, Epoch: 1, Data: data}})
		if err != nil || out[1] != nil {
			t.Fatal(err, out[1])
		}
	}
	save()
	first, err := s.Load(t.Context(), "k", "big")
	if err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := range rewrites {
		data[0] = byte('b' + i%20) // the caller reuses its buffer, as the batcher does
		save()
	}
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got >= size*rewrites/4 {
		t.Fatalf("%d rewrites of a %d-byte record allocated %d bytes: the data is copied anew", rewrites, size, got)
	}
	if first.Data[0] != 'a' {
		t.Fatalf("a loaded record changed when its record was rewritten: %q", first.Data[:1])
	}
	last, err := s.Load(t.Context(), "k", "big")
	if err != nil {
		t.Fatal(err)
	}
	data[0] = 'z'
	if want := byte('b' + (rewrites-1)%20); last.Data[0] != want || len(last.Data) != size {
		t.Fatalf("stored %q (%d bytes), want %q (%d)", last.Data[:1], len(last.Data), want, size)
	}
	// A record that shrinks far below its buffer gets a new one, of its size.
	data = data[:10]
	save()
	if r, err := s.Load(t.Context(), "k", "big"); err != nil || len(r.Data) != 10 {
		t.Fatal(err, len(r.Data))
	}
}
