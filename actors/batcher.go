package actors

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/ordo-actors/ordo/persistence"
	"github.com/ordo-actors/ordo/proto/ordopb"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/encoding/protowire"
)

// errWriteCanceled fails writes withdrawn before they were sent (their
// entity restarted or their shard was dropped).
var errWriteCanceled = errors.New("actors: write canceled")

// write is one entity write handed to the batcher: the parts of the
// entity's record, which the batcher encodes only when it puts the record
// in a Save (a newer write of the entity replaces a queued one, so many
// writes between two Saves cost one encode). Every slice is immutable.
type write struct {
	ref   Ref
	en    *entry // the writer; the batcher advances en.durable
	shard uint32
	epoch int64
	seq   uint64
	state []byte
	// recent are the newest dedup entries of the entity, those its record
	// holds itself, each encoded as an EntityRecord.recent field, oldest
	// first; dedupGen and dedupLen are the record's dedup_generation and
	// dedup_len, and cold, when not nil, is the whole window, the entries
	// of the DedupRecord of dedupGen to write with it.
	recent   [][]byte
	dedupGen uint64
	dedupLen int
	cold     [][]byte
	coldSize int // bytes of the entries of the dedup record the write carries (its own or one it covers)
	// fences are the entity's sender fences, encoded as EntityRecord
	// fields 5 and 6 (nil: none).
	fences []byte
	// reminders are the entity's durable reminders, encoded as
	// EntityRecord.reminders fields (nil: none); due is the earliest one's
	// due time (0: none) and prevDue the due time the store indexed the
	// entity under so far (persistence.Record.Due, PrevDue).
	reminders    []byte
	due, prevDue int64
	size         int // len(state) plus the bytes of recent, fences, reminders and events
	// after are writes of co-located entities this one depends on: it is
	// never sent before them, only with them (same Save) or after them.
	after []writeDep
	// expect is the number of co-located messages released with this write
	// as their dependency: the batcher keeps it back (up to colocateLinger)
	// until each receiver's write arrives, or the receiver says it made
	// none, so that they share one Save.
	expect int
	// done is called exactly once, under the batcher's lock (it must
	// neither call the batcher nor block), with nil when the write is
	// durable or the reason it is not.
	done func(error)
	// span is the span of the run that made the write; nil: tracing off.
	span trace.Span
	// journal is the new events of an event-sourced entity, its record's
	// journal fields, and the events its snapshot lets go.
	journal journalWrite
	// create makes the record a creation (persistence.Record.Create): the
	// first write of an entity activated without a read (AsNew).
	create bool
}

// writeDep names write seq of the entity en (or any later one).
type writeDep struct {
	en  *entry
	seq uint64
}

// pending is the newest not-yet-sent write of one entity, with the done
// callbacks of every write it replaced (a newer snapshot covers them).
// The events of an event-sourced entity's writes are not covered by a
// newer write: a pending keeps every event of the writes it replaced, in
// order, up to BatchMaxEvents; a write beyond that starts the next
// pending of the entity (next), saved after this one.
type pending struct {
	w      write
	after  []writeDep
	expect int       // co-located writes still expected to join
	linger time.Time // when to stop waiting for them
	done   []func(error)
	done1  [1]func(error) // done's first array: most pendings cover one write
	// limit, when positive, is the most records of the write's shard a
	// Save may carry with it: the store refused a larger group as too
	// large (see settle).
	limit int

	// events are the events of every write p covers, in order.
	events []persistence.Event
	// deleteBefore is the highest Record.DeleteEventsBefore of the writes.
	deleteBefore uint64
	// snapshot is the newest snapshot record data of the writes, if any.
	snapshot []byte
	// cold is the window of the newest of the writes that wrote a dedup
	// record, if any (its generation is w's: a later write names the
	// same one).
	cold [][]byte
	// traced holds the spans of the sampled runs whose writes w replaced:
	// the Save's span links them too (tracing only).
	traced []trace.Span
	// next is the entity's pending saved after this one (nil: none).
	next *pending
}

// colocateLinger bounds how long a write waits for the writes of the
// co-located entities it sent messages to (a receiver that stopped before
// handling its message never reports).
const colocateLinger = 2 * time.Millisecond

// record encodes p's write as the record a Save stores: an EntityRecord,
// its scalar fields first, then the encoded fields the write carries
// (recent, fences, reminders, journal fields). It appends the record's
// data to arena, the Save's buffer (see saver), and returns the record,
// whose Data is a slice of arena of exactly its size (w.size also counts
// what goes to other records: the dedup window, the events, the
// snapshot), and arena.
func (p *pending) record(arena []byte) (persistence.Record, []byte) {
	w := &p.w
	n := recordHeaderSize(w) + len(w.fences) + len(w.reminders) + len(w.journal.meta)
	for _, b := range w.recent {
		n += len(b)
	}
	arena = slices.Grow(arena, n)
	start := len(arena)
	arena = appendRecordHeader(arena, w)
	for _, b := range w.recent {
		arena = append(arena, b...)
	}
	arena = append(arena, w.fences...)
	arena = append(arena, w.reminders...)
	arena = append(arena, w.journal.meta...)
	return persistence.Record{Kind: w.ref.Kind, ID: w.ref.ID, Shard: w.shard, Epoch: w.epoch, Data: arena[start:len(arena):len(arena)],
		Due: w.due, PrevDue: w.prevDue, Events: p.events, DeleteEventsBefore: p.deleteBefore, Create: w.create}, arena
}

// appendRecordHeader appends the scalar fields of w's EntityRecord (state,
// epoch, seq, dedup_generation, dedup_len) as proto.Marshal encodes them:
// in field order, zero values left out.
func appendRecordHeader(b []byte, w *write) []byte {
	b = appendBytesField(b, 1, w.state)
	b = appendVarintField(b, 2, uint64(w.epoch))
	b = appendVarintField(b, 3, w.seq)
	b = appendVarintField(b, 8, w.dedupGen)
	return appendVarintField(b, 9, uint64(uint32(w.dedupLen)))
}

// recordHeaderSize is the length appendRecordHeader appends.
func recordHeaderSize(w *write) int {
	n := 0
	if len(w.state) > 0 {
		n += protowire.SizeTag(1) + protowire.SizeBytes(len(w.state))
	}
	for _, v := range []uint64{uint64(w.epoch), w.seq, w.dedupGen, uint64(uint32(w.dedupLen))} {
		if v != 0 {
			n += 1 + protowire.SizeVarint(v) // fields 2 to 9: one-byte tags
		}
	}
	return n
}

// appendVarintField appends a proto3 varint field, unless zero.
func appendVarintField(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

// records appends p's records to recs: the entity's, its dedup record
// when p carries a new generation, and its snapshot's when p carries a
// new one (event-sourced kinds). The data it encodes goes in arena (see
// record); it returns recs and arena.
func (p *pending) records(recs []persistence.Record, arena []byte) ([]persistence.Record, []byte) {
	rec, arena := p.record(arena)
	recs = append(recs, rec)
	w := &p.w
	if p.cold != nil {
		start := len(arena)
		arena = appendDedupRecord(arena, w.dedupGen, p.cold)
		recs = append(recs, persistence.Record{Kind: w.ref.Kind + DedupKindSuffix, ID: w.ref.ID,
			Shard: w.shard, Epoch: w.epoch, Data: arena[start:len(arena):len(arena)]})
	}
	if p.snapshot != nil {
		recs = append(recs, persistence.Record{Kind: w.ref.Kind + SnapshotKindSuffix, ID: w.ref.ID,
			Shard: w.shard, Epoch: w.epoch, Data: p.snapshot})
	}
	return recs, arena
}

// newPending returns the pending of w alone, one of pool's if it keeps
// any (pool may be nil).
func newPending(w write, pool *pendingPool) *pending {
	p := pool.take()
	*p = pending{w: w, after: w.after, expect: w.expect, done1: [1]func(error){w.done},
		events: w.journal.events, deleteBefore: w.journal.deleteBefore, snapshot: w.journal.snapshot, cold: w.cold}
	p.done = p.done1[:]
	if w.expect > 0 {
		p.linger = time.Now().Add(colocateLinger)
	}
	return p
}

// last returns the last pending of p's chain.
func (p *pending) last() *pending {
	for p.next != nil {
		p = p.next
	}
	return p
}

// add makes the newer write w of p's entity replace p's, unless w's
// events would take p over maxEvents, or apart is set: then w starts
// p.next (newPending). It returns the pending w joined.
func (p *pending) add(w write, maxEvents int, apart bool, pool *pendingPool) *pending {
	p = p.last()
	if n := len(w.journal.events); apart || n > 0 && len(p.events) > 0 && len(p.events)+n > maxEvents {
		p.next = newPending(w, pool)
		return p.next
	}
	if p.w.span != nil && p.w.span.SpanContext().IsSampled() {
		p.traced = append(p.traced, p.w.span)
	}
	w.prevDue = p.w.prevDue // the replaced write is never sent
	w.create = w.create || p.w.create
	if w.cold == nil && p.cold != nil {
		w.size += p.w.coldSize // the dedup record of a write it covers goes with it
		w.coldSize = p.w.coldSize
	}
	p.w = w
	p.after = append(p.after, w.after...)
	p.expect += w.expect
	if w.expect > 0 {
		p.linger = time.Now().Add(colocateLinger)
	}
	p.done = append(p.done, w.done)
	p.events = append(p.events, w.journal.events...)
	p.deleteBefore = max(p.deleteBefore, w.journal.deleteBefore)
	if w.journal.snapshot != nil {
		p.snapshot = w.journal.snapshot
	}
	if w.cold != nil {
		p.cold = w.cold
	}
	return p
}

// pendingPool keeps pendings whose Saves are settled, for new writes:
// a write then costs no allocation of its pending. The batcher's lock
// guards the queue's pool.
type pendingPool []*pending

// maxPooled bounds the pendings a pool keeps: a burst's are not kept.
const maxPooled = 256

// take returns a zero pending: one of the pool's, or a new one when it
// has none (or is nil).
func (pool *pendingPool) take() *pending {
	if pool == nil || len(*pool) == 0 {
		return new(pending)
	}
	n := len(*pool) - 1
	p := (*pool)[n]
	(*pool)[n] = nil
	*pool = (*pool)[:n]
	return p
}

// put keeps p for a later write, once nothing refers to it any more: its
// Save is settled, and its writes have been told.
func (pool *pendingPool) put(p *pending) {
	if len(*pool) < maxPooled {
		*p = pending{} // it holds no write, callback or span meanwhile
		*pool = append(*pool, p)
	}
}

// chainSize returns the bytes of p and the pendings after it.
func (p *pending) chainSize() int {
	n := 0
	for ; p != nil; p = p.next {
		n += p.w.size
	}
	return n
}

// ready reports whether every write p depends on is durable or in the
// batch being built (inBatch: the highest seq per entry).
func (p *pending) ready(inBatch map[*entry]uint64) bool {
	for _, d := range p.after {
		if d.en.durable.Load() < d.seq && inBatch[d.en] < d.seq {
			return false
		}
	}
	return true
}

// groupSize returns how many records of shard batch holds.
func groupSize(batch []*pending, shard uint32) int {
	n := 0
	for _, p := range batch {
		if p.w.shard == shard {
			n++
		}
	}
	return n
}

type poison struct {
	shard uint32
	epoch int64
	err   error
}

// batchOp is a write, a cancel, a co-located receiver's report that it
// made no write depending on dep, or a question from Host.Runtime.
type batchOp struct {
	w       write
	cancel  *cancelReq
	dep     *writeDep
	inspect *inspectWrites
}

type cancelReq struct {
	ref   Ref
	epoch int64 // only writes under this epoch are canceled
	shard uint32
	all   bool // cancel every write of the shard instead of one entity's
	ack   chan struct{}
}

// BatchStats counts the batcher's work since the host started.
type BatchStats struct {
	// Saves is the number of Store.Save calls.
	Saves uint64
	// Records is the number of records written by them (after coalescing).
	Records uint64
	// Writes is the number of entity writes submitted (before coalescing).
	Writes uint64
	// Fenced is the number of records rejected by fencing.
	Fenced uint64
	// Failed is the number of records whose Save failed otherwise.
	Failed uint64
	// TooLarge is the number of records the store refused as too large
	// (persistence.ErrTooLarge), each alone in its shard's group: their
	// entities restart, their shards are not affected. Records refused
	// only as part of a larger group are sent again in smaller groups, and
	// not counted.
	TooLarge uint64
	// Encodes is the number of records encoded: one per record a Save
	// carries, however many writes of the entity it covers.
	Encodes uint64
	// Canceled is the number of writes withdrawn unsent: their entity
	// restarted, their shard was dropped, or they were made after that.
	Canceled uint64
}

func (b *batcher) countCanceled(n int) {
	b.statsMu.Lock()
	b.stats.Canceled += uint64(n)
	b.statsMu.Unlock()
}

// batcher is the per-host group committer. Its queue is guarded by a
// mutex rather than owned by a goroutine of its own: the goroutine that
// makes a write queues it and, when a Save is due, starts it; the saver
// that ran a Save takes its outcome and starts the next one. A write
// reaches its Save, and its entity the outcome, through no goroutine that
// exists only to pass it on. Up to BatchMaxInFlight Saves run at once,
// but an entity is never in two of them: its writes become durable in the
// order they were made, and a newer queued snapshot of an entity replaces
// an older queued one.
//
// A store outcome matching persistence.ErrTooLarge for a shard is a
// deterministic refusal: nothing of the shard's group was written. A group
// of several records goes again in groups of half its size (the group may
// only be too large as a whole: more records than one etcd transaction
// holds); a record refused alone fails, with every later write of its
// entity, and nothing else. Any other failure poisons the entity as well,
// and its entity then gives the shard up.
type batcher struct {
	store       persistence.Store
	maxRecords  int
	maxBytes    int
	maxDelay    time.Duration
	pace        float64 // HostConfig.BatchPace
	maxInFlight int
	timeout     time.Duration
	onBatch     func(int)
	tracer      trace.Tracer // nil: no spans (trace.go)
	maxEvents   int          // events per shard group (HostConfig.BatchMaxEvents)
	// finish delivers a reply (Host.finish): the replies that waited for
	// writes a Save made durable are released by its saver (earlyReplies).
	// nil: none is.
	finish func(*call, *ordopb.Reply)

	mu     sync.Mutex
	q      *queue // guarded by mu; set by start
	closed bool   // guarded by mu: close has begun
	cancel context.CancelFunc
	done   chan struct{} // closed once close has waited for every Save

	statsMu sync.Mutex
	stats   BatchStats
}

type saveResult struct {
	id      int
	batch   []*pending
	outcome map[uint32]error
	err     error
	took    time.Duration // how long the store's Save took
}

func newBatcher(store persistence.Store, cfg HostConfig, onBatch func(int)) *batcher {
	return &batcher{
		store:       store,
		maxRecords:  cfg.BatchMaxRecords,
		maxEvents:   cfg.BatchMaxEvents,
		maxBytes:    cfg.BatchMaxBytes,
		maxDelay:    cfg.BatchMaxDelay,
		pace:        cfg.BatchPace,
		maxInFlight: cfg.BatchMaxInFlight,
		timeout:     cfg.StoreTimeout,
		onBatch:     onBatch,
		tracer:      cfg.Tracer,
		done:        make(chan struct{}),
	}
}

// start starts the savers; the Saves run under a context of parent.
func (b *batcher) start(parent context.Context) {
	ctx, cancel := context.WithCancel(parent)
	b.mu.Lock()
	b.cancel = cancel
	b.q = newQueue(b, ctx, b.settled)
	b.mu.Unlock()
}

// do runs op on the queue and starts the Saves that are then due. It
// reports false, doing nothing, once close has begun.
func (b *batcher) do(op batchOp) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	b.q.take(op)
	b.q.flushReady()
	return true
}

// submit queues w, and starts its Save when one is due. It never waits
// for a Save. After close, w fails with ErrClosed.
func (b *batcher) submit(w write) {
	if !b.do(batchOp{w: w}) {
		w.done(ErrClosed)
	}
}

// noWrite reports that the receiver of a co-located message that depended
// on dep made no write of its own.
func (b *batcher) noWrite(dep writeDep) { b.do(batchOp{dep: &dep}) }

// settled takes the outcome of a Save, from the saver that ran it, and
// then, outside the lock, delivers the replies that waited for its writes.
// They are collected in buf, the saver's own buffer, which settled returns
// emptied for the saver's next Save.
func (b *batcher) settled(res saveResult, buf []earlyReply) []earlyReply {
	b.mu.Lock()
	q := b.q
	if b.closed {
		q.settleClosed(res)
		b.mu.Unlock()
		return buf
	}
	q.early = buf[:0]
	q.settle(res)
	q.pace(res, time.Now())
	q.flushReady()
	early := q.early
	q.early = nil
	b.mu.Unlock()
	for _, r := range early {
		b.finish(r.c, r.rep)
	}
	clear(early) // the buffer outlives the Save: hold no reply
	return early[:0]
}

// wake is called by the queue's timers: a write that waited may go now.
func (b *batcher) wake(f func(q *queue)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.closed {
		f(b.q)
		b.q.flushReady()
	}
}

// cancelEntity withdraws the entity's unsent writes (they fail with
// errWriteCanceled) and returns once none of its writes is in flight.
func (b *batcher) cancelEntity(ref Ref, epoch int64) { b.doCancel(cancelReq{ref: ref, epoch: epoch}) }

// cancelShard does the same for every write of a shard.
func (b *batcher) cancelShard(shard uint32, epoch int64) {
	b.doCancel(cancelReq{shard: shard, epoch: epoch, all: true})
}

func (b *batcher) doCancel(r cancelReq) {
	r.ack = make(chan struct{})
	if !b.do(batchOp{cancel: &r}) {
		<-b.done // no Save is left in flight then
		return
	}
	select {
	case <-r.ack:
	case <-b.done:
	}
}

func (b *batcher) Stats() BatchStats {
	b.statsMu.Lock()
	defer b.statsMu.Unlock()
	return b.stats
}

// close stops the batcher: queued writes fail with ErrClosed, and close
// returns once the Saves in flight have ended and their writes have been
// told their outcome. Later writes fail with ErrClosed.
func (b *batcher) close() {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		<-b.done
		return
	}
	b.closed = true
	q := b.q
	q.shutdown()
	b.mu.Unlock()
	q.stopSavers() // they run the Saves sent to them first
	b.mu.Lock()
	q.ackCancels() // none is left in flight: every one is acknowledged
	b.mu.Unlock()
	b.cancel()
	close(b.done)
}

// queue is the batcher's state: the writes waiting to be sent, the Saves
// in flight, and what waits for them. The batcher's mutex guards it.
type queue struct {
	b   *batcher
	ctx context.Context // the Saves' parent: ends when the batcher closes

	queued map[Ref]*pending // the oldest unsent pending of each entity
	order  []Ref            // FIFO of queued entities
	bytes  int              // bytes of every queued pending

	inflight  map[int][]*pending // Saves in flight, by batch ID
	nextBatch int
	sending   map[Ref]bool // entities with a write in flight
	jobs      chan saveJob // to the savers; never full: at most BatchMaxInFlight in flight
	savers    sync.WaitGroup

	// stalled: every queued write belongs to an entity with a write in
	// flight, or waits for a co-located write (it must wait for it); no
	// Save until something changes.
	stalled bool
	waiting []cancelReq // cancels waiting for an in-flight Save
	// poisoned holds entities whose last write failed: their later writes
	// fail at once (they build on the failed one) until the entity restarts
	// (cancelEntity) or its shard is dropped (cancelShard).
	poisoned map[Ref]poison

	// groups and inBatch are flush's, kept from one Save to the next.
	groups  map[uint32]shardGroup
	inBatch map[*entry]uint64

	// early collects the replies settle releases, for settled to deliver
	// once it lets go of the lock.
	early []earlyReply
	// pool keeps the pendings of settled Saves for new writes, and
	// batches their lists.
	pool    pendingPool
	batches [][]*pending

	firstQueued time.Time // when the oldest queued write arrived
	// paceUntil is when the next Save may start (pace); zero: at once.
	paceUntil time.Time
	// timer fires BatchMaxDelay after firstQueued, lingerT when a write
	// waiting for co-located writes may go. Each is armed while its on is
	// set; a firing of an earlier arming (gen) finds it stale.
	timer, lingerT      *time.Timer
	timerOn, lingerOn   bool
	timerGen, lingerGen uint64
}

// newQueue returns b's queue, with its BatchMaxInFlight savers started:
// they run the Saves and hand each outcome to settled. They live as long
// as the queue, so a Save neither starts a goroutine nor grows a new
// one's stack.
func newQueue(b *batcher, ctx context.Context, settled func(saveResult, []earlyReply) []earlyReply) *queue {
	q := &queue{b: b, ctx: ctx,
		queued:   make(map[Ref]*pending),
		inflight: make(map[int][]*pending),
		sending:  make(map[Ref]bool),
		jobs:     make(chan saveJob, b.maxInFlight),
		poisoned: make(map[Ref]poison),
	}
	for range b.maxInFlight {
		q.savers.Go(func() { b.saver(ctx, q.jobs, settled) })
	}
	return q
}

// stopSavers ends the savers once they have run the Saves sent to them.
func (q *queue) stopSavers() {
	close(q.jobs)
	q.savers.Wait()
}

func (q *queue) stopTimers() {
	if q.timerOn {
		q.timer.Stop()
		q.timerOn = false
	}
	if q.lingerOn {
		q.lingerT.Stop()
		q.lingerOn = false
	}
}

// armTimer arms the delay timer to fire after d.
func (q *queue) armTimer(d time.Duration) {
	q.timerOn = true
	q.timerGen++
	gen := q.timerGen
	q.timer = time.AfterFunc(d, func() {
		q.b.wake(func(q *queue) {
			if q.timerGen == gen {
				q.timerOn = false
			}
		})
	})
}

// armLinger arms the linger timer to fire after d.
func (q *queue) armLinger(d time.Duration) {
	q.lingerOn = true
	q.lingerGen++
	gen := q.lingerGen
	q.lingerT = time.AfterFunc(d, func() {
		q.b.wake(func(q *queue) {
			if q.lingerGen == gen {
				q.lingerOn = false
				q.stalled = false
			}
		})
	})
}

// take handles one input: a co-located receiver's report, a cancel, or a
// write.
func (q *queue) take(op batchOp) {
	switch {
	case op.dep != nil:
		q.joined(*op.dep)
		q.stalled = false
	case op.cancel != nil:
		q.cancel(*op.cancel)
	case op.inspect != nil:
		q.inspect(op.inspect)
	default:
		q.stalled = false
		q.add(op.w)
	}
}

// joined counts a co-located write that arrived for (or a report of none
// from) the receiver of a message that depends on dep.
func (q *queue) joined(dep writeDep) {
	for p := q.queued[dep.en.ref]; p != nil && p.w.en == dep.en; p = p.next {
		if p.expect > 0 {
			p.expect--
			return
		}
	}
}

// cancel withdraws the queued writes r matches, and acknowledges r once
// none of them is in flight.
func (q *queue) cancel(r cancelReq) {
	q.failQueued(func(p *pending) bool { return r.matches(p) }, errWriteCanceled)
	for ref, p := range q.poisoned {
		if p.epoch == r.epoch && (r.all && p.shard == r.shard || !r.all && ref == r.ref) {
			delete(q.poisoned, ref)
		}
	}
	if q.inFlight(r) {
		q.waiting = append(q.waiting, r)
	} else {
		close(r.ack)
	}
}

// matches reports whether r withdraws p.
func (r *cancelReq) matches(p *pending) bool {
	if p.w.epoch != r.epoch {
		return false
	}
	if r.all {
		return p.w.shard == r.shard
	}
	return p.w.ref == r.ref
}

// inFlight reports whether a Save in flight carries a write r matches.
func (q *queue) inFlight(r cancelReq) bool {
	for _, batch := range q.inflight {
		for _, p := range batch {
			if r.matches(p) {
				return true
			}
		}
	}
	return false
}

// add queues w: it joins its entity's queued pending, or starts one.
func (q *queue) add(w write) {
	b := q.b
	b.statsMu.Lock()
	b.stats.Writes++
	b.statsMu.Unlock()
	if w.en != nil && w.en.shard.ended.Load() {
		// Made by an entity of an ownership that has ended, after its
		// shard's writes were canceled: it would be fenced, or wait
		// forever for a co-located write canceled with them.
		w.done(errWriteCanceled)
		b.countCanceled(1)
		return
	}
	ref := w.ref
	if p, ok := q.poisoned[ref]; ok {
		if p.epoch == w.epoch {
			w.done(p.err)
			return
		}
		// A new ownership of the entity (another epoch): the old
		// instance's failure says nothing about it.
		delete(q.poisoned, ref)
	}
	for _, d := range w.after {
		q.joined(d)
	}
	if p, ok := q.queued[ref]; ok && p.w.epoch == w.epoch {
		before := p.chainSize()
		// w joins the entity's last queued write unless that would make
		// the write wait for a co-located write that waits for it.
		p.add(w, b.maxEvents, len(w.after) > 0 && q.waitsFor(w.after, p.last()), &q.pool)
		q.bytes += p.chainSize() - before
		return
	} else if ok {
		q.failQueued(func(o *pending) bool { return o == p }, errWriteCanceled)
	}
	if len(q.order) == 0 {
		q.firstQueued = time.Now()
	}
	q.queued[ref] = newPending(w, &q.pool)
	q.order = append(q.order, ref)
	q.bytes += w.size
}

// Co-located writes wait for each other: a write that depends on another
// entity's write (pending.after) goes with it or after it, and an
// entity's later pendings (pending.next) go after its earlier ones. These
// waits must never form a cycle, or none of the writes in it is ever sent:
// a write that joined its entity's queued write would otherwise make that
// one wait too. An account's write that a saga's write depends on (the
// account sent it a message), joined by the account's next write, which
// depends on the saga's (the saga answered with a message of its own), is
// such a cycle. add keeps the waits acyclic: a write whose dependencies
// wait for its entity's last queued write starts a pending of its own
// instead of joining it (waitsFor).

// waitsFor reports whether a queued write that one of deps names waits,
// directly or through other queued writes, for target.
func (q *queue) waitsFor(deps []writeDep, target *pending) bool {
	var stack []*pending
	for _, d := range deps {
		if c := q.covering(d); c != nil {
			stack = append(stack, c)
		}
	}
	// Usually a few writes are visited: a scan of seen costs less than a
	// map until there are many.
	var seen []*pending
	var seenMap map[*pending]bool
	for len(stack) > 0 {
		p := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if p == target {
			return true
		}
		if seenMap != nil {
			if seenMap[p] {
				continue
			}
			seenMap[p] = true
		} else if slices.Contains(seen, p) {
			continue
		} else if seen = append(seen, p); len(seen) > 32 {
			seenMap = make(map[*pending]bool, 2*len(seen))
			for _, o := range seen {
				seenMap[o] = true
			}
		}
		if prev := q.before(p); prev != nil {
			stack = append(stack, prev)
		}
		for _, d := range p.after {
			if c := q.covering(d); c != nil {
				stack = append(stack, c)
			}
		}
	}
	return false
}

// covering returns the queued pending that carries write d, nil when none
// does (d is durable, in flight, or withdrawn). A write in flight may be
// taken for its entity's next queued one: waitsFor then errs on the safe
// side.
func (q *queue) covering(d writeDep) *pending {
	for p := q.queued[d.en.ref]; p != nil && p.w.en == d.en; p = p.next {
		if p.w.seq >= d.seq {
			return p
		}
	}
	return nil
}

// before returns the pending chained just before p, nil when p is its
// entity's oldest.
func (q *queue) before(p *pending) *pending {
	for o := q.queued[p.w.ref]; o != nil; o = o.next {
		if o.next == p {
			return o
		}
	}
	return nil
}

// failQueued fails, with err, every queued pending (and the pendings
// chained after it) whose entity's oldest pending matches.
func (q *queue) failQueued(match func(*pending) bool, err error) {
	kept := q.order[:0]
	for _, ref := range q.order {
		p := q.queued[ref]
		if !match(p) {
			kept = append(kept, ref)
			continue
		}
		delete(q.queued, ref)
		for ; p != nil; p = p.next {
			q.bytes -= p.w.size
			for _, d := range p.done {
				d(err)
			}
			if err == errWriteCanceled {
				q.b.countCanceled(len(p.done))
			}
		}
	}
	q.order = kept
}

// requeue puts back the writes of a group the store refused as too large,
// each to go in a group of at most limit records of its shard. A newer
// queued write of the same entity takes the place of one (it covers it),
// unless the older carries events, a snapshot or a dedup record, or either
// waits for a co-located write: then the newer one is saved after it; one
// a cancel waits for is withdrawn.
func (q *queue) requeue(ps []*pending, limit int) {
	var front []Ref
	for _, p := range ps {
		ref := p.w.ref
		p.expect, p.limit = 0, limit
		o, queued := q.queued[ref]
		if slices.ContainsFunc(q.waiting, func(r cancelReq) bool { return r.matches(p) }) ||
			queued && o.w.epoch != p.w.epoch {
			for _, d := range p.done {
				d(errWriteCanceled)
			}
			q.b.countCanceled(len(p.done))
			continue
		}
		// The newer queued write takes p's place, unless either waits for
		// a co-located write: the writes that waited for p (in flight)
		// would then wait for o, which may wait for them (see waitsFor).
		if queued && len(p.events) == 0 && p.deleteBefore == 0 && p.snapshot == nil && p.cold == nil &&
			len(p.after) == 0 && len(o.after) == 0 {
			o.done = append(p.done, o.done...)
			o.w.prevDue = p.w.prevDue // p was never written
			o.w.create = o.w.create || p.w.create
			if o.limit == 0 || limit < o.limit {
				o.limit = limit
			}
			continue
		}
		q.bytes += p.w.size
		if queued {
			p.next = o // still in order
			q.queued[ref] = p
			continue
		}
		q.queued[ref] = p
		front = append(front, ref)
	}
	if len(q.order) == 0 {
		q.firstQueued = time.Now()
	}
	q.order = append(front, q.order...)
}

// ready reports whether a Save should be sent now.
func (q *queue) ready() bool {
	b := q.b
	if len(q.order) == 0 || len(q.inflight) >= b.maxInFlight || q.stalled {
		return false
	}
	return len(q.order) >= b.maxRecords || q.bytes >= b.maxBytes || q.wait(time.Now()) <= 0
}

// wait returns how long the queued writes still wait for others to join
// them: until the oldest has waited BatchMaxDelay, and until paceUntil.
func (q *queue) wait(now time.Time) time.Duration {
	d := q.b.maxDelay - now.Sub(q.firstQueued)
	if !q.paceUntil.IsZero() {
		d = max(d, q.paceUntil.Sub(now))
	}
	return d
}

// flushReady sends Saves while one is due, then arms the delay timer for
// the writes left.
func (q *queue) flushReady() {
	b := q.b
	for q.ready() {
		if !q.flush() {
			q.stalled = true
		}
		if q.timerOn {
			q.timer.Stop()
			q.timerOn = false
		}
	}
	if len(q.order) > 0 && len(q.inflight) < b.maxInFlight && !q.stalled && !q.timerOn {
		if d := q.wait(time.Now()); d > 0 {
			q.armTimer(d)
		}
	}
}

// pace sets when the Save after res may start (BatchPace): a Save of at
// least paceMinBatch entities, taking d, spaces the next by BatchPace × d
// after it ended, within [minPaceGap, maxPaceGap]. A shorter gap is not
// waited for: its timer would cost more than the Save it saves.
func (q *queue) pace(res saveResult, now time.Time) {
	q.paceUntil = time.Time{}
	b := q.b
	if b.pace <= 0 || len(res.batch) < paceMinBatch || res.err != nil {
		return
	}
	gap := float64(res.took) * b.pace
	switch {
	case gap < float64(minPaceGap):
	case gap >= float64(maxPaceGap):
		q.paceUntil = now.Add(maxPaceGap)
	default:
		q.paceUntil = now.Add(time.Duration(gap))
	}
}

// shardGroup is what a Save being built carries of one shard.
type shardGroup struct {
	epoch          int64
	n, limit, evts int
}

// maxKeptOrder bounds the capacity of an empty queue's order that flush
// keeps for the next writes.
const maxKeptOrder = 1024

// flush builds one Save from the queue, oldest entities first, within the
// batcher's limits, and sends it. It reports whether it sent one.
//
// A write that depends on a co-located write queued after it (a saga's
// start, made after its account's earlier writes were queued) is looked
// at again once the pass has taken that write: it then goes in the same
// Save instead of the next one.
func (q *queue) flush() bool {
	b := q.b
	n := min(len(q.order), b.maxRecords)
	if q.groups == nil {
		q.groups, q.inBatch = make(map[uint32]shardGroup), make(map[*entry]uint64)
	}
	clear(q.groups)
	clear(q.inBatch)
	f := batchBuild{q: q, batch: q.batchBuf(n), groups: q.groups, inBatch: q.inBatch}
	// rest, the writes left queued, is built in place in q.order: it is
	// never longer than the part of q.order already passed.
	old := len(q.order)
	rest := q.order[:0]
	var later []int // indexes in rest of writes that waited for a dependency
	i := 0
	for ; i < len(q.order) && len(f.batch) < n; i++ {
		ref := q.order[i]
		why := f.take(ref)
		if why == batchFull {
			break
		}
		if why != tookIt || q.queued[ref] != nil {
			// Not taken, or taken with the entity's next writes queued
			// after it: the entity stays queued.
			if why == waitsForDep {
				later = append(later, len(rest))
			}
			rest = append(rest, ref)
		}
	}
	// Writes whose dependencies this pass took go with them; a write so
	// taken can be the dependency of another, hence the loop.
	var taken map[int]bool
	if len(later) > 0 {
		taken = make(map[int]bool)
	}
	for progress := len(later) > 0 && len(f.batch) > 0; progress && len(f.batch) < n; {
		progress = false
		for _, j := range later {
			if taken[j] || len(f.batch) >= n {
				continue
			}
			why := f.take(rest[j])
			if why == batchFull {
				progress = false
				break
			}
			if why == tookIt {
				taken[j], progress = true, true
			}
		}
	}
	if len(taken) > 0 {
		kept := rest[:0]
		for j, ref := range rest {
			if !taken[j] || q.queued[ref] != nil {
				kept = append(kept, ref)
			}
		}
		rest = kept
	}
	q.order = append(rest, q.order[i:]...)
	clear(q.order[len(q.order):old]) // what moved forward, or left
	if len(q.order) == 0 && cap(q.order) > maxKeptOrder {
		q.order = nil // a burst's queue is not kept
	}
	if len(f.batch) == 0 {
		return false
	}
	q.bytes -= f.size
	q.send(f.batch)
	return true
}

// batchBuild is a Save that flush is building.
type batchBuild struct {
	q       *queue
	batch   []*pending
	size    int
	groups  map[uint32]shardGroup // by shard, the writes in batch
	inBatch map[*entry]uint64     // the highest seq of each entity in batch
}

// takeOutcome is what batchBuild.take did with an entity's write.
type takeOutcome int

const (
	tookIt      takeOutcome = iota // it is in the Save
	notNow                         // in flight, another epoch, group limits, lingering
	waitsForDep                    // depends on a co-located write neither durable nor in the batch
	batchFull                      // the Save is full: stop
)

// take adds ref's oldest queued write to the Save, if it may go now.
func (f *batchBuild) take(ref Ref) takeOutcome {
	q, b := f.q, f.q.b
	p := q.queued[ref]
	// An entity's writes become durable in order: while one is in
	// flight, the next waits for it.
	if q.sending[ref] {
		return notNow
	}
	if len(f.batch) > 0 && f.size+p.w.size > b.maxBytes {
		return batchFull
	}
	// One epoch per shard in a Save: the outcome is per shard, so a
	// stale owner's record must never share a batch with the new
	// owner's records of the same shard.
	g, ok := f.groups[p.w.shard]
	if ok && g.epoch != p.w.epoch {
		return notNow
	}
	// A shard's group stays within the limits of the writes in it.
	if ok && (g.limit > 0 && g.n >= g.limit || p.limit > 0 && g.n >= p.limit ||
		len(p.events) > 0 && g.evts+len(p.events) > b.maxEvents) {
		return notNow
	}
	// A write that depends on a co-located entity's write goes with
	// it or after it, never before: a Save is atomic per shard, and
	// both are in one shard.
	if len(p.after) > 0 && !p.ready(f.inBatch) {
		return waitsForDep
	}
	// A write whose co-located receivers have not all written yet
	// waits a little for them, to share the Save.
	if p.expect > 0 {
		if now := time.Now(); now.Before(p.linger) {
			if !q.lingerOn {
				q.armLinger(p.linger.Sub(now))
			}
			return notNow
		}
		p.expect = 0
	}
	g.epoch, g.n, g.evts = p.w.epoch, g.n+1, g.evts+len(p.events)
	if p.limit > 0 && (g.limit == 0 || p.limit < g.limit) {
		g.limit = p.limit
	}
	f.groups[p.w.shard] = g
	f.size += p.w.size
	f.batch = append(f.batch, p)
	f.inBatch[p.w.en] = p.w.seq
	if p.next != nil {
		// The entity's next writes wait for this one's outcome.
		q.queued[ref] = p.next
		p.next = nil
	} else {
		delete(q.queued, ref)
	}
	q.sending[ref] = true
	return tookIt
}

// send starts the Save of batch: a saver encodes its records and runs it.
func (q *queue) send(batch []*pending) {
	id := q.nextBatch
	q.nextBatch++
	q.inflight[id] = batch
	q.jobs <- saveJob{id: id, batch: batch}
}

// saveJob is a Save for a saver to run.
type saveJob struct {
	id    int
	batch []*pending
}

// saver runs the Saves of jobs, one at a time, each bounded by
// StoreTimeout (saveBound), and hands their results to settled, until jobs is closed.
// It encodes each Save's records itself, outside the batcher's lock: the
// pendings of a Save in flight change no more until it is settled.
func (b *batcher) saver(ctx context.Context, jobs <-chan saveJob, settled func(saveResult, []earlyReply) []earlyReply) {
	var early []earlyReply // the replies of the Save being settled
	var bound saveBound
	defer bound.stop()
	// recs and arena, the data its records are encoded in, serve one
	// Save after another: a store keeps neither after Save returns
	// (persistence.Store).
	var recs []persistence.Record
	var arena []byte
	for job := range jobs {
		recs, arena = recs[:0], arena[:0]
		for _, p := range job.batch {
			recs, arena = p.records(recs, arena)
		}
		b.statsMu.Lock()
		b.stats.Saves++
		b.stats.Records += uint64(len(recs))
		b.stats.Encodes += uint64(len(recs))
		b.statsMu.Unlock()
		if b.onBatch != nil {
			b.onBatch(len(recs))
		}
		sctx, span := b.startSave(bound.context(ctx, b.timeout), job.batch)
		start := time.Now()
		outcome, err := b.store.Save(sctx, recs)
		took := time.Since(start)
		endSave(span, outcome, err)
		clear(recs) // hold none of the Save's events or snapshots
		if cap(arena) > maxKeptArena {
			arena = nil
		}
		early = settled(saveResult{id: job.id, batch: job.batch, outcome: outcome, err: err, took: took}, early)
	}
}

// maxKeptArena bounds the buffer a saver keeps for its next Save's data:
// a larger one is let go.
const maxKeptArena = 256 << 10

// saveBound is a saver's deadline for its Saves: each Save ends between
// StoreTimeout and 5/4 StoreTimeout after it starts. One context, and its
// timer, serves the Saves a saver starts within a quarter of StoreTimeout,
// where context.WithTimeout would make a timer per Save. A saver runs one
// Save at a time: a context is replaced only between two Saves.
type saveBound struct {
	ctx    context.Context
	cancel context.CancelFunc
	end    time.Time
}

// context returns a context of parent that ends at least d from now, and
// at most 5d/4.
func (sb *saveBound) context(parent context.Context, d time.Duration) context.Context {
	now := time.Now()
	if sb.ctx == nil || sb.end.Sub(now) < d || sb.ctx.Err() != nil {
		sb.stop()
		sb.end = now.Add(d + d/4)
		sb.ctx, sb.cancel = context.WithDeadline(parent, sb.end)
	}
	return sb.ctx
}

// stop releases the context's timer.
func (sb *saveBound) stop() {
	if sb.cancel != nil {
		sb.cancel()
	}
}

// settle takes the outcome of a Save: each write's entity learns it, a
// failed write fails the entity's later writes, groups refused as too
// large go again in smaller groups, and cancels waiting for the Save are
// acknowledged.
func (q *queue) settle(res saveResult) {
	delete(q.inflight, res.id)
	var fenced, failed, tooLarge uint64
	var refused map[uint32][]*pending // groups of several records refused as too large
	for _, p := range res.batch {
		err := res.err
		if err == nil {
			var ok bool
			if err, ok = res.outcome[p.w.shard]; !ok {
				err = errors.New("actors: store reported no outcome for the shard")
			}
		}
		ref := p.w.ref
		delete(q.sending, ref)
		if res.err == nil && errors.Is(err, persistence.ErrTooLarge) && groupSize(res.batch, p.w.shard) > 1 {
			if refused == nil {
				refused = make(map[uint32][]*pending)
			}
			refused[p.w.shard] = append(refused[p.w.shard], p)
			continue
		}
		if err != nil {
			switch {
			case errors.Is(err, persistence.ErrFenced):
				fenced++
			case res.err == nil && errors.Is(err, persistence.ErrTooLarge):
				tooLarge++
			default:
				failed++
			}
			// A failed write fails every later write of the entity.
			q.poisoned[ref] = poison{shard: p.w.shard, epoch: p.w.epoch, err: err}
			q.failQueued(func(o *pending) bool {
				return o.w.ref == ref && o.w.epoch == p.w.epoch
			}, err)
		} else {
			p.w.en.advanceDurable(p.w.seq)
			if q.b.finish != nil {
				q.early = p.w.en.takeEarly(p.w.seq, q.early)
			}
		}
		for _, d := range p.done {
			d(err)
		}
		q.pool.put(p) // settled: no queue, Save or write refers to it
	}
	q.freeBatch(res.batch)
	for _, ps := range refused {
		q.requeue(ps, max(1, len(ps)/2))
	}
	if fenced+failed+tooLarge > 0 {
		b := q.b
		b.statsMu.Lock()
		b.stats.Fenced += fenced
		b.stats.Failed += failed
		b.stats.TooLarge += tooLarge
		b.statsMu.Unlock()
	}
	q.stalled = false
	q.ackCancels()
}

// batchBuf returns an empty list for a Save of up to n records: one a
// settled Save left (freeBatch), or a new one.
func (q *queue) batchBuf(n int) []*pending {
	if k := len(q.batches); k > 0 {
		b := q.batches[k-1]
		q.batches = q.batches[:k-1]
		if cap(b) >= n {
			return b
		}
	}
	return make([]*pending, 0, n)
}

// freeBatch keeps the list of a settled Save for a later one, up to
// BatchMaxInFlight lists. Nothing refers to it once the Save is settled.
func (q *queue) freeBatch(batch []*pending) {
	if len(q.batches) < q.b.maxInFlight {
		clear(batch)
		q.batches = append(q.batches, batch[:0])
	}
}

// ackCancels acknowledges the cancels none of whose writes is in flight
// any more.
func (q *queue) ackCancels() {
	kept := q.waiting[:0]
	for _, r := range q.waiting {
		if q.inFlight(r) {
			kept = append(kept, r)
		} else {
			close(r.ack)
		}
	}
	q.waiting = kept
}

// shutdown fails every queued write with ErrClosed; the Saves in flight
// end in settleClosed.
func (q *queue) shutdown() {
	q.stopTimers()
	q.failQueued(func(*pending) bool { return true }, ErrClosed)
}

// settleClosed takes the outcome of a Save that ended after close began:
// its writes learn it, nothing is retried or sent after it, and the
// cancels that waited for it are acknowledged.
func (q *queue) settleClosed(res saveResult) {
	delete(q.inflight, res.id)
	for _, p := range res.batch {
		err := res.err
		if err == nil {
			err = res.outcome[p.w.shard]
		}
		for _, d := range p.done {
			d(err)
		}
	}
	q.ackCancels()
}

// Bounds of BatchPace (queue.pace): a Save spaces the next only if it
// carried paceMinBatch entities or more, by a gap within [minPaceGap,
// maxPaceGap].
const (
	paceMinBatch = 4
	minPaceGap   = 100 * time.Microsecond
	maxPaceGap   = 5 * time.Millisecond
)
