package memory

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/google/btree"

	"github.com/ordo-actors/ordo/persistence"
)

// ErrInjected is the default error of saves failed by FailNextSaves and
// LoseNextAcks.
var ErrInjected = errors.New("memory: injected save failure")

// Store is an in-memory persistence.Store. It is safe for concurrent use.
type Store struct {
	mu       sync.Mutex
	closed   bool
	fences   map[uint32]int64
	records  map[key]persistence.Record
	journals map[key]*journal
	feeds    map[string]*feed // by kind
	lastOff  uint64           // offset of the last event appended, over all kinds
	// due indexes the records with a due time, per shard (reminders.go).
	due map[uint32]*btree.BTreeG[dueItem]

	// Fault hooks, guarded by mu.
	saveDelay time.Duration
	failNext  int
	failErr   error
	loseNext  int // saves whose acknowledgement is lost after writing
	loseErr   error
	gate      chan struct{} // when non-nil, saves wait until it is closed
	blocks    []*saveBlock  // BlockSavesOf
	done      chan struct{} // closed by Close
	maxData   int           // LimitSaves; 0: none
	maxGroup  int

	// Counters, guarded by mu.
	saves      int
	recsSeen   int
	dueQueries int
}

type key struct{ kind, id string }

var _ persistence.Journal = (*Store)(nil)

// New returns an empty store.
func New() *Store {
	return &Store{
		fences:   make(map[uint32]int64),
		records:  make(map[key]persistence.Record),
		journals: make(map[key]*journal),
		feeds:    make(map[string]*feed),
		due:      make(map[uint32]*btree.BTreeG[dueItem]),
		done:     make(chan struct{}),
	}
}

// Fence implements persistence.Store.
func (s *Store) Fence(ctx context.Context, shard uint32, epoch int64) error {
	if err := persistence.ValidateEpoch(epoch); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return persistence.ErrClosed
	}
	if have := s.fences[shard]; have > epoch {
		return &persistence.FencedError{Shard: shard, Have: epoch, Want: have}
	}
	s.fences[shard] = epoch
	return nil
}

// Load implements persistence.Store.
func (s *Store) Load(ctx context.Context, kind, id string) (persistence.Record, error) {
	if err := persistence.ValidateKey(kind, id); err != nil {
		return persistence.Record{}, err
	}
	if err := ctx.Err(); err != nil {
		return persistence.Record{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return persistence.Record{}, persistence.ErrClosed
	}
	r, ok := s.records[key{kind, id}]
	if !ok {
		return persistence.Record{}, fmt.Errorf("%w: %s/%s", persistence.ErrNotFound, kind, id)
	}
	r.Data = bytes.Clone(r.Data)
	return r, nil
}

// Save implements persistence.Store. Fault hooks apply in this order: the
// gates (BlockSaves, then BlockSavesOf), the delay (DelaySaves), then injected failures
// (FailNextSaves), which fail every shard of the batch with an
// unknown-outcome error and write nothing, then lost acknowledgements
// (LoseNextAcks), which write and then report an unknown outcome.
func (s *Store) Save(ctx context.Context, recs []persistence.Record) (map[uint32]error, error) {
	if err := persistence.ValidateBatch(recs); err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, persistence.ErrClosed
	}
	gate, delay := s.gate, s.saveDelay
	var blocks []*saveBlock
	for _, b := range s.blocks {
		if slices.ContainsFunc(recs, b.match) {
			blocks = append(blocks, b)
		}
	}
	s.saves++
	s.recsSeen += len(recs)
	s.mu.Unlock()

	outcome := make(map[uint32]error)
	failAll := func(err error) (map[uint32]error, error) {
		for _, r := range recs {
			outcome[r.Shard] = err
		}
		return outcome, nil
	}
	if gate != nil {
		select {
		case <-gate:
		case <-s.done:
			return failAll(persistence.ErrClosed)
		case <-ctx.Done():
			return failAll(ctx.Err())
		}
	}
	for _, b := range blocks {
		b.reach.Do(func() { close(b.reached) })
		select {
		case <-b.released:
		case <-s.done:
			return failAll(persistence.ErrClosed)
		case <-ctx.Done():
			return failAll(ctx.Err())
		}
	}
	if delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return failAll(ctx.Err())
		}
	}
	if err := ctx.Err(); err != nil {
		return failAll(err)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return failAll(persistence.ErrClosed)
	}
	if s.failNext > 0 {
		s.failNext--
		return failAll(s.failErr)
	}
	if s.maxData > 0 || s.maxGroup > 0 {
		group := make(map[uint32]int)
		for _, r := range recs {
			group[r.Shard] += 1 + len(r.Events)
			if s.maxData > 0 && len(r.Data) > s.maxData {
				outcome[r.Shard] = fmt.Errorf("%w: record %s/%s has %d bytes of data, limit %d", persistence.ErrTooLarge, r.Kind, r.ID, len(r.Data), s.maxData)
			}
			for _, e := range r.Events {
				if s.maxData > 0 && len(e.Data) > s.maxData {
					outcome[r.Shard] = fmt.Errorf("%w: event %d of %s/%s has %d bytes of data, limit %d", persistence.ErrTooLarge, e.Seq, r.Kind, r.ID, len(e.Data), s.maxData)
				}
			}
		}
		for sh, n := range group {
			if s.maxGroup > 0 && n > s.maxGroup && outcome[sh] == nil {
				outcome[sh] = fmt.Errorf("%w: shard %d has %d records and events, limit %d", persistence.ErrTooLarge, sh, n, s.maxGroup)
			}
		}
	}
	for _, r := range recs {
		if _, seen := outcome[r.Shard]; seen {
			continue
		}
		if have := s.fences[r.Shard]; have != r.Epoch {
			outcome[r.Shard] = &persistence.FencedError{Shard: r.Shard, Have: r.Epoch, Want: have}
		} else {
			outcome[r.Shard] = nil
		}
	}
	for i := range recs {
		r := &recs[i]
		if outcome[r.Shard] != nil || !r.Create {
			continue
		}
		if _, ok := s.records[key{r.Kind, r.ID}]; ok {
			outcome[r.Shard] = &persistence.ExistsError{Shard: r.Shard, Kind: r.Kind, ID: r.ID}
		}
	}
	for i := range recs {
		r := &recs[i]
		if outcome[r.Shard] != nil || len(r.Events) == 0 {
			continue
		}
		if last := s.journals[key{r.Kind, r.ID}].last(); r.Events[0].Seq != last+1 {
			outcome[r.Shard] = &persistence.SequenceError{Shard: r.Shard, Kind: r.Kind, ID: r.ID, First: r.Events[0].Seq, Last: last}
		}
	}
	for i := range recs {
		if outcome[recs[i].Shard] == nil {
			s.apply(&recs[i])
		}
	}
	if s.loseNext > 0 {
		s.loseNext--
		for sh, err := range outcome {
			if err == nil {
				outcome[sh] = s.loseErr
			}
		}
	}
	return outcome, nil
}

// reuse returns a copy of data in buf, a stored record's data, which the
// store owns alone (Load and LoadMany return copies): a record rewritten
// again and again keeps one buffer, grown as append grows it. A buffer
// more than four times the size needed is let go.
func reuse(buf, data []byte) []byte {
	if len(data) == 0 {
		return bytes.Clone(data) // nil stays nil, empty stays empty
	}
	if cap(buf) > 4*len(data)+256 {
		buf = nil
	}
	return append(buf[:0], data...)
}

// apply writes r, whose group has passed every check. s.mu is held.
func (s *Store) apply(r *persistence.Record) {
	k := key{r.Kind, r.ID}
	stored := *r
	old, replaced := s.records[k]
	stored.Data = reuse(old.Data, r.Data)
	stored.Events, stored.DeleteEventsBefore, stored.PrevDue, stored.Create = nil, 0, 0, false
	s.index(old, replaced, stored)
	s.records[k] = stored
	j := s.journals[k]
	if len(r.Events) > 0 {
		f := s.feeds[r.Kind]
		if f == nil {
			f = &feed{}
			s.feeds[r.Kind] = f
		}
		if j == nil {
			j = &journal{first: r.Events[0].Seq}
			s.journals[k] = j
		}
		for _, e := range r.Events {
			data := bytes.Clone(e.Data)
			if data == nil {
				data = []byte{}
			}
			j.data = append(j.data, data)
			s.lastOff++
			f.entries = append(f.entries, feedEntry{off: s.lastOff, id: r.ID, seq: e.Seq, data: data})
		}
	}
	if j == nil {
		return
	}
	if bound := persistence.DeleteBound(r, j.last()); bound > j.first {
		n := bound - j.first
		j.data = append([][]byte(nil), j.data[n:]...)
		j.first = bound
		f := s.feeds[r.Kind]
		f.dead += int(n)
		if f.dead > len(f.entries)/2 {
			f.compact(s.journals, r.Kind)
		}
	}
}

// Close implements persistence.Store.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		close(s.done)
	}
	return nil
}

// DelaySaves makes every later Save wait d before writing (0 turns it off).
func (s *Store) DelaySaves(d time.Duration) {
	s.mu.Lock()
	s.saveDelay = d
	s.mu.Unlock()
}

// FailNextSaves makes the next n Saves fail every shard with err (ErrInjected
// when err is nil), writing nothing.
func (s *Store) FailNextSaves(n int, err error) {
	if err == nil {
		err = ErrInjected
	}
	s.mu.Lock()
	s.failNext, s.failErr = n, err
	s.mu.Unlock()
}

// LoseNextAcks makes the next n Saves that reach the write write normally
// but report err (ErrInjected when err is nil) instead of success for every
// shard they wrote, as when a reply is lost after the store committed.
// Fenced shards still report ErrFenced.
func (s *Store) LoseNextAcks(n int, err error) {
	if err == nil {
		err = ErrInjected
	}
	s.mu.Lock()
	s.loseNext, s.loseErr = n, err
	s.mu.Unlock()
}

// LimitSaves makes every later Save refuse, as a store with size limits
// does (persistence/etcdstore), the shards of its batch that hold a record of
// more than maxData bytes of data or more than maxGroup records: their
// outcome matches persistence.ErrTooLarge and nothing of them is written.
// A zero limit is no limit; LimitSaves(0, 0) turns it off.
func (s *Store) LimitSaves(maxData, maxGroup int) {
	s.mu.Lock()
	s.maxData, s.maxGroup = maxData, maxGroup
	s.mu.Unlock()
}

// BlockSaves makes every later Save wait until the returned release function
// is called (or the Save's context ends). release is idempotent.
func (s *Store) BlockSaves() (release func()) {
	gate := make(chan struct{})
	s.mu.Lock()
	s.gate = gate
	s.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			if s.gate == gate {
				s.gate = nil
			}
			s.mu.Unlock()
			close(gate)
		})
	}
}

// BlockSavesOf makes every later Save that carries a record match accepts
// wait until the returned release function is called (or the Save's
// context ends, or the store closes); other Saves go on. reached is closed
// when the first such Save starts waiting, so that a test can order what
// that write lets out against what happens meanwhile. release is
// idempotent, and a Save made after it does not wait.
func (s *Store) BlockSavesOf(match func(persistence.Record) bool) (reached <-chan struct{}, release func()) {
	b := &saveBlock{match: match, reached: make(chan struct{}), released: make(chan struct{})}
	s.mu.Lock()
	s.blocks = append(s.blocks, b)
	s.mu.Unlock()
	var once sync.Once
	return b.reached, func() {
		once.Do(func() {
			s.mu.Lock()
			s.blocks = slices.DeleteFunc(s.blocks, func(x *saveBlock) bool { return x == b })
			s.mu.Unlock()
			close(b.released)
		})
	}
}

// saveBlock is one BlockSavesOf.
type saveBlock struct {
	match    func(persistence.Record) bool
	reach    sync.Once
	reached  chan struct{}
	released chan struct{}
}

// Stats reports how many Save calls were made and how many records they
// carried in total.
func (s *Store) Stats() (saves, records int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.saves, s.recsSeen
}

// FenceOf returns the shard's current fence (0 if never fenced).
func (s *Store) FenceOf(shard uint32) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fences[shard]
}
