package pgstore

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/ordo-actors/ordo/persistence"
)

// An events row holds a run of one entity's consecutive events: the
// events one record of a Save appends, so that a Save writes one row (and
// one entry in each of the table's two indexes) per record rather than
// per event. Its columns:
//
//   - seq: the Seq of its first event (the primary key is (kind, id, seq));
//   - n: how many events it holds, seq to seq+n-1;
//   - skip: how many of them, from the first, were deleted
//     (Record.DeleteEventsBefore cut the run): reads pass over them;
//   - data: the event's Data when n is 1 (as rows written before version
//     4 of the schema, which held one event each), else each event's Data
//     prefixed by its length as an unsigned varint, in Seq order.
//
// Rows of one entity tile its journal: a row starts where the one before
// it ends. Keyed by its first Seq, a row written by a Save that read where
// the journal ended from a stale snapshot collides with the row the Save
// it missed wrote, which starts at the same Seq (see journalSaveSQL).

// packEvents returns the row of evs, consecutive events of one entity:
// its data and its n.
func packEvents(evs []persistence.Event) (data []byte, n int) {
	if len(evs) == 1 {
		return evs[0].Data, 1
	}
	size := 0
	for _, e := range evs {
		size += binary.MaxVarintLen64 + len(e.Data)
	}
	data = make([]byte, 0, size)
	for _, e := range evs {
		data = binary.AppendUvarint(data, uint64(len(e.Data)))
		data = append(data, e.Data...)
	}
	return data, len(evs)
}

// errCorruptRow reports an events row that does not decode.
var errCorruptRow = errors.New("pgstore: corrupt events row")

// eventRow is one events row as read.
type eventRow struct {
	seq     int64 // its first event's Seq
	n, skip int32
	data    []byte
}

// events calls fn with each event of r from Seq from on, skipped ones
// left out, in order, until fn returns false. Each event's Data is a
// part of r.data with no spare capacity, and never nil.
func (r *eventRow) events(from uint64, fn func(persistence.Event) bool) error {
	if r.seq <= 0 || r.n < 1 || r.skip < 0 || r.skip >= r.n || r.seq > persistence.MaxSeq-int64(r.n)+1 {
		return fmt.Errorf("%w: seq %d, n %d, skip %d", errCorruptRow, r.seq, r.n, r.skip)
	}
	first := uint64(r.seq)
	if r.n == 1 {
		if first < from {
			return nil
		}
		data := r.data
		if data == nil {
			data = []byte{}
		}
		fn(persistence.Event{Seq: first, Data: data[:len(data):len(data)]})
		return nil
	}
	b := r.data
	for i := range uint64(r.n) {
		size, k := uvarint(b) // minimal encodings only: a row has one form
		if k <= 0 || size > uint64(len(b)-k) {
			return fmt.Errorf("%w: event %d of %d (seq %d on) is cut short", errCorruptRow, i+1, r.n, r.seq)
		}
		data := b[k : k+int(size) : k+int(size)]
		b = b[k+int(size):]
		if seq := first + i; i >= uint64(r.skip) && seq >= from && !fn(persistence.Event{Seq: seq, Data: data}) {
			return nil
		}
	}
	if len(b) != 0 {
		return fmt.Errorf("%w: %d bytes after its %d events (seq %d on)", errCorruptRow, len(b), r.n, r.seq)
	}
	return nil
}
