package actors

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/ordo-actors/ordo/persistence"
)

// errWriteCanceled fails writes withdrawn before they were sent (their
// entity restarted or their shard was dropped).
var errWriteCanceled = errors.New("actors: write canceled")

// write is one entity write handed to the batcher.
type write struct {
	rec persistence.Record
	// done is called exactly once, from the batcher's goroutine, with nil
	// when rec is durable or the reason it is not.
	done func(error)
}

// pending is the newest not-yet-sent write of one entity, with the done
// callbacks of every write it replaced (a newer snapshot covers them).
type pending struct {
	rec  persistence.Record
	done []func(error)
}

type poison struct {
	shard uint32
	epoch int64
	err   error
}

// batchOp is a write or a cancel.
type batchOp struct {
	w      write
	cancel *cancelReq
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
}

// batcher is the per-host group committer. One goroutine owns the queue.
// Up to BatchMaxInFlight Saves run at once, but an entity is never in two
// of them: its writes become durable in the order they were made, and a
// newer queued snapshot of an entity replaces an older queued one.
type batcher struct {
	store       persistence.Store
	maxRecords  int
	maxBytes    int
	maxDelay    time.Duration
	maxInFlight int
	timeout     time.Duration
	onBatch     func(int)

	// in carries writes and cancels in one channel, so that a cancel never
	// overtakes a write the same entity submitted before it.
	in   chan batchOp
	stop chan struct{}
	done chan struct{}

	statsMu sync.Mutex
	stats   BatchStats
}

type saveResult struct {
	id      int
	batch   []*pending
	outcome map[uint32]error
	err     error
}

func newBatcher(store persistence.Store, cfg HostConfig) *batcher {
	return &batcher{
		store:       store,
		maxRecords:  cfg.BatchMaxRecords,
		maxBytes:    cfg.BatchMaxBytes,
		maxDelay:    cfg.BatchMaxDelay,
		maxInFlight: cfg.BatchMaxInFlight,
		timeout:     cfg.StoreTimeout,
		onBatch:     cfg.OnBatch,
		in:          make(chan batchOp, 1024),
		stop:        make(chan struct{}),
		done:        make(chan struct{}),
	}
}

// submit queues w. It never blocks for long: the batcher drains its input
// continuously. After close, w fails with ErrClosed.
func (b *batcher) submit(w write) {
	select {
	case <-b.done:
		w.done(ErrClosed)
		return
	default:
	}
	select {
	case b.in <- batchOp{w: w}:
	case <-b.done:
		w.done(ErrClosed)
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
	select {
	case b.in <- batchOp{cancel: &r}:
		select {
		case <-r.ack:
		case <-b.done:
		}
	case <-b.done:
	}
}

func (b *batcher) Stats() BatchStats {
	b.statsMu.Lock()
	defer b.statsMu.Unlock()
	return b.stats
}

// close stops the batcher after the in-flight Save, failing queued writes.
func (b *batcher) close() {
	select {
	case <-b.stop:
	default:
		close(b.stop)
	}
	<-b.done
}

func (b *batcher) run(parent context.Context) {
	defer close(b.done)
	queue := make(map[Ref]*pending)
	var order []Ref // FIFO of queued entities
	bytes := 0
	inflight := make(map[int][]*pending) // by batch ID
	nextBatch := 0
	inflightSet := make(map[Ref]bool)
	// stalled: every queued write belongs to an entity with a write in
	// flight (it must wait for it); no Save until something changes.
	stalled := false
	var waiting []cancelReq // cancels waiting for the in-flight Save
	// poisoned holds entities whose last write failed: their later writes
	// fail at once (they build on the failed one) until the entity restarts
	// (cancelEntity) or its shard is dropped (cancelShard).
	poisoned := make(map[Ref]poison)
	results := make(chan saveResult, b.maxInFlight)
	var timer *time.Timer
	var timerC <-chan time.Time
	var firstQueued time.Time
	ctx, cancelCtx := context.WithCancel(parent)
	defer cancelCtx()

	failQueued := func(match func(*pending) bool, err error) {
		kept := order[:0]
		for _, ref := range order {
			p := queue[ref]
			if match(p) {
				delete(queue, ref)
				bytes -= len(p.rec.Data)
				for _, d := range p.done {
					d(err)
				}
				continue
			}
			kept = append(kept, ref)
		}
		order = kept
	}
	matches := func(r cancelReq, p *pending) bool {
		if p.rec.Epoch != r.epoch {
			return false
		}
		if r.all {
			return p.rec.Shard == r.shard
		}
		return p.rec.Kind == r.ref.Kind && p.rec.ID == r.ref.ID
	}
	inFlightMatch := func(r cancelReq) bool {
		for _, batch := range inflight {
			for _, p := range batch {
				if matches(r, p) {
					return true
				}
			}
		}
		return false
	}
	flush := func() bool {
		n := len(order)
		if n > b.maxRecords {
			n = b.maxRecords
		}
		size := 0
		batch := make([]*pending, 0, n)
		recs := make([]persistence.Record, 0, n)
		epochs := make(map[uint32]int64)
		var rest []Ref
		i := 0
		for ; i < len(order) && len(batch) < n; i++ {
			p := queue[order[i]]
			// An entity's writes become durable in order: while one is in
			// flight, the next waits for it.
			if inflightSet[order[i]] {
				rest = append(rest, order[i])
				continue
			}
			if len(batch) > 0 && size+len(p.rec.Data) > b.maxBytes {
				break
			}
			// One epoch per shard in a Save: the outcome is per shard, so a
			// stale owner's record must never share a batch with the new
			// owner's records of the same shard.
			if e, ok := epochs[p.rec.Shard]; ok && e != p.rec.Epoch {
				rest = append(rest, order[i])
				continue
			}
			epochs[p.rec.Shard] = p.rec.Epoch
			size += len(p.rec.Data)
			batch = append(batch, p)
			recs = append(recs, p.rec)
			delete(queue, order[i])
			inflightSet[order[i]] = true
		}
		order = append(rest, order[i:]...)
		if len(batch) == 0 {
			return false
		}
		bytes -= size
		id := nextBatch
		nextBatch++
		inflight[id] = batch
		b.statsMu.Lock()
		b.stats.Saves++
		b.stats.Records += uint64(len(recs))
		b.statsMu.Unlock()
		if b.onBatch != nil {
			b.onBatch(len(recs))
		}
		go func() {
			sctx, cancel := context.WithTimeout(ctx, b.timeout)
			defer cancel()
			outcome, err := b.store.Save(sctx, recs)
			results <- saveResult{id: id, batch: batch, outcome: outcome, err: err}
		}()
		return true
	}
	ready := func() bool {
		if len(order) == 0 || len(inflight) >= b.maxInFlight || stalled {
			return false
		}
		return b.maxDelay == 0 || len(order) >= b.maxRecords || bytes >= b.maxBytes ||
			time.Since(firstQueued) >= b.maxDelay
	}

	for {
		for ready() {
			if !flush() {
				stalled = true
			}
			if timer != nil {
				timer.Stop()
				timerC = nil
			}
		}
		if len(order) > 0 && len(inflight) < b.maxInFlight && !stalled && timerC == nil && b.maxDelay > 0 {
			timer = time.NewTimer(b.maxDelay - time.Since(firstQueued))
			timerC = timer.C
		}

		select {
		case op := <-b.in:
			if op.cancel != nil {
				r := *op.cancel
				failQueued(func(p *pending) bool { return matches(r, p) }, errWriteCanceled)
				for ref, p := range poisoned {
					if p.epoch == r.epoch && (r.all && p.shard == r.shard || !r.all && ref == r.ref) {
						delete(poisoned, ref)
					}
				}
				if inFlightMatch(r) {
					waiting = append(waiting, r)
				} else {
					close(r.ack)
				}
				continue
			}
			w := op.w
			stalled = false
			b.statsMu.Lock()
			b.stats.Writes++
			b.statsMu.Unlock()
			ref := Ref{Kind: w.rec.Kind, ID: w.rec.ID}
			if p, ok := poisoned[ref]; ok {
				if p.epoch == w.rec.Epoch {
					w.done(p.err)
					continue
				}
				// A new ownership of the entity (another epoch): the old
				// instance's failure says nothing about it.
				delete(poisoned, ref)
			}
			if p, ok := queue[ref]; ok && p.rec.Epoch == w.rec.Epoch {
				bytes += len(w.rec.Data) - len(p.rec.Data)
				p.rec = w.rec
				p.done = append(p.done, w.done)
				continue
			} else if ok {
				failQueued(func(q *pending) bool { return q == p }, errWriteCanceled)
			}
			if len(order) == 0 {
				firstQueued = time.Now()
			}
			queue[ref] = &pending{rec: w.rec, done: []func(error){w.done}}
			order = append(order, ref)
			bytes += len(w.rec.Data)

		case <-timerC:
			timerC = nil

		case res := <-results:
			var fenced, failed uint64
			for _, p := range res.batch {
				err := res.err
				if err == nil {
					var ok bool
					if err, ok = res.outcome[p.rec.Shard]; !ok {
						err = errors.New("actors: store reported no outcome for the shard")
					}
				}
				ref := Ref{Kind: p.rec.Kind, ID: p.rec.ID}
				delete(inflightSet, ref)
				if err != nil {
					if errors.Is(err, persistence.ErrFenced) {
						fenced++
					} else {
						failed++
					}
					// A failed write fails every later write of the entity.
					poisoned[ref] = poison{shard: p.rec.Shard, epoch: p.rec.Epoch, err: err}
					failQueued(func(q *pending) bool {
						return q.rec.Kind == ref.Kind && q.rec.ID == ref.ID && q.rec.Epoch == p.rec.Epoch
					}, err)
				}
				for _, d := range p.done {
					d(err)
				}
			}
			if fenced+failed > 0 {
				b.statsMu.Lock()
				b.stats.Fenced += fenced
				b.stats.Failed += failed
				b.statsMu.Unlock()
			}
			delete(inflight, res.id)
			stalled = false
			kept := waiting[:0]
			for _, r := range waiting {
				if inFlightMatch(r) {
					kept = append(kept, r)
				} else {
					close(r.ack)
				}
			}
			waiting = kept

		case <-b.stop:
			for len(inflight) > 0 {
				res := <-results
				delete(inflight, res.id)
				for _, p := range res.batch {
					err := res.err
					if err == nil {
						err = res.outcome[p.rec.Shard]
					}
					for _, d := range p.done {
						d(err)
					}
				}
			}
			failQueued(func(*pending) bool { return true }, ErrClosed)
			for _, r := range waiting {
				close(r.ack)
			}
			// Fail writes that raced with the stop.
			for {
				select {
				case op := <-b.in:
					if op.cancel != nil {
						close(op.cancel.ack)
					} else {
						op.w.done(ErrClosed)
					}
				default:
					return
				}
			}
		}
	}
}
