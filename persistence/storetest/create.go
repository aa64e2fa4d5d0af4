package storetest

import (
	"errors"
	"testing"

	"github.com/ordo-actors/ordo/persistence"
)

// createCases check Record.Create: a record written as new is refused,
// with nothing of its shard's group, when the entity is already stored.
var createCases = []testCase{
	{"CreateNew", testCreateNew},
	{"CreateExisting", testCreateExisting},
	{"CreateExistingWithEvents", testCreateExistingWithEvents},
	{"CreateTwiceInOrder", testCreateTwiceInOrder},
}

func created(r persistence.Record) persistence.Record {
	r.Create = true
	return r
}

// wantExists checks that err is an *ExistsError for shard and kind/id.
func wantExists(t *testing.T, err error, shard uint32, kind, id string) {
	t.Helper()
	if !errors.Is(err, persistence.ErrExists) {
		t.Fatalf("shard %d: got %v, want an error matching ErrExists", shard, err)
	}
	var ee *persistence.ExistsError
	if !errors.As(err, &ee) {
		t.Fatalf("shard %d: %v is not an *ExistsError", shard, err)
	}
	if ee.Shard != shard || ee.Kind != kind || ee.ID != id {
		t.Fatalf("got %+v, want shard %d %s/%s", *ee, shard, kind, id)
	}
}

func testCreateNew(t *testing.T, s persistence.Store) {
	mustFence(t, s, 1, 2)
	a, b := created(rec("k", "a", 1, 2, "a1")), rec("k", "b", 1, 2, "b1")
	mustSaveOK(t, s, a, b)
	a.Create = false
	wantRecord(t, s, a)
	wantRecord(t, s, b)
	// Later writes of a created entity are plain ones.
	a2 := rec("k", "a", 1, 2, "a2")
	mustSaveOK(t, s, a2)
	wantRecord(t, s, a2)
}

func testCreateExisting(t *testing.T, s persistence.Store) {
	mustFence(t, s, 1, 2)
	mustFence(t, s, 2, 2)
	old := rec("k", "a", 1, 2, "old")
	mustSaveOK(t, s, old)
	recs := []persistence.Record{
		rec("k", "b", 1, 2, "b"),            // shares the refused group
		created(rec("k", "a", 1, 2, "new")), // exists
		rec("k", "c", 2, 2, "c"),            // another shard
		created(rec("k", "d", 2, 2, "d")),   // new: written
	}
	out := mustSave(t, s, recs)
	wantExists(t, out[1], 1, "k", "a")
	if out[2] != nil {
		t.Fatalf("shard 2 failed with shard 1's refusal: %v", out[2])
	}
	wantRecord(t, s, old)
	wantMissing(t, s, "k", "b")
	wantRecord(t, s, rec("k", "c", 2, 2, "c"))
	wantRecord(t, s, rec("k", "d", 2, 2, "d"))
	// The fence is checked first: a stale creation is fenced, whatever is
	// stored.
	mustFence(t, s, 1, 3)
	out = mustSave(t, s, []persistence.Record{created(rec("k", "a", 1, 2, "newer"))})
	wantFenced(t, out[1], 1, 2, 3)
	wantRecord(t, s, old)
}

func testCreateExistingWithEvents(t *testing.T, s persistence.Store) {
	j := asJournal(t, s)
	mustFence(t, s, 1, 2)
	mustSaveOK(t, s, evRec("k", "a", 1, 2, "a1", evs("first", 1, 2)))
	recs := []persistence.Record{
		created(evRec("k", "a", 1, 2, "a-new", evs("again", 3, 1))),
		evRec("k", "b", 1, 2, "b1", evs("b", 1, 1)),
	}
	out := mustSave(t, s, recs)
	wantExists(t, out[1], 1, "k", "a")
	wantRecord(t, s, evRec("k", "a", 1, 2, "a1", nil))
	wantMissing(t, s, "k", "b")
	got, err := j.ReadEvents(ctxFor(t), "k", "a", 1, 10)
	if err != nil || len(got) != 2 {
		t.Fatalf("ReadEvents = %d events, %v; want the 2 first ones", len(got), err)
	}
	if got, err := j.ReadEvents(ctxFor(t), "k", "b", 1, 10); err != nil || len(got) != 0 {
		t.Fatalf("ReadEvents of b = %d events, %v; want none", len(got), err)
	}
	// A new entity with events is created.
	mustSaveOK(t, s, created(evRec("k", "c", 1, 2, "c1", evs("c", 1, 1))))
	wantRecord(t, s, rec("k", "c", 1, 2, "c1"))
}

// testCreateTwiceInOrder: the second of two creations of one entity, saved
// one after the other, is refused.
func testCreateTwiceInOrder(t *testing.T, s persistence.Store) {
	mustFence(t, s, 1, 2)
	mustSaveOK(t, s, created(rec("k", "a", 1, 2, "first")))
	out := mustSave(t, s, []persistence.Record{created(rec("k", "a", 1, 2, "second"))})
	wantExists(t, out[1], 1, "k", "a")
	wantRecord(t, s, rec("k", "a", 1, 2, "first"))
}
