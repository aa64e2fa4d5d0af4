package storetest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/ordo-actors/ordo/persistence"
)

// index returns s as a ReminderIndex, skipping the test when it is not one.
func index(t *testing.T, s persistence.Store) persistence.ReminderIndex {
	t.Helper()
	ix, ok := s.(persistence.ReminderIndex)
	if !ok {
		t.Skip("the store does not implement persistence.ReminderIndex")
	}
	return ix
}

func dueRec(id string, shard uint32, epoch, due, prev int64) persistence.Record {
	return persistence.Record{Kind: "rem", ID: id, Shard: shard, Epoch: epoch, Data: []byte("d" + id), Due: due, PrevDue: prev}
}

// wantDue checks that Due(shard, upTo, limit) lists exactly want, as
// "id@due", in order (entries of one due time in any order).
func wantDue(t *testing.T, ix persistence.ReminderIndex, shard uint32, upTo int64, limit int, want ...string) {
	t.Helper()
	got, err := ix.Due(ctxFor(t), shard, upTo, limit)
	if err != nil {
		t.Fatalf("Due(%d, %d, %d): %v", shard, upTo, limit, err)
	}
	var have []string
	for i, e := range got {
		if i > 0 && e.Due < got[i-1].Due {
			t.Fatalf("Due(%d, %d, %d) = %v: not earliest first", shard, upTo, limit, got)
		}
		have = append(have, fmt.Sprintf("%s/%s@%d", e.Kind, e.ID, e.Due))
	}
	want = slices.Clone(want)
	for i := range want {
		want[i] = "rem/" + want[i]
	}
	// Entries due at the same time may come in any order.
	norm := func(l []string) []string {
		l = slices.Clone(l)
		slices.SortStableFunc(l, func(a, b string) int {
			_, da, _ := strings.Cut(a, "@")
			_, db, _ := strings.Cut(b, "@")
			if len(da) != len(db) {
				return len(da) - len(db)
			}
			if c := strings.Compare(da, db); c != 0 {
				return c
			}
			return strings.Compare(a, b)
		})
		return l
	}
	if !slices.Equal(norm(have), norm(want)) {
		t.Fatalf("Due(%d, %d, %d) = %v, want %v", shard, upTo, limit, have, want)
	}
}

// Due lists the records of one shard whose due time is within the bound,
// earliest first, up to the limit; records without a due time, and other
// shards' records, are not listed; Load returns the due time saved.
func testDueQueries(t *testing.T, s persistence.Store) {
	ix := index(t, s)
	mustFence(t, s, 1, 1)
	mustFence(t, s, 2, 1)
	recs := []persistence.Record{
		dueRec("c", 1, 1, 300, 0),
		dueRec("a", 1, 1, 100, 0),
		dueRec("b", 1, 1, 200, 0),
		dueRec("b2", 1, 1, 200, 0),
		dueRec("none", 1, 1, 0, 0),
		dueRec("far", 1, 1, 1<<62, 0),
		dueRec("other", 2, 1, 50, 0),
	}
	mustSaveOK(t, s, recs...)
	for _, r := range recs {
		r.PrevDue = 0
		wantRecord(t, s, r)
	}
	wantDue(t, ix, 1, 1<<63-1, 100, "a@100", "b@200", "b2@200", "c@300", fmt.Sprintf("far@%d", int64(1)<<62))
	wantDue(t, ix, 1, 200, 100, "a@100", "b@200", "b2@200") // the bound is inclusive
	wantDue(t, ix, 1, 199, 100, "a@100")
	wantDue(t, ix, 1, 99, 100)
	wantDue(t, ix, 1, 300, 2, "a@100", "b@200")
	wantDue(t, ix, 1, 300, 1, "a@100")
	wantDue(t, ix, 2, 1000, 10, "other@50")
	wantDue(t, ix, 3, 1000, 10) // a shard never written
	if bl, ok := s.(persistence.BatchLoader); ok {
		got, err := bl.LoadMany(ctxFor(t), []persistence.Key{{Kind: "rem", ID: "b"}, {Kind: "rem", ID: "none"}})
		if err != nil {
			t.Fatal(err)
		}
		if got[persistence.Key{Kind: "rem", ID: "b"}].Due != 200 || got[persistence.Key{Kind: "rem", ID: "none"}].Due != 0 {
			t.Fatalf("LoadMany = %+v: due times not as saved", got)
		}
	}

	for name, q := range map[string]struct {
		upTo  int64
		limit int
	}{"zero bound": {0, 1}, "negative bound": {-1, 1}, "zero limit": {1, 0}, "negative limit": {1, -1}} {
		if _, err := ix.Due(ctxFor(t), 1, q.upTo, q.limit); !errors.Is(err, persistence.ErrInvalid) {
			t.Fatalf("Due(%s) = %v, want ErrInvalid", name, err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := ix.Due(ctxFor(t), 1, 1000, 1); !errors.Is(err, persistence.ErrClosed) {
		t.Fatalf("Due after Close = %v, want ErrClosed", err)
	}
}

// A record's entry moves with its due time: earlier, later, cleared, set
// again, and a write that keeps the due time keeps the entry.
func testDueMoves(t *testing.T, s persistence.Store) {
	ix := index(t, s)
	mustFence(t, s, 4, 1)
	mustSaveOK(t, s, dueRec("x", 4, 1, 500, 0), dueRec("y", 4, 1, 400, 0))
	wantDue(t, ix, 4, 1000, 10, "y@400", "x@500")

	mustSaveOK(t, s, dueRec("x", 4, 1, 300, 500)) // earlier
	wantDue(t, ix, 4, 1000, 10, "x@300", "y@400")
	mustSaveOK(t, s, dueRec("x", 4, 1, 900, 300)) // later
	wantDue(t, ix, 4, 1000, 10, "y@400", "x@900")
	mustSaveOK(t, s, dueRec("x", 4, 1, 900, 900)) // unchanged
	wantDue(t, ix, 4, 1000, 10, "y@400", "x@900")
	mustSaveOK(t, s, dueRec("x", 4, 1, 0, 900)) // cleared
	wantDue(t, ix, 4, 1000, 10, "y@400")
	wantRecord(t, s, dueRec("x", 4, 1, 0, 0))
	mustSaveOK(t, s, dueRec("x", 4, 1, 0, 0)) // still none
	wantDue(t, ix, 4, 1000, 10, "y@400")
	mustSaveOK(t, s, dueRec("x", 4, 1, 100, 0)) // set again
	wantDue(t, ix, 4, 1000, 10, "x@100", "y@400")

	// A new owner (epoch 2) moves them in one batch.
	mustFence(t, s, 4, 2)
	mustSaveOK(t, s, dueRec("x", 4, 2, 700, 100), dueRec("y", 4, 2, 0, 400), dueRec("z", 4, 2, 600, 0))
	wantDue(t, ix, 4, 1000, 10, "z@600", "x@700")
	wantRecord(t, s, dueRec("x", 4, 2, 700, 0))

	// With events, in a store that keeps journals, as without.
	if _, ok := s.(persistence.Journal); ok {
		r := dueRec("x", 4, 2, 200, 700)
		r.Events = []persistence.Event{{Seq: 1, Data: []byte("e1")}}
		mustSaveOK(t, s, r)
		wantDue(t, ix, 4, 1000, 10, "x@200", "z@600")
		r = dueRec("z", 4, 2, 0, 600)
		r.Events = []persistence.Event{{Seq: 1, Data: []byte("e1")}}
		mustSaveOK(t, s, r)
		wantDue(t, ix, 4, 1000, 10, "x@200")
	}
}

// A Save refused by fencing changes nothing of the index, alone or next
// to a shard whose records are written.
func testDueFenced(t *testing.T, s persistence.Store) {
	ix := index(t, s)
	mustFence(t, s, 1, 1)
	mustFence(t, s, 2, 1)
	mustSaveOK(t, s, dueRec("a", 1, 1, 100, 0), dueRec("b", 2, 1, 100, 0))
	mustFence(t, s, 1, 2) // shard 1 moved on: epoch 1 is stale

	out := mustSave(t, s, []persistence.Record{
		dueRec("a", 1, 1, 50, 100), // move: refused
		dueRec("a2", 1, 1, 60, 0),  // add: refused
		dueRec("b", 2, 1, 0, 100),  // clear: written
		dueRec("b2", 2, 1, 70, 0),  // add: written
		dueRec("b3", 2, 1, 0, 0),   // none: written
	})
	wantFenced(t, out[1], 1, 1, 2)
	if out[2] != nil {
		t.Fatalf("shard 2: %v", out[2])
	}
	wantDue(t, ix, 1, 1000, 10, "a@100")
	wantMissing(t, s, "rem", "a2")
	wantDue(t, ix, 2, 1000, 10, "b2@70")

	// A shard that was never fenced takes no entry either.
	out = mustSave(t, s, []persistence.Record{dueRec("c", 3, 1, 10, 0)})
	wantFenced(t, out[3], 3, 1, 0)
	wantDue(t, ix, 3, 1000, 10)

	// The new owner moves the entry.
	mustSaveOK(t, s, dueRec("a", 1, 2, 40, 100))
	wantDue(t, ix, 1, 1000, 10, "a@40")
}

// Many shards in one batch: each shard's index holds its own records
// only.
func testDueManyShards(t *testing.T, s persistence.Store) {
	ix := index(t, s)
	const shards, perShard = 100, 3
	var recs []persistence.Record
	for sh := uint32(0); sh < shards; sh++ {
		mustFence(t, s, sh, 1)
		for i := range perShard {
			// Due times interleave across shards.
			recs = append(recs, dueRec(fmt.Sprintf("%d-%d", sh, i), sh, 1, int64(1000*(perShard-i)+int(sh)+1), 0))
		}
	}
	mustSaveOK(t, s, recs...)
	for sh := uint32(0); sh < shards; sh++ {
		var want []string
		for i := perShard - 1; i >= 0; i-- {
			want = append(want, fmt.Sprintf("%d-%d@%d", sh, i, 1000*(perShard-i)+int(sh)+1))
		}
		wantDue(t, ix, sh, 1<<62, 10, want...)
		wantDue(t, ix, sh, int64(1000+sh+1), 10, want[0])
	}
}
