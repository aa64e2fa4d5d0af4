package actors

import (
	"context"
	"fmt"
	"testing"

	"github.com/ordo-actors/ordo/persistence"
	"github.com/ordo-actors/ordo/persistence/memory"
)

// The waits between queued co-located writes stay acyclic however the
// cycle would close: through three entities, and through a write chained
// after its entity's earlier one. A write that would close a cycle starts
// a pending of its own instead of joining its entity's last one.
func TestQueueWaitsStayAcyclic(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store := memory.New()
	defer store.Close()
	if err := store.Fence(ctx, 0, 1); err != nil {
		t.Fatal(err)
	}
	b := newBatcher(store, DefaultLocalConfig(), nil)
	q := newQueue(b, ctx)
	sh := &shardState{id: 0, epoch: 1}
	en := func(id string) *entry { return &entry{ref: Ref{Kind: "k", ID: id}, shard: sh} }
	a, bb, c := en("a"), en("b"), en("c")
	w := func(e *entry, seq uint64, after ...writeDep) write {
		return write{ref: e.ref, en: e, epoch: 1, seq: seq, after: after, done: func(error) {}}
	}
	chain := func(e *entry) int {
		n := 0
		for p := q.queued[e.ref]; p != nil; p = p.next {
			n++
		}
		return n
	}

	// a:1 ← b:1 (b received a's message), b:1 ← c:1, then c's message to a
	// makes a:2 wait for c:1: joined to a:1, a would wait for itself.
	q.add(w(a, 1))
	q.add(w(bb, 1, writeDep{a, 1}))
	q.add(w(c, 1, writeDep{bb, 1}))
	q.add(w(a, 2, writeDep{c, 1}))
	if n := chain(a); n != 2 {
		t.Fatalf("a has %d pendings, want 2 (a:2 apart from a:1)", n)
	}
	// No cycle: a write that waits for nothing a waits for joins.
	q.add(w(a, 3))
	if n := chain(a); n != 2 {
		t.Fatalf("a has %d pendings after a:3, want 2 (a:3 joins a:2)", n)
	}
	// c:2 waits for a:3, which waits (as a:2, through its chain) for c:1:
	// joined to c:1, c would wait for itself.
	q.add(w(c, 2, writeDep{a, 3}))
	if n := chain(c); n != 2 {
		t.Fatalf("c has %d pendings, want 2", n)
	}
	// Every write is sent, one Save after another, in an order that
	// honours every wait.
	inBatch := func(batch []*pending) map[*entry]uint64 {
		m := map[*entry]uint64{}
		for _, p := range batch {
			m[p.w.en] = p.w.seq
		}
		return m
	}
	for round := 0; len(q.order) > 0; round++ {
		if round > 10 {
			t.Fatalf("writes left unsent: %v", q.order)
		}
		if !q.flush() {
			t.Fatalf("round %d: nothing could be sent of %v", round, q.order)
		}
		res := <-q.results
		seen := inBatch(res.batch)
		for _, p := range res.batch {
			for _, d := range p.after {
				if d.en.durable.Load() < d.seq && seen[d.en] < d.seq {
					t.Fatalf("round %d: %s:%d sent before %s:%d", round, p.w.ref.ID, p.w.seq, d.en.ref.ID, d.seq)
				}
			}
		}
		if res.err != nil || res.outcome[0] != nil {
			t.Fatalf("round %d: Save: %v %v", round, res.err, res.outcome)
		}
		q.settle(res)
	}
	for _, e := range []*entry{a, bb, c} {
		if e.durable.Load() == 0 {
			t.Fatalf("%s never durable", e.ref.ID)
		}
	}
	if a.durable.Load() != 3 || c.durable.Load() != 2 {
		t.Fatalf("durable a:%d c:%d, want a:3 c:2", a.durable.Load(), c.durable.Load())
	}
}

// A write the store refused as too large (with the others of its group)
// is not merged into its entity's newer queued write when that one waits
// for a co-located write: the writes that waited for the refused one would
// then wait for the newer one, which waits for them.
func TestRequeueKeepsWaitsAcyclic(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	store := memory.New()
	defer store.Close()
	if err := store.Fence(ctx, 0, 1); err != nil {
		t.Fatal(err)
	}
	q := newQueue(newBatcher(store, DefaultLocalConfig(), nil), ctx)
	sh := &shardState{id: 0, epoch: 1}
	en := func(id string) *entry { return &entry{ref: Ref{Kind: "k", ID: id}, shard: sh} }
	x, y, z := en("x"), en("y"), en("z")
	w := func(e *entry, seq uint64, after ...writeDep) write {
		return write{ref: e.ref, en: e, epoch: 1, seq: seq, after: after, done: func(error) {}}
	}
	q.add(w(x, 1))
	q.add(w(z, 1))
	if !q.flush() {
		t.Fatal("x:1 and z:1 not sent")
	}
	sent := <-q.results
	// Meanwhile y takes x's message (y:1 waits for x:1) and answers with
	// one of its own (x:2 waits for y:1).
	q.add(w(y, 1, writeDep{x, 1}))
	q.add(w(x, 2, writeDep{y, 1}))
	// The store refuses the group of x:1 and z:1 as too large.
	q.settle(saveResult{id: sent.id, batch: sent.batch,
		outcome: map[uint32]error{0: fmt.Errorf("group: %w", persistence.ErrTooLarge)}})

	for round := 0; len(q.order) > 0; round++ {
		if round > 10 {
			t.Fatalf("writes left unsent: %v", q.order)
		}
		if !q.flush() {
			t.Fatalf("round %d: nothing could be sent of %v", round, q.order)
		}
		res := <-q.results
		for _, p := range res.batch {
			for _, d := range p.after {
				if d.en.durable.Load() < d.seq {
					in := false
					for _, o := range res.batch {
						in = in || o.w.en == d.en && o.w.seq >= d.seq
					}
					if !in {
						t.Fatalf("round %d: %s:%d sent before %s:%d", round, p.w.ref.ID, p.w.seq, d.en.ref.ID, d.seq)
					}
				}
			}
		}
		q.settle(res)
	}
	if x.durable.Load() != 2 || y.durable.Load() != 1 || z.durable.Load() != 1 {
		t.Fatalf("durable x:%d y:%d z:%d, want 2 1 1", x.durable.Load(), y.durable.Load(), z.durable.Load())
	}
}
