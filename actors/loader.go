package actors

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/ordo-actors/ordo/persistence"
)

// Bounds of the loader's coalescing.
const (
	// maxLoadBatch is the most records one LoadMany asks for.
	maxLoadBatch = 256
	// maxLoadsInFlight is how many store reads the loader runs at once;
	// loads that arrive meanwhile wait and go together in the next one.
	maxLoadsInFlight = 2
)

// loader reads the records of activating entities. With a store that is a
// persistence.BatchLoader, loads that arrive while maxLoadsInFlight reads
// are running wait and go to the store together in one LoadMany (group
// read, as the batcher groups writes); under load a node then reads N
// activating entities with one round trip instead of N. It has no
// goroutine of its own: a caller that finds a free read slot runs reads
// until the queue is empty.
//
// Safe for concurrent use.
type loader struct {
	store   persistence.Store
	many    persistence.BatchLoader // nil: one Load per entity
	ctx     context.Context         // the host's: reads stop at Shutdown
	timeout time.Duration

	mu      sync.Mutex
	queue   []*loadReq
	running int // reads in flight, at most maxLoadsInFlight

	// reads and records count store reads and the records they asked for.
	reads, records uint64
}

type loadReq struct {
	ctx  context.Context // the caller's, for its values (a span)
	key  persistence.Key
	rec  persistence.Record
	err  error
	done chan struct{}
}

// newLoader returns a loader over store; raw is store as given to the host
// (store may wrap it, hiding its optional interfaces): reads of many
// records go to raw's LoadMany, if it has one.
func newLoader(ctx context.Context, store, raw persistence.Store, timeout time.Duration) *loader {
	l := &loader{store: store, ctx: ctx, timeout: timeout}
	l.many, _ = raw.(persistence.BatchLoader)
	return l
}

// load returns the record of (kind, id), or an error matching
// persistence.ErrNotFound, as Store.Load does. ctx is the caller's: with a
// BatchLoader it bounds the wait only (the read is bounded by the host's
// lifetime and the store timeout, since other entities' loads may ride on
// it); without one it is the read's context, store timeout added.
func (l *loader) load(ctx context.Context, kind, id string) (persistence.Record, error) {
	if l.many == nil {
		rctx, cancel := context.WithTimeout(ctx, l.timeout)
		defer cancel()
		l.count(1)
		return l.store.Load(rctx, kind, id)
	}
	r := &loadReq{ctx: ctx, key: persistence.Key{Kind: kind, ID: id}, done: make(chan struct{})}
	l.mu.Lock()
	l.queue = append(l.queue, r)
	lead := l.running < maxLoadsInFlight
	if lead {
		l.running++
	}
	l.mu.Unlock()
	if lead {
		l.drain()
	}
	select {
	case <-r.done:
		return r.rec, r.err
	case <-ctx.Done():
		return persistence.Record{}, ctx.Err()
	}
}

func (l *loader) count(records int) {
	l.mu.Lock()
	l.reads++
	l.records += uint64(records)
	l.mu.Unlock()
}

// drain runs reads until the queue is empty, then frees its read slot.
func (l *loader) drain() {
	for {
		l.mu.Lock()
		if len(l.queue) == 0 {
			l.running--
			l.mu.Unlock()
			return
		}
		n := min(len(l.queue), maxLoadBatch)
		batch := l.queue[:n:n]
		l.queue = l.queue[n:]
		if len(l.queue) == 0 {
			l.queue = nil
		}
		l.reads++
		l.records += uint64(n)
		l.mu.Unlock()
		l.read(batch)
	}
}

// read loads batch with one store call and completes its requests.
func (l *loader) read(batch []*loadReq) {
	defer func() {
		for _, r := range batch {
			close(r.done)
		}
	}()
	if len(batch) == 1 {
		// One entity's read: with its caller's values (its span), ended
		// by the host's shutdown or the store timeout.
		r := batch[0]
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), l.timeout)
		stop := context.AfterFunc(l.ctx, cancel)
		r.rec, r.err = l.store.Load(ctx, r.key.Kind, r.key.ID)
		stop()
		cancel()
		return
	}
	ctx, cancel := context.WithTimeout(l.ctx, l.timeout)
	defer cancel()
	// A key may be asked for twice (an entity that stopped and activates
	// again while its first load waits): ask once.
	keys := make([]persistence.Key, 0, len(batch))
	seen := make(map[persistence.Key]struct{}, len(batch))
	for _, r := range batch {
		if _, dup := seen[r.key]; !dup {
			seen[r.key] = struct{}{}
			keys = append(keys, r.key)
		}
	}
	recs, err := l.many.LoadMany(ctx, keys)
	for _, r := range batch {
		switch rec, ok := recs[r.key]; {
		case err != nil:
			r.err = err
		case !ok:
			r.err = fmt.Errorf("%w: %s/%s", persistence.ErrNotFound, r.key.Kind, r.key.ID)
		default:
			if _, first := seen[r.key]; !first {
				rec.Data = bytes.Clone(rec.Data) // each caller owns its Data
			}
			delete(seen, r.key)
			r.rec = rec
		}
	}
}

// stats returns how many store reads the loader made and how many records
// they asked for.
func (l *loader) stats() (reads, records uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.reads, l.records
}
