package pgstore

import (
	"bytes"
	"errors"
	"testing"

	"github.com/ordo-actors/ordo/persistence"
)

// FuzzEventRow checks that any events row read from the database decodes
// to its events or fails with errCorruptRow, never panics, and that a row
// of several events decodes only when it is exactly what packEvents makes
// of them.
func FuzzEventRow(f *testing.F) {
	data, n := packEvents([]persistence.Event{{Seq: 4, Data: []byte("a")}, {Seq: 5, Data: []byte{}}, {Seq: 6, Data: []byte("ccc")}})
	f.Add(int64(4), int32(n), int32(0), data, uint64(0))
	f.Add(int64(4), int32(n), int32(2), data, uint64(5))
	f.Add(int64(1), int32(1), int32(0), []byte("one"), uint64(1))
	f.Add(int64(persistence.MaxSeq), int32(2), int32(0), []byte{1, 'x', 0}, uint64(0))
	f.Fuzz(func(t *testing.T, seq int64, n, skip int32, data []byte, from uint64) {
		r := eventRow{seq: seq, n: n, skip: skip, data: data}
		var got []persistence.Event
		err := r.events(from, func(e persistence.Event) bool { got = append(got, e); return true })
		if err != nil {
			if !errors.Is(err, errCorruptRow) {
				t.Fatalf("%v does not match errCorruptRow", err)
			}
			return
		}
		first := uint64(seq) + uint64(skip)
		for i, e := range got {
			if e.Seq < from || e.Seq < first || e.Seq > uint64(seq)+uint64(n)-1 || e.Data == nil || cap(e.Data) != len(e.Data) ||
				i > 0 && e.Seq != got[i-1].Seq+1 {
				t.Fatalf("row %+v from %d: event %d is %+v", r, from, i, e)
			}
		}
		if n > 1 && skip == 0 && from <= uint64(seq) {
			again, m := packEvents(got)
			if m != int(n) || !bytes.Equal(again, data) {
				t.Fatalf("row %+v decodes to %d events that pack to %x", r, len(got), again)
			}
		}
	})
}
