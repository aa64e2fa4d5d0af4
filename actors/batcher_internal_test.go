package actors

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/persistence"
	"github.com/ordo-actors/ordo/persistence/memory"
)

// testQueue is a batcher's queue whose Saves' outcomes wait in results
// for the test to settle them.
type testQueue struct {
	*queue
	results chan saveResult
}

// newTestQueue returns a testQueue over a memory store whose shard 0 is
// fenced at epoch 1, and a maker of entities of that shard.
func newTestQueue(t *testing.T) (*testQueue, func(id string) *entry) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	store := memory.New()
	t.Cleanup(func() { store.Close() })
	if err := store.Fence(ctx, 0, 1); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultLocalConfig()
	q := &testQueue{results: make(chan saveResult, cfg.BatchMaxInFlight)}
	q.queue = newQueue(newBatcher(store, cfg, nil), ctx, func(r saveResult, buf []earlyReply) []earlyReply { q.results <- r; return buf })
	t.Cleanup(q.stopSavers)
	sh := &shardState{id: 0, epoch: 1}
	return q, func(id string) *entry { return &entry{ref: Ref{Kind: "k", ID: id}, shard: sh} }
}

// testWrite is write seq of e, waiting for after.
func testWrite(e *entry, seq uint64, after ...writeDep) write {
	return write{ref: e.ref, en: e, epoch: 1, seq: seq, after: after, done: func(error) {}}
}

// sendAll sends every queued write, one Save after another, each settled
// with the store's outcome. It fails t if the queue stalls, or if a write
// is sent before a write it waits for is durable or in the same Save.
func sendAll(t *testing.T, q *testQueue) {
	t.Helper()
	for round := 0; len(q.order) > 0; round++ {
		if round > 10 {
			t.Fatalf("writes left unsent: %v", q.order)
		}
		if !q.flush() {
			t.Fatalf("round %d: nothing could be sent of %v", round, q.order)
		}
		res := <-q.results
		inBatch := map[*entry]uint64{}
		for _, p := range res.batch {
			inBatch[p.w.en] = max(inBatch[p.w.en], p.w.seq)
		}
		for _, p := range res.batch {
			for _, d := range p.after {
				if d.en.durable.Load() < d.seq && inBatch[d.en] < d.seq {
					t.Fatalf("round %d: %s:%d sent before %s:%d", round, p.w.ref.ID, p.w.seq, d.en.ref.ID, d.seq)
				}
			}
		}
		if res.err != nil || res.outcome[0] != nil {
			t.Fatalf("round %d: Save: %v %v", round, res.err, res.outcome)
		}
		q.settle(res)
	}
}

// The waits between queued co-located writes stay acyclic however the
// cycle would close: through three entities, and through a write chained
// after its entity's earlier one. A write that would close a cycle starts
// a pending of its own instead of joining its entity's last one.
func TestQueueWaitsStayAcyclic(t *testing.T) {
	q, en := newTestQueue(t)
	a, b, c := en("a"), en("b"), en("c")
	chain := func(e *entry) int {
		n := 0
		for p := q.queued[e.ref]; p != nil; p = p.next {
			n++
		}
		return n
	}

	// a:1 ← b:1 (b received a's message), b:1 ← c:1, then c's message to a
	// makes a:2 wait for c:1: joined to a:1, a would wait for itself.
	q.add(testWrite(a, 1))
	q.add(testWrite(b, 1, writeDep{a, 1}))
	q.add(testWrite(c, 1, writeDep{b, 1}))
	q.add(testWrite(a, 2, writeDep{c, 1}))
	if n := chain(a); n != 2 {
		t.Fatalf("a has %d pendings, want 2 (a:2 apart from a:1)", n)
	}
	// No cycle: a write that waits for nothing a waits for joins.
	q.add(testWrite(a, 3))
	if n := chain(a); n != 2 {
		t.Fatalf("a has %d pendings after a:3, want 2 (a:3 joins a:2)", n)
	}
	// c:2 waits for a:3, which waits (as a:2, through its chain) for c:1:
	// joined to c:1, c would wait for itself.
	q.add(testWrite(c, 2, writeDep{a, 3}))
	if n := chain(c); n != 2 {
		t.Fatalf("c has %d pendings, want 2", n)
	}
	sendAll(t, q)
	if a.durable.Load() != 3 || b.durable.Load() != 1 || c.durable.Load() != 2 {
		t.Fatalf("durable a:%d b:%d c:%d, want 3 1 2", a.durable.Load(), b.durable.Load(), c.durable.Load())
	}
}

// A write the store refused as too large (with the others of its group)
// is not merged into its entity's newer queued write when that one waits
// for a co-located write: the writes that waited for the refused one would
// then wait for the newer one, which waits for them.
func TestRequeueKeepsWaitsAcyclic(t *testing.T) {
	q, en := newTestQueue(t)
	x, y, z := en("x"), en("y"), en("z")
	q.add(testWrite(x, 1))
	q.add(testWrite(z, 1))
	if !q.flush() {
		t.Fatal("x:1 and z:1 not sent")
	}
	sent := <-q.results
	// Meanwhile y takes x's message (y:1 waits for x:1) and answers with
	// one of its own (x:2 waits for y:1).
	q.add(testWrite(y, 1, writeDep{x, 1}))
	q.add(testWrite(x, 2, writeDep{y, 1}))
	// The store refuses the group of x:1 and z:1 as too large.
	q.settle(saveResult{id: sent.id, batch: sent.batch,
		outcome: map[uint32]error{0: fmt.Errorf("group: %w", persistence.ErrTooLarge)}})

	sendAll(t, q)
	if x.durable.Load() != 2 || y.durable.Load() != 1 || z.durable.Load() != 1 {
		t.Fatalf("durable x:%d y:%d z:%d, want 2 1 1", x.durable.Load(), y.durable.Load(), z.durable.Load())
	}
}

// A write that depends on a co-located write queued after it goes in the
// same Save as that write, not the next: the account queued first, the
// saga's start (which the account's debit depends on) after it, and a
// chain of three such writes, each queued before the one it depends on.
func TestFlushTakesWritesWhoseDependencyCameLater(t *testing.T) {
	q, en := newTestQueue(t)
	account, saga := en("account"), en("saga")
	q.add(testWrite(account, 1, writeDep{saga, 1}))
	q.add(testWrite(saga, 1))
	a, b, c := en("a"), en("b"), en("c")
	q.add(testWrite(a, 1, writeDep{b, 1}))
	q.add(testWrite(b, 1, writeDep{c, 1}))
	q.add(testWrite(c, 1))
	if !q.flush() {
		t.Fatal("nothing sent")
	}
	res := <-q.results
	if len(res.batch) != 5 {
		t.Fatalf("the first Save carries %d writes, want all 5", len(res.batch))
	}
	if len(q.order) != 0 || len(q.queued) != 0 {
		t.Fatalf("left queued: %v", q.order)
	}
	q.settle(res)
	for _, e := range []*entry{account, saga, a, b, c} {
		if e.durable.Load() != 1 {
			t.Fatalf("%s durable at %d, want 1", e.ref.ID, e.durable.Load())
		}
	}
}

// A write whose dependency is in flight still waits for the next Save,
// and the entity's writes chained after one taken by the second look stay
// queued, in order.
func TestFlushSecondLookKeepsOrder(t *testing.T) {
	q, en := newTestQueue(t)
	x, y, z := en("x"), en("y"), en("z")
	q.add(testWrite(z, 1))
	if !q.flush() { // z:1 in flight
		t.Fatal("nothing sent")
	}
	first := <-q.results
	q.add(testWrite(x, 1, writeDep{y, 1}))
	q.add(testWrite(x, 2, writeDep{z, 2})) // closes no cycle: joins x:1
	q.add(testWrite(y, 1))
	q.add(testWrite(z, 2))
	if !q.flush() {
		t.Fatal("nothing sent besides the Save in flight")
	}
	second := <-q.results
	ids := map[string]bool{}
	for _, p := range second.batch {
		ids[p.w.ref.ID] = true
	}
	// x waits for z:2, and z is in flight: neither x nor z goes; y does.
	if !ids["y"] || ids["x"] || ids["z"] {
		t.Fatalf("second Save carries %v, want y alone", ids)
	}
	q.settle(first)
	q.settle(second)
	sendAll(t, q)
	if x.durable.Load() != 2 || y.durable.Load() != 1 || z.durable.Load() != 2 {
		t.Fatalf("durable x:%d y:%d z:%d, want 2 1 2", x.durable.Load(), y.durable.Load(), z.durable.Load())
	}
}

// close fails the queued writes at once, but returns only once the Save in
// flight has ended and its writes have learned their outcome; so does a
// cancel that waits for that Save. A write made after close began fails
// with ErrClosed.
func TestBatcherCloseWaitsForTheSaveInFlight(t *testing.T) {
	ctx := context.Background()
	store := memory.New()
	defer store.Close()
	if err := store.Fence(ctx, 0, 1); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultLocalConfig() // one Save in flight at most
	b := newBatcher(store, cfg, nil)
	b.start(ctx)
	sh := &shardState{id: 0, epoch: 1}
	outcome := map[string]chan error{}
	submit := func(id string) {
		en := &entry{ref: Ref{Kind: "k", ID: id}, shard: sh}
		outcome[id] = make(chan error, 1)
		w := testWrite(en, 1)
		w.state = []byte(id)
		w.done = func(err error) { outcome[id] <- err }
		b.submit(w)
	}
	release := store.BlockSaves()
	defer release()
	submit("a")
	for deadline := time.Now().Add(10 * time.Second); b.Stats().Saves == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a's Save never started")
		}
	}
	submit("b") // queued behind a's Save

	canceled, closed := make(chan struct{}), make(chan struct{})
	go func() { b.cancelEntity(Ref{Kind: "k", ID: "a"}, 1); close(canceled) }()
	waiting := func() bool { b.mu.Lock(); defer b.mu.Unlock(); return len(b.q.waiting) > 0 }
	for deadline := time.Now().Add(10 * time.Second); !waiting(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the cancel never waited for a's Save")
		}
	}
	go func() { b.close(); close(closed) }()
	if err := <-outcome["b"]; !errors.Is(err, ErrClosed) {
		t.Fatalf("queued write: %v, want ErrClosed", err)
	}
	submit("c")
	if err := <-outcome["c"]; !errors.Is(err, ErrClosed) {
		t.Fatalf("write after close: %v, want ErrClosed", err)
	}
	if !waiting() {
		t.Fatal("close acknowledged a cancel whose write is in flight")
	}
	select {
	case <-closed:
		t.Fatal("close returned with a Save in flight")
	case <-canceled:
		t.Fatal("a cancel returned with its entity's write in flight")
	case err := <-outcome["a"]:
		t.Fatalf("a's write learned %v before its Save ended", err)
	default:
	}

	release()
	if err := <-outcome["a"]; err != nil {
		t.Fatalf("a's write: %v, want durable", err)
	}
	<-canceled
	<-closed
	got, err := store.Load(ctx, "k", "a")
	if err != nil || got.Epoch != 1 || len(got.Data) == 0 {
		t.Fatalf("a's record: %+v, %v", got, err)
	}
	if st := b.Stats(); st.Saves != 1 || st.Writes != 2 {
		t.Fatalf("stats %+v, want 1 Save of 2 writes submitted before close", st)
	}
}

// A settled Save's pendings serve the next writes: a write then costs no
// pending of its own. A pooled pending holds nothing of its writes, a
// pending the store refused goes again, not to the pool, and the pool
// keeps maxPooled at most.
func TestSettledPendingsServeLaterWrites(t *testing.T) {
	q, en := newTestQueue(t)
	a, b, c := en("a"), en("b"), en("c")
	told := 0
	w := testWrite(a, 1)
	w.done = func(error) { told++ }
	q.add(w)
	first := q.queued[a.ref]
	if !q.flush() {
		t.Fatal("a:1 not sent")
	}
	q.settle(<-q.results)
	if told != 1 || a.durable.Load() != 1 {
		t.Fatalf("a:1 told %d times, durable at %d; want 1, 1", told, a.durable.Load())
	}
	if len(q.pool) != 1 || q.pool[0] != first {
		t.Fatalf("pool %v, want a:1's pending %p", q.pool, first)
	}
	if p := q.pool[0]; p.w.en != nil || p.w.done != nil || p.done != nil || p.done1[0] != nil || p.next != nil {
		t.Fatalf("pooled pending still holds its write: %+v", p)
	}
	q.add(testWrite(b, 1))
	if q.queued[b.ref] != first || len(q.pool) != 0 {
		t.Fatalf("b:1's pending %p, pool %d: want a:1's settled pending %p", q.queued[b.ref], len(q.pool), first)
	}

	// The store refuses b:1 and c:1 as a group too large: both go again,
	// in groups of one, and neither is pooled meanwhile.
	q.add(testWrite(c, 1))
	if !q.flush() {
		t.Fatal("b:1 and c:1 not sent")
	}
	sent := <-q.results
	q.settle(saveResult{id: sent.id, batch: sent.batch,
		outcome: map[uint32]error{0: fmt.Errorf("group: %w", persistence.ErrTooLarge)}})
	if len(q.pool) != 0 || q.queued[b.ref] == nil || q.queued[c.ref] == nil {
		t.Fatalf("after the refusal: pool %d, queued %v", len(q.pool), q.order)
	}
	sendAll(t, q)
	if b.durable.Load() != 1 || c.durable.Load() != 1 || len(q.pool) != 2 {
		t.Fatalf("durable b:%d c:%d, pool %d; want 1 1 2", b.durable.Load(), c.durable.Load(), len(q.pool))
	}

	// A burst's pendings are not all kept.
	q.b.maxRecords = 2 * maxPooled
	for i := range maxPooled + 10 {
		q.add(testWrite(en(fmt.Sprint("burst", i)), 1))
	}
	sendAll(t, q)
	if len(q.pool) != maxPooled {
		t.Fatalf("pool %d after a Save of %d writes, want %d", len(q.pool), maxPooled+10, maxPooled)
	}
}

// A saver's Saves share a deadline between d and 5d/4 ahead: a context is
// replaced when it would end within d, or has ended.
func TestSaveBoundSharesOneDeadline(t *testing.T) {
	parent, cancel := context.WithCancel(context.Background())
	defer cancel()
	var sb saveBound
	defer sb.stop()
	const d = time.Hour
	before := time.Now()
	ctx := sb.context(parent, d)
	after := time.Now()
	end, ok := ctx.Deadline()
	if !ok || end.Before(before.Add(d)) || end.After(after.Add(d+d/4)) {
		t.Fatalf("deadline %v (set: %v), want between %v and %v", end, ok, before.Add(d), after.Add(d+d/4))
	}
	if again := sb.context(parent, d); again != ctx {
		t.Fatal("a Save started at once got another context")
	}
	// Under 2h left: a Save bounded by 2h gets a new context, which
	// replaces, and releases, the old one.
	longer := sb.context(parent, 2*d)
	if longer == ctx || ctx.Err() == nil {
		t.Fatalf("bound 2h: same context %v, old context's error %v", longer == ctx, ctx.Err())
	}
	if end, _ := longer.Deadline(); end.Before(time.Now().Add(2*d - time.Minute)) {
		t.Fatalf("bound 2h: deadline %v", end)
	}
	// A context that has ended is not handed out again.
	sb.stop()
	if next := sb.context(parent, 2*d); next == longer || next.Err() != nil {
		t.Fatalf("after the context ended: same %v, error %v", next == longer, next.Err())
	}
	cancel()
	if got := sb.context(parent, 2*d); got.Err() == nil {
		t.Fatal("a context of a canceled parent has not ended")
	}
}

// A saver encodes a Save's records in the buffer it kept from its last
// Save: once it has grown to the Saves' size, their data costs no
// allocation, dedup records included (only a dedup record's kind name is
// made), and each record's data is its own.
func TestSaveRecordsReuseTheSaversBuffer(t *testing.T) {
	var batch []*pending
	for i := range 8 {
		w := write{ref: Ref{Kind: "k", ID: fmt.Sprint("e", i)}, epoch: 1, seq: uint64(i + 1),
			state: bytes.Repeat([]byte{byte(i)}, 100+i), recent: [][]byte{[]byte("recent")}, dedupGen: 1, dedupLen: 1}
		if i%2 == 0 {
			w.cold = [][]byte{bytes.Repeat([]byte{0xcd}, 500)}
		}
		batch = append(batch, newPending(w, nil))
	}
	var recs []persistence.Record
	var arena []byte
	encode := func() {
		recs, arena = recs[:0], arena[:0]
		for _, p := range batch {
			recs, arena = p.records(recs, arena)
		}
	}
	encode()
	if len(recs) != 12 {
		t.Fatalf("%d records, want 12 (8 entities, 4 dedup records)", len(recs))
	}
	first := make([][]byte, len(recs))
	for i, r := range recs {
		first[i] = bytes.Clone(r.Data)
		if cap(r.Data) != len(r.Data) {
			t.Fatalf("record %d: %d bytes in a slice of %d", i, len(r.Data), cap(r.Data))
		}
	}
	if allocs := testing.AllocsPerRun(100, encode); allocs != 4 {
		t.Fatalf("encoding a Save of %d records: %.1f allocations, want 4 (the dedup records' kind names)", len(recs), allocs)
	}
	for i, r := range recs {
		if !bytes.Equal(r.Data, first[i]) {
			t.Fatalf("record %d (%s) encoded anew differs", i, r.Kind)
		}
	}
}

// pace spaces the Save after a busy one by the Save's duration times
// BatchPace, within its bounds; a Save of few entities, a failed one and
// a short one space nothing.
func TestPaceSpacesTheNextSaveByTheLast(t *testing.T) {
	q, en := newTestQueue(t)
	q.b.pace = 1.5
	busy := make([]*pending, paceMinBatch)
	now := time.Unix(1000, 0)
	for _, tc := range []struct {
		name  string
		res   saveResult
		until time.Time
	}{
		{"busy", saveResult{batch: busy, took: 2 * time.Millisecond}, now.Add(3 * time.Millisecond)},
		{"stalled store", saveResult{batch: busy, took: time.Minute}, now.Add(maxPaceGap)},
		{"short", saveResult{batch: busy, took: minPaceGap / 2}, time.Time{}},
		{"few entities", saveResult{batch: busy[1:], took: 2 * time.Millisecond}, time.Time{}},
		{"failed", saveResult{batch: busy, took: 2 * time.Millisecond, err: errors.New("down")}, time.Time{}},
	} {
		q.paceUntil = now.Add(time.Hour) // whatever was set before
		q.pace(tc.res, now)
		if !q.paceUntil.Equal(tc.until) {
			t.Errorf("%s: next Save %s after, want %s", tc.name, gapOf(q.paceUntil, now), gapOf(tc.until, now))
		}
	}

	q.b.pace = 0
	q.pace(saveResult{batch: busy, took: 2 * time.Millisecond}, now)
	if !q.paceUntil.IsZero() {
		t.Errorf("BatchPace 0 spaced the next Save by %s", gapOf(q.paceUntil, now))
	}

	// Queued writes wait until paceUntil, and BatchMaxDelay still holds.
	q.add(testWrite(en("a"), 1))
	q.firstQueued = now
	q.paceUntil = now.Add(3 * time.Millisecond)
	if got := q.wait(now); got != 3*time.Millisecond {
		t.Errorf("wait %v, want 3ms", got)
	}
	if got := q.wait(now.Add(3 * time.Millisecond)); got > 0 {
		t.Errorf("wait at paceUntil %v, want none", got)
	}
	q.b.maxDelay = 5 * time.Millisecond
	if got := q.wait(now.Add(3 * time.Millisecond)); got != 2*time.Millisecond {
		t.Errorf("wait with BatchMaxDelay %v, want 2ms", got)
	}
}

// gapOf describes a paceUntil relative to now: "at once" when unset.
func gapOf(until, now time.Time) string {
	if until.IsZero() {
		return "at once"
	}
	return until.Sub(now).String()
}

// A paced queue holds its writes until paceUntil, or until a full Save
// is queued; its timer then sends them with nothing else happening.
func TestPacedWritesGoWhenDueOrFull(t *testing.T) {
	ctx := context.Background()
	store := memory.New()
	defer store.Close()
	if err := store.Fence(ctx, 0, 1); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultLocalConfig()
	cfg.BatchMaxRecords = 3
	b := newBatcher(store, cfg, nil)
	b.start(ctx)
	defer b.close()
	sh := &shardState{id: 0, epoch: 1}
	durable := make(chan error, 8)
	await := func() {
		t.Helper()
		select {
		case err := <-durable:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a write waited 10s for its Save")
		}
	}
	submit := func(id string) {
		w := testWrite(&entry{ref: Ref{Kind: "k", ID: id}, shard: sh}, 1)
		w.state = []byte(id)
		w.done = func(err error) { durable <- err }
		b.submit(w)
	}
	state := func() (queued, inflight int) {
		b.mu.Lock()
		defer b.mu.Unlock()
		return len(b.q.order), len(b.q.inflight)
	}
	setPace := func(d time.Duration) {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.q.paceUntil = time.Now().Add(d)
	}

	setPace(time.Hour)
	submit("a")
	submit("b")
	if queued, inflight := state(); queued != 2 || inflight != 0 {
		t.Fatalf("paced: %d queued, %d in flight; want 2 queued", queued, inflight)
	}
	submit("c") // BatchMaxRecords queued: the Save goes
	for range 3 {
		await()
	}
	if st := b.Stats(); st.Saves != 1 || st.Records != 3 {
		t.Fatalf("stats %+v, want one Save of 3 records", st)
	}

	setPace(time.Hour)
	submit("d")
	if queued, inflight := state(); queued != 1 || inflight != 0 {
		t.Fatalf("paced: %d queued, %d in flight; want 1 queued", queued, inflight)
	}
	b.mu.Lock()
	b.q.paceUntil = time.Now().Add(time.Millisecond)
	b.q.stopTimers()
	b.q.flushReady() // arms the timer for paceUntil
	b.mu.Unlock()
	await()
	if st := b.Stats(); st.Saves != 2 {
		t.Fatalf("stats %+v, want a second Save", st)
	}
}
