package persistence

import (
	"context"
	"fmt"
)

// MaxSeq is the highest event sequence number a Store accepts (the largest
// signed 64-bit integer, which every driver can store).
const MaxSeq = 1<<63 - 1

// Event is one entry of an entity's journal. Data is opaque to the store.
type Event struct {
	// Seq numbers the entity's events 1, 2, 3, ... without gaps.
	Seq  uint64
	Data []byte
}

// JournalEntry is an event as ReadJournal returns it, with the entity it
// belongs to.
type JournalEntry struct {
	Kind string
	ID   string
	Event
}

// Offset is a position in the journal of one kind, as ReadJournal returns
// it. It is opaque and driver-specific: store it as bytes ([]byte(off))
// and pass Offset(b) back; it stays valid across restarts and for every
// Store over the same data. The zero Offset ("") is the start of the
// journal.
type Offset string

// Journal is a Store that also keeps an append-only journal of events per
// entity, written through Save (Record.Events, Record.DeleteEventsBefore)
// under the same per-shard fencing as records, and in the same per-shard
// atomic step: a shard's group writes its records' Data, appends their
// events and deletes the events they ask to delete all together, or does
// none of it. An event Save refused (fenced, out of sequence, too large) is
// never visible to any read.
//
// Sequence numbers are gapless: an entity's events are numbered from 1,
// and a record's Events must continue exactly at the entity's last stored
// Seq + 1. The store checks this itself, inside the atomic step, so that
// even two writers under the same epoch cannot leave a gap or write a Seq
// twice: a group whose events do not continue the journal is refused with
// a *SequenceError (matching ErrSequence), and nothing of the shard is
// written. A writer under a stale epoch gets ErrFenced, never ErrSequence.
//
// Deleting (Record.DeleteEventsBefore) always keeps the entity's last
// event, so that LastSeq and the numbering survive any deletion.
//
// Implementations are safe for concurrent use by multiple goroutines. Every
// read sees at least every Save acknowledged before the read began.
type Journal interface {
	Store

	// ReadEvents returns the events of (kind, id) with Seq >= from (from 0
	// reads from the first), in Seq order: min(limit, the number of such
	// events) of them, so a result shorter than limit means there are no
	// more. An entity without events, or never saved, has none (no error).
	// The returned Data are never nil and belong to the caller. limit must
	// be positive.
	ReadEvents(ctx context.Context, kind, id string, from uint64, limit int) ([]Event, error)

	// LastSeq returns the Seq of the entity's last event, 0 when it has
	// none. The next event the entity appends must have LastSeq + 1.
	LastSeq(ctx context.Context, kind, id string) (uint64, error)

	// ReadJournal follows the journal of one kind across all its entities,
	// for building read models. It returns up to limit events that come
	// after the position after (the zero Offset: from the start), and next,
	// the position after the last of them, to pass to the following call.
	// It may return fewer than limit events while more follow; no events
	// means the reader has caught up, and then next equals after. limit
	// must be positive; an Offset this driver did not produce is refused
	// with ErrInvalid.
	//
	// Guarantees, for a reader that resumes each call from the next of the
	// one before (from any stored Offset, in any process):
	//
	//   - Every event that is committed and not deleted appears exactly
	//     once. In particular no event is ever passed over: an event
	//     committed after a call returned, even by a Save that began
	//     earlier than Saves already read, comes after that call's next.
	//     An event deleted (Record.DeleteEventsBefore) before the reader
	//     reached it does not appear.
	//   - The events of one entity appear in Seq order (with PostgreSQL,
	//     provided its records always carry the same shard, as the
	//     runtime's do).
	//   - Events of one shard appear in the order their Saves committed.
	//     Events of different shards may interleave in any order consistent
	//     with that (the memory and etcd drivers follow one global commit
	//     order; PostgreSQL orders each shard on its own).
	//
	// Delivery to a read model is at least once: a reader that
	// stores next only after applying a page, and crashes in between,
	// reads the page again (store next atomically with the read model for
	// exactly once). Reading from an older Offset again returns the same
	// events again, less those deleted since.
	ReadJournal(ctx context.Context, kind string, after Offset, limit int) (entries []JournalEntry, next Offset, err error)
}

// SequenceError reports a record whose events do not continue its entity's
// journal. As a Save outcome it means nothing of the shard was written. It
// matches ErrSequence with errors.Is.
type SequenceError struct {
	Shard uint32
	Kind  string
	ID    string
	// First is the Seq of the record's first event.
	First uint64
	// Last is the entity's last stored Seq as the store saw it (0: no
	// events); First should have been Last + 1.
	Last uint64
}

func (e *SequenceError) Error() string {
	return fmt.Sprintf("persistence: shard %d: events of %s/%s start at seq %d, the journal ends at %d",
		e.Shard, e.Kind, e.ID, e.First, e.Last)
}

// Is reports whether target is ErrSequence.
func (e *SequenceError) Is(target error) bool { return target == ErrSequence }

// ValidateEvents checks the events of one record: Seqs from 1 to MaxSeq,
// each one more than the one before, and non-nil Data (empty Data is
// fine). It does not know the journal, so it cannot check the first Seq.
func ValidateEvents(evs []Event) error {
	for i := range evs {
		e := &evs[i]
		switch {
		case e.Seq == 0 || e.Seq > MaxSeq:
			return fmt.Errorf("%w: event %d has seq %d, outside 1..MaxSeq", ErrInvalid, i, e.Seq)
		case i > 0 && e.Seq != evs[i-1].Seq+1:
			return fmt.Errorf("%w: event %d has seq %d after seq %d; seqs must be consecutive", ErrInvalid, i, e.Seq, evs[i-1].Seq)
		case e.Data == nil:
			return fmt.Errorf("%w: event %d (seq %d) has nil data", ErrInvalid, i, e.Seq)
		}
	}
	return nil
}

// ValidateRead checks the arguments of ReadEvents and LastSeq (limit 1 for
// LastSeq).
func ValidateRead(kind, id string, limit int) error {
	if err := ValidateKey(kind, id); err != nil {
		return err
	}
	if limit <= 0 {
		return fmt.Errorf("%w: limit %d is not positive", ErrInvalid, limit)
	}
	return nil
}

// ValidateFeed checks the kind and limit of ReadJournal; the driver checks
// the Offset.
func ValidateFeed(kind string, limit int) error {
	if err := validName("kind", kind, MaxKindLen); err != nil {
		return err
	}
	if limit <= 0 {
		return fmt.Errorf("%w: limit %d is not positive", ErrInvalid, limit)
	}
	return nil
}

// DeleteBound returns the Seq below which r's events are deleted by Save,
// given last, the entity's last stored Seq before the Save: the minimum of
// r.DeleteEventsBefore and the entity's last Seq after the Save, so that
// the last event is always kept. 0 means nothing is deleted.
func DeleteBound(r *Record, last uint64) uint64 {
	if r.DeleteEventsBefore == 0 {
		return 0
	}
	if n := len(r.Events); n > 0 {
		last = r.Events[n-1].Seq
	}
	return min(r.DeleteEventsBefore, last)
}
