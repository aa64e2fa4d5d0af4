package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/persistence"
)

// journalCases run against every Store that implements persistence.Journal
// (the suite skips them for a Store that does not).
var journalCases = []testCase{
	{"JournalAppendRead", testJournalAppendRead},
	{"JournalStaleEpoch", testJournalStaleEpoch},
	{"JournalSequence", testJournalSequence},
	{"JournalAtomicWithRecords", testJournalAtomic},
	{"JournalStaleAndCurrentWriters", testJournalStaleAndCurrentWriters},
	{"JournalSameEpochWriters", testJournalSameEpochWriters},
	{"JournalDelete", testJournalDelete},
	{"JournalLargeHistory", testJournalLargeHistory},
	{"JournalFeed", testJournalFeed},
	{"JournalFeedConcurrentWriters", testJournalFeedConcurrent},
	{"JournalInvalidInput", testJournalInvalidInput},
	{"JournalCancelMidSave", testJournalCancelMidSave},
	{"JournalClosed", testJournalClosed},
}

func asJournal(t *testing.T, s persistence.Store) persistence.Journal {
	t.Helper()
	j, ok := s.(persistence.Journal)
	if !ok {
		t.Skipf("%T does not implement persistence.Journal", s)
	}
	return j
}

// evData is what the journal tests store in an event: a tag (who wrote it)
// and the event's seq, so that a read tells both.
func evData(tag string, seq uint64) []byte { return fmt.Appendf(nil, "%s:%d", tag, seq) }

// evs returns n events from first on, tagged tag.
func evs(tag string, first uint64, n int) []persistence.Event {
	out := make([]persistence.Event, n)
	for i := range out {
		seq := first + uint64(i)
		out[i] = persistence.Event{Seq: seq, Data: evData(tag, seq)}
	}
	return out
}

func evRec(kind, id string, shard uint32, epoch int64, data string, events []persistence.Event) persistence.Record {
	r := rec(kind, id, shard, epoch, data)
	r.Events = events
	return r
}

// readEvents reads every event of (kind, id) from from on, page by page.
func readEvents(t *testing.T, j persistence.Journal, kind, id string, from uint64, page int) []persistence.Event {
	t.Helper()
	var all []persistence.Event
	for {
		got, err := j.ReadEvents(ctxFor(t), kind, id, from, page)
		if err != nil {
			t.Fatalf("ReadEvents(%s/%s, %d, %d): %v", kind, id, from, page, err)
		}
		if len(got) > page {
			t.Fatalf("ReadEvents(%s/%s, %d, %d) returned %d events", kind, id, from, page, len(got))
		}
		for _, e := range got {
			if e.Seq < from {
				t.Fatalf("ReadEvents(%s/%s, %d) returned seq %d", kind, id, from, e.Seq)
			}
			if e.Data == nil {
				t.Fatalf("ReadEvents(%s/%s) returned nil data for seq %d", kind, id, e.Seq)
			}
		}
		all = append(all, got...)
		if len(got) < page {
			return all
		}
		from = got[len(got)-1].Seq + 1
	}
}

// wantEvents checks that (kind, id) holds exactly want, read in pages of
// several sizes, and that LastSeq agrees.
func wantEvents(t *testing.T, j persistence.Journal, kind, id string, want []persistence.Event) {
	t.Helper()
	for _, page := range []int{1, 3, 1000} {
		got := readEvents(t, j, kind, id, 0, page)
		if len(got) != len(want) {
			t.Fatalf("%s/%s (pages of %d): %d events %s, want %d %s", kind, id, page, len(got), seqs(got), len(want), seqs(want))
		}
		for i := range want {
			if got[i].Seq != want[i].Seq || !bytes.Equal(got[i].Data, want[i].Data) {
				t.Fatalf("%s/%s event %d = {%d %s}, want {%d %s}", kind, id, i, got[i].Seq, short(got[i].Data), want[i].Seq, short(want[i].Data))
			}
		}
	}
	var last uint64
	if len(want) > 0 {
		last = want[len(want)-1].Seq
	}
	if got, err := j.LastSeq(ctxFor(t), kind, id); err != nil || got != last {
		t.Fatalf("LastSeq(%s/%s) = %d, %v; want %d", kind, id, got, err, last)
	}
}

func seqs(es []persistence.Event) string {
	if len(es) == 0 {
		return "[]"
	}
	if len(es) > 8 {
		return fmt.Sprintf("[%d..%d]", es[0].Seq, es[len(es)-1].Seq)
	}
	s := "["
	for i, e := range es {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprint(e.Seq)
	}
	return s + "]"
}

// readFeed follows kind's journal from after to its end in pages of limit,
// checking the page contract, and returns what it read and where it ended.
func readFeed(t *testing.T, j persistence.Journal, kind string, after persistence.Offset, limit int) ([]persistence.JournalEntry, persistence.Offset) {
	t.Helper()
	var all []persistence.JournalEntry
	for range 1 << 20 {
		got, next, err := j.ReadJournal(ctxFor(t), kind, after, limit)
		if err != nil {
			t.Fatalf("ReadJournal(%s, %q, %d): %v", kind, after, limit, err)
		}
		if len(got) > limit {
			t.Fatalf("ReadJournal(%s, limit %d) returned %d entries", kind, limit, len(got))
		}
		for _, e := range got {
			if e.Kind != kind || e.Data == nil {
				t.Fatalf("ReadJournal(%s) returned %+v", kind, e)
			}
		}
		if len(got) > 0 && next == after {
			t.Fatalf("ReadJournal(%s, %q) returned %d entries and the same offset", kind, after, len(got))
		}
		if len(got) == 0 {
			if next != after {
				t.Fatalf("ReadJournal(%s, %q) returned no entries and moved to %q", kind, after, next)
			}
			return all, next
		}
		all = append(all, got...)
		after = next
	}
	t.Fatalf("ReadJournal(%s) never reached the end", kind)
	return nil, ""
}

// wantSequence checks that err is a *SequenceError with the given fields.
func wantSequence(t *testing.T, err error, shard uint32, kind, id string, first, last uint64) {
	t.Helper()
	if !errors.Is(err, persistence.ErrSequence) || errors.Is(err, persistence.ErrFenced) {
		t.Fatalf("shard %d: got %v, want an error matching ErrSequence", shard, err)
	}
	var se *persistence.SequenceError
	if !errors.As(err, &se) {
		t.Fatalf("shard %d: %v is not a *SequenceError", shard, err)
	}
	want := persistence.SequenceError{Shard: shard, Kind: kind, ID: id, First: first, Last: last}
	if *se != want {
		t.Fatalf("got %+v, want %+v", *se, want)
	}
}

func testJournalAppendRead(t *testing.T, s persistence.Store) {
	j := asJournal(t, s)
	mustFence(t, s, 1, 1)
	wantEvents(t, j, "k", "a", nil)
	mustSaveOK(t, s, evRec("k", "a", 1, 1, "snap0", evs("a", 1, 3)))
	wantRecord(t, s, rec("k", "a", 1, 1, "snap0"))
	wantEvents(t, j, "k", "a", evs("a", 1, 3))
	// A second Save continues the journal; a plain record of the same
	// shard rides along, and leaves its own (empty) journal alone.
	more := evs("a", 4, 2)
	more[1].Data = []byte{} // empty event data is fine
	mustSaveOK(t, s, evRec("k", "a", 1, 1, "snap1", more), rec("k", "plain", 1, 1, "p"))
	all := append(evs("a", 1, 3), more...)
	wantEvents(t, j, "k", "a", all)
	wantEvents(t, j, "k", "plain", nil)
	wantRecord(t, s, rec("k", "a", 1, 1, "snap1"))
	if r, err := s.Load(ctxFor(t), "k", "a"); err != nil || r.Events != nil || r.DeleteEventsBefore != 0 {
		t.Fatalf("Load = %+v, %v; want no Events", r, err)
	}
	// A Save without events leaves the journal as it is.
	mustSaveOK(t, s, rec("k", "a", 1, 1, "snap2"))
	wantEvents(t, j, "k", "a", all)
	// Reads from the middle, past the end, and with small limits.
	for _, c := range []struct {
		from  uint64
		limit int
		want  []persistence.Event
	}{
		{0, 2, all[:2]}, {1, 2, all[:2]}, {3, 10, all[2:]}, {5, 1, all[4:]}, {6, 5, nil}, {1 << 40, 5, nil},
	} {
		got, err := j.ReadEvents(ctxFor(t), "k", "a", c.from, c.limit)
		if err != nil || seqs(got) != seqs(c.want) {
			t.Fatalf("ReadEvents(from %d, limit %d) = %s, %v; want %s", c.from, c.limit, seqs(got), err, seqs(c.want))
		}
	}
	// Journals are per (kind, id), matched exactly.
	mustSaveOK(t, s,
		evRec("k", "a/b", 1, 1, "", evs("a/b", 1, 1)),
		evRec("k/a", "b", 1, 1, "", evs("k/a b", 1, 2)),
		evRec("k", "ab", 1, 1, "", evs("ab", 1, 3)),
	)
	wantEvents(t, j, "k", "a/b", evs("a/b", 1, 1))
	wantEvents(t, j, "k/a", "b", evs("k/a b", 1, 2))
	wantEvents(t, j, "k", "ab", evs("ab", 1, 3))
	wantEvents(t, j, "k", "a", all)
	wantEvents(t, j, "K", "a", nil)
	// The store keeps no reference to the caller's buffers, nor the caller
	// to the store's.
	buf := []byte("six")
	mustSaveOK(t, s, evRec("k", "a", 1, 1, "snap3", []persistence.Event{{Seq: 6, Data: buf}}))
	buf[0] = 'X'
	got, err := j.ReadEvents(ctxFor(t), "k", "a", 6, 1)
	if err != nil || len(got) != 1 || string(got[0].Data) != "six" {
		t.Fatalf("ReadEvents = %v, %v", got, err)
	}
	got[0].Data[0] = 'Y'
	if got, _ := j.ReadEvents(ctxFor(t), "k", "a", 6, 1); string(got[0].Data) != "six" {
		t.Fatalf("stored event changed through a returned slice: %q", got[0].Data)
	}
	// A canceled context fails the reads.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := j.ReadEvents(ctx, "k", "a", 1, 1); err == nil {
		t.Fatal("ReadEvents with a canceled context succeeded")
	}
	if _, err := j.LastSeq(ctx, "k", "a"); err == nil {
		t.Fatal("LastSeq with a canceled context succeeded")
	}
	if _, _, err := j.ReadJournal(ctx, "k", "", 1); err == nil {
		t.Fatal("ReadJournal with a canceled context succeeded")
	}
}

// testJournalStaleEpoch checks that appends under anything but the shard's
// fence are refused with ErrFenced (never ErrSequence) and invisible to
// every read.
func testJournalStaleEpoch(t *testing.T, s persistence.Store) {
	j := asJournal(t, s)
	mustFence(t, s, 1, 1)
	mustSaveOK(t, s, evRec("k", "a", 1, 1, "e1", evs("e1", 1, 2)))
	mustFence(t, s, 1, 2)
	for _, tc := range []struct {
		name  string
		epoch int64
		first uint64
	}{
		{"stale epoch", 1, 3},
		{"stale epoch, wrong seq", 1, 7},
		{"stale epoch, seq from 1", 1, 1},
		{"epoch ahead of the fence", 3, 3},
	} {
		out := mustSave(t, s, []persistence.Record{
			evRec("k", "a", 1, tc.epoch, "stale", evs("stale", tc.first, 2)),
			evRec("k", "new", 1, tc.epoch, "stale", evs("stale", 1, 1)),
		})
		wantFenced(t, out[1], 1, tc.epoch, 2)
		wantEvents(t, j, "k", "a", evs("e1", 1, 2))
		wantEvents(t, j, "k", "new", nil)
		wantRecord(t, s, rec("k", "a", 1, 1, "e1"))
		wantMissing(t, s, "k", "new")
	}
	// A shard never fenced takes no events either.
	out := mustSave(t, s, []persistence.Record{evRec("k", "b", 4, 1, "x", evs("x", 1, 1))})
	wantFenced(t, out[4], 4, 1, 0)
	wantEvents(t, j, "k", "b", nil)
	// The feed shows none of the refused events.
	got, _ := readFeed(t, j, "k", "", 10)
	if len(got) != 2 || got[0].Seq != 1 || got[1].Seq != 2 || string(got[1].Data) != "e1:2" {
		t.Fatalf("feed = %+v, want e1's two events", got)
	}
	// The current owner continues the journal.
	mustSaveOK(t, s, evRec("k", "a", 1, 2, "e2", evs("e2", 3, 1)))
	wantEvents(t, j, "k", "a", append(evs("e1", 1, 2), evs("e2", 3, 1)...))
}

// testJournalSequence checks that events must continue the journal: a
// group with a gap, an overlap or a restart is refused with a
// *SequenceError, nothing of its shard is written, and other shards of the
// batch are not affected.
func testJournalSequence(t *testing.T, s persistence.Store) {
	j := asJournal(t, s)
	mustFence(t, s, 1, 1)
	mustFence(t, s, 2, 1)
	mustSaveOK(t, s, evRec("k", "a", 1, 1, "a0", evs("a", 1, 3)))
	for _, tc := range []struct {
		name        string
		first       uint64
		bad         string // the record the error names
		first2      uint64 // a second record of shard 1 (0: none)
		wantFirst   uint64
		wantLastSeq uint64
	}{
		{"gap", 5, "a", 0, 5, 3},
		{"overlap", 3, "a", 0, 3, 3},
		{"restart", 1, "a", 0, 1, 3},
		{"new entity not from 1", 4, "b", 2, 2, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			recs := []persistence.Record{
				evRec("k", "a", 1, 1, "a-bad", evs("bad", tc.first, 2)),
				evRec("k", "c", 2, 1, "c-"+tc.name, nil),
			}
			if tc.first2 != 0 {
				recs = append(recs, evRec("k", "b", 1, 1, "b-bad", evs("bad", tc.first2, 1)))
			}
			if tc.bad == "b" {
				recs[0].Events = evs("ok", 4, 1) // a is fine, b is not
			}
			recs = append(recs, rec("k", "plain", 1, 1, "plain-bad"))
			out := mustSave(t, s, recs)
			wantSequence(t, out[1], 1, "k", tc.bad, tc.wantFirst, tc.wantLastSeq)
			if out[2] != nil {
				t.Fatalf("shard 2: %v", out[2])
			}
			wantRecord(t, s, rec("k", "c", 2, 1, "c-"+tc.name))
			wantRecord(t, s, rec("k", "a", 1, 1, "a0"))
			wantMissing(t, s, "k", "b")
			wantMissing(t, s, "k", "plain")
			wantEvents(t, j, "k", "a", evs("a", 1, 3))
			wantEvents(t, j, "k", "b", nil)
		})
	}
	// Fenced wins over out of sequence.
	mustFence(t, s, 2, 2)
	out := mustSave(t, s, []persistence.Record{evRec("k", "c", 2, 1, "", evs("bad", 9, 1))})
	wantFenced(t, out[2], 2, 1, 2)
	// The right seq goes through.
	mustSaveOK(t, s, evRec("k", "a", 1, 1, "a1", evs("a", 4, 1)))
	wantEvents(t, j, "k", "a", evs("a", 1, 4))
}

// testJournalAtomic checks that a shard's records and events are written
// together or not at all, in batches that mix written, fenced and
// out-of-sequence shards.
func testJournalAtomic(t *testing.T, s persistence.Store) {
	j := asJournal(t, s)
	for sh := uint32(1); sh <= 4; sh++ {
		mustFence(t, s, sh, 1)
		mustSaveOK(t, s, evRec("k", fmt.Sprint("e", sh), sh, 1, "v0", evs("v0", 1, 2)))
	}
	mustFence(t, s, 2, 2) // shard 2's writer is stale
	recs := []persistence.Record{
		evRec("k", "e1", 1, 1, "v1", evs("v1", 3, 2)),
		evRec("k", "n1", 1, 1, "v1", evs("v1", 1, 1)),
		evRec("k", "e2", 2, 1, "v1", evs("v1", 3, 2)),
		evRec("k", "n2", 2, 1, "v1", evs("v1", 1, 1)),
		evRec("k", "e3", 3, 1, "v1", evs("v1", 3, 2)),
		evRec("k", "n3", 3, 1, "v1", evs("v1", 2, 1)), // out of sequence
		evRec("k", "e4", 4, 1, "v1", evs("v1", 3, 2)),
		rec("k", "p4", 4, 1, "v1"),
	}
	out := mustSave(t, s, recs)
	if out[1] != nil || out[4] != nil {
		t.Fatalf("valid shards: %v", out)
	}
	wantFenced(t, out[2], 2, 1, 2)
	wantSequence(t, out[3], 3, "k", "n3", 2, 0)
	for sh := uint32(1); sh <= 4; sh++ {
		e := fmt.Sprint("e", sh)
		if sh == 1 || sh == 4 {
			wantRecord(t, s, rec("k", e, sh, 1, "v1"))
			wantEvents(t, j, "k", e, append(evs("v0", 1, 2), evs("v1", 3, 2)...))
		} else {
			wantRecord(t, s, rec("k", e, sh, 1, "v0"))
			wantEvents(t, j, "k", e, evs("v0", 1, 2))
			wantMissing(t, s, "k", fmt.Sprint("n", sh))
			wantEvents(t, j, "k", fmt.Sprint("n", sh), nil)
		}
	}
	wantEvents(t, j, "k", "n1", evs("v1", 1, 1))
	wantRecord(t, s, rec("k", "p4", 4, 1, "v1"))
	// The feed holds exactly the written events.
	got, _ := readFeed(t, j, "k", "", 4)
	if len(got) != 4*2+2*2+1 {
		t.Fatalf("feed has %d events, want 13", len(got))
	}
	for _, e := range got {
		if e.ID == "e2" || e.ID == "e3" || e.ID == "n2" || e.ID == "n3" {
			if string(e.Data) != fmt.Sprint("v0:", e.Seq) {
				t.Fatalf("feed shows refused event %+v", e)
			}
		}
	}
}

// testJournalStaleAndCurrentWriters races an old owner (epoch 1) appending
// to two entities with a new owner (epoch 2) that fences the shard, reads
// where the journals end and appends from there. The journals must stay
// gapless, with every event the old owner got acknowledged, and after the
// Fence nothing of the old owner may appear: the events right after the
// point the new owner read are all its own.
func testJournalStaleAndCurrentWriters(t *testing.T, s persistence.Store) {
	journalStaleAndCurrentWriters(t, s, s)
}

func journalStaleAndCurrentWriters(t *testing.T, old, s persistence.Store) {
	const shard = 9
	j := asJournal(t, s)
	asJournal(t, old)
	ctx := ctxFor(t)
	mustFence(t, old, shard, 1)
	ids := []string{"x", "y"}
	var (
		mu       sync.Mutex
		acked    = map[string]uint64{} // last seq acknowledged to the old owner
		ackedN   int
		staleErr error
		stop     = make(chan struct{})
		done     = make(chan struct{})
	)
	go func() {
		defer close(done)
		next := map[string]uint64{"x": 1, "y": 1}
		for round := 1; ; round++ {
			select {
			case <-stop:
				return
			default:
			}
			recs := make([]persistence.Record, len(ids))
			for i, id := range ids {
				recs[i] = evRec("jr", id, shard, 1, fmt.Sprint("old ", round), evs("1", next[id], 2))
			}
			out, err := old.Save(ctx, recs)
			if err == nil {
				err = out[shard]
			}
			mu.Lock()
			switch {
			case err == nil:
				for _, id := range ids {
					acked[id] = next[id] + 1
					next[id] += 2
				}
				ackedN++
			case errors.Is(err, persistence.ErrFenced):
			default:
				staleErr = err
			}
			mu.Unlock()
			if err != nil && !errors.Is(err, persistence.ErrFenced) {
				return
			}
		}
	}()
	CheckFor(t, 30*time.Second, time.Millisecond, func() error {
		mu.Lock()
		defer mu.Unlock()
		if staleErr != nil || ackedN >= 5 {
			return nil
		}
		return fmt.Errorf("old owner acknowledged %d saves", ackedN)
	})
	mustFence(t, s, shard, 2)
	mu.Lock()
	ackedAtFence := map[string]uint64{"x": acked["x"], "y": acked["y"]}
	mu.Unlock()
	// The new owner starts where the journals end, right after its Fence.
	start := map[string]uint64{}
	for _, id := range ids {
		last, err := j.LastSeq(ctx, "jr", id)
		if err != nil {
			t.Fatal(err)
		}
		start[id] = last
	}
	const rounds = 20
	for round := range rounds {
		recs := make([]persistence.Record, len(ids))
		for i, id := range ids {
			recs[i] = evRec("jr", id, shard, 2, fmt.Sprint("new ", round), evs("2", start[id]+1+uint64(round), 1))
		}
		out, err := s.Save(ctx, recs)
		if err == nil {
			err = out[shard]
		}
		if err != nil {
			t.Fatalf("new owner round %d: %v", round, err)
		}
	}
	close(stop)
	<-done
	mu.Lock()
	defer mu.Unlock()
	if staleErr != nil {
		t.Fatalf("old owner: %v", staleErr)
	}
	for _, id := range ids {
		got := readEvents(t, j, "jr", id, 0, 64)
		// Gapless from 1, epoch-1 events first, then only epoch 2's.
		for i, e := range got {
			if e.Seq != uint64(i)+1 {
				t.Fatalf("%s: event %d has seq %d: %s", id, i, e.Seq, seqs(got))
			}
			epoch := "1"
			if e.Seq > start[id] {
				epoch = "2"
			}
			if want := evData(epoch, e.Seq); !bytes.Equal(e.Data, want) {
				t.Fatalf("%s: seq %d holds %q, want %q (the new owner started after seq %d)", id, e.Seq, e.Data, want, start[id])
			}
		}
		if uint64(len(got)) != start[id]+rounds {
			t.Fatalf("%s: %d events, want %d + %d", id, len(got), start[id], rounds)
		}
		// Every acknowledged stale event is there; at most the Save in
		// flight during the Fence was acknowledged after it, and it was
		// visible to the new owner right after its Fence.
		if start[id] < ackedAtFence[id] || acked[id] > start[id] || start[id] > ackedAtFence[id]+2 {
			t.Fatalf("%s: old owner acknowledged up to %d at the Fence and %d in all; the new owner found %d",
				id, ackedAtFence[id], acked[id], start[id])
		}
	}
}

// testJournalSameEpochWriters runs confused writers: several goroutines
// append to one entity under the same epoch, each from the LastSeq it
// read. The store must keep the journal gapless and hold exactly the
// events of the Saves it acknowledged (and possibly of Saves whose outcome
// was unknown), never those of Saves it refused.
func testJournalSameEpochWriters(t *testing.T, s persistence.Store) {
	j := asJournal(t, s)
	const writers, attempts = 4, 12
	mustFence(t, s, 3, 1)
	type attempt struct {
		first uint64
		out   error
	}
	results := make([][]attempt, writers)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := ctxFor(t)
			for a := range attempts {
				last, err := j.LastSeq(ctx, "conf", "e")
				if err != nil {
					results[w] = append(results[w], attempt{0, err})
					return
				}
				tag := fmt.Sprint(w, "/", a)
				out, err := s.Save(ctx, []persistence.Record{evRec("conf", "e", 3, 1, tag, evs(tag, last+1, 2))})
				if err == nil {
					err = out[3]
				}
				results[w] = append(results[w], attempt{last + 1, err})
				runtime.Gosched()
			}
		}()
	}
	wg.Wait()
	got := readEvents(t, j, "conf", "e", 0, 100)
	bySeq := map[uint64][]byte{}
	for i, e := range got {
		if e.Seq != uint64(i)+1 {
			t.Fatalf("journal not gapless: %s", seqs(got))
		}
		bySeq[e.Seq] = e.Data
	}
	oks := 0
	for w, as := range results {
		for a, at := range as {
			tag := fmt.Sprint(w, "/", a)
			present := bytes.Equal(bySeq[at.first], evData(tag, at.first)) && bytes.Equal(bySeq[at.first+1], evData(tag, at.first+1))
			switch {
			case at.out == nil:
				oks++
				if !present {
					t.Fatalf("writer %s: acknowledged events %d..%d missing", tag, at.first, at.first+1)
				}
			case errors.Is(at.out, persistence.ErrSequence):
				if bytes.HasPrefix(bySeq[at.first], []byte(tag+":")) || bytes.HasPrefix(bySeq[at.first+1], []byte(tag+":")) {
					t.Fatalf("writer %s: refused events are in the journal", tag)
				}
			case errors.Is(at.out, persistence.ErrFenced), errors.Is(at.out, persistence.ErrInvalid):
				t.Fatalf("writer %s: %v", tag, at.out)
			default:
				// Outcome unknown: either way is fine, but never half.
				if bytes.Equal(bySeq[at.first], evData(tag, at.first)) != bytes.Equal(bySeq[at.first+1], evData(tag, at.first+1)) {
					t.Fatalf("writer %s: half of a Save is in the journal (%v)", tag, at.out)
				}
				t.Logf("writer %s: outcome unknown: %v", tag, at.out)
			}
		}
	}
	if oks == 0 || len(got) < 2*oks {
		t.Fatalf("%d Saves acknowledged, journal has %d events", oks, len(got))
	}
}

func testJournalDelete(t *testing.T, s persistence.Store) {
	j := asJournal(t, s)
	mustFence(t, s, 1, 1)
	mustSaveOK(t, s,
		evRec("k", "a", 1, 1, "snap@0", evs("a", 1, 10)),
		evRec("k", "b", 1, 1, "b", evs("b", 1, 3)),
	)
	// Delete what a snapshot at seq 5 covers, in the Save that writes it.
	r := rec("k", "a", 1, 1, "snap@5")
	r.DeleteEventsBefore = 6
	mustSaveOK(t, s, r)
	wantRecord(t, s, r)
	wantEvents(t, j, "k", "a", evs("a", 6, 5))
	wantEvents(t, j, "k", "b", evs("b", 1, 3))
	if got, _ := readFeed(t, j, "k", "", 2); len(got) != 5+3 {
		t.Fatalf("feed after the delete has %d events, want 8", len(got))
	}
	// Nothing below the journal's start: a no-op.
	r.DeleteEventsBefore = 3
	mustSaveOK(t, s, r)
	wantEvents(t, j, "k", "a", evs("a", 6, 5))
	// Delete together with new events: 11 is appended and deleted at once.
	r = evRec("k", "a", 1, 1, "snap@11", evs("a", 11, 2))
	r.DeleteEventsBefore = 12
	mustSaveOK(t, s, r)
	wantEvents(t, j, "k", "a", evs("a", 12, 1))
	// Deleting past the end keeps the last event, and seqs continue.
	r = rec("k", "a", 1, 1, "snap@12")
	r.DeleteEventsBefore = persistence.MaxSeq
	mustSaveOK(t, s, r)
	wantEvents(t, j, "k", "a", evs("a", 12, 1))
	r = evRec("k", "a", 1, 1, "x", evs("a", 13, 3))
	r.DeleteEventsBefore = persistence.MaxSeq
	mustSaveOK(t, s, r)
	wantEvents(t, j, "k", "a", evs("a", 15, 1))
	out := mustSave(t, s, []persistence.Record{evRec("k", "a", 1, 1, "x", evs("a", 1, 1))})
	wantSequence(t, out[1], 1, "k", "a", 1, 15)
	mustSaveOK(t, s, evRec("k", "a", 1, 1, "x", evs("a", 16, 1)))
	wantEvents(t, j, "k", "a", evs("a", 15, 2))
	// An entity without events: nothing to delete, the record is written.
	r = rec("k", "c", 1, 1, "c")
	r.DeleteEventsBefore = 10
	mustSaveOK(t, s, r)
	wantRecord(t, s, r)
	wantEvents(t, j, "k", "c", nil)
	// A stale owner deletes nothing.
	mustFence(t, s, 1, 2)
	r = rec("k", "b", 1, 1, "stale")
	r.DeleteEventsBefore = persistence.MaxSeq
	out = mustSave(t, s, []persistence.Record{r})
	wantFenced(t, out[1], 1, 1, 2)
	wantEvents(t, j, "k", "b", evs("b", 1, 3))
	// The feed shows what is left, in order.
	got, _ := readFeed(t, j, "k", "", 1)
	var feed []string
	for _, e := range got {
		feed = append(feed, fmt.Sprint(e.ID, e.Seq))
	}
	if fmt.Sprint(feed) != "[b1 b2 b3 a15 a16]" {
		t.Fatalf("feed = %v", feed)
	}
}

// testJournalLargeHistory writes 10,000 events of one entity in 100 Saves
// and reads them back in pages, from the journal and from the feed; then
// a few large events.
func testJournalLargeHistory(t *testing.T, s persistence.Store) {
	j := asJournal(t, s)
	const total, perSave = 10000, 100
	mustFence(t, s, 1, 1)
	mustFence(t, s, 2, 1)
	for first := uint64(1); first <= total; first += perSave {
		mustSaveOK(t, s,
			evRec("big", "e", 1, 1, fmt.Sprint("snap ", first), evs("e", first, perSave)),
			evRec("big", "small", 2, 1, "", evs("s", first/perSave+1, 1)))
	}
	for _, page := range []int{999, total} {
		got := readEvents(t, j, "big", "e", 1, page)
		if len(got) != total {
			t.Fatalf("pages of %d: read %d events", page, len(got))
		}
		for i, e := range got {
			if e.Seq != uint64(i)+1 || !bytes.Equal(e.Data, evData("e", e.Seq)) {
				t.Fatalf("event %d = {%d %q}", i, e.Seq, e.Data)
			}
		}
	}
	got, err := j.ReadEvents(ctxFor(t), "big", "e", 5000, 10)
	if err != nil || seqs(got) != "[5000..5009]" {
		t.Fatalf("ReadEvents(5000, 10) = %s, %v", seqs(got), err)
	}
	if last, err := j.LastSeq(ctxFor(t), "big", "e"); err != nil || last != total {
		t.Fatalf("LastSeq = %d, %v", last, err)
	}
	feed, end := readFeed(t, j, "big", "", 1000)
	if len(feed) != total+total/perSave {
		t.Fatalf("feed has %d events, want %d", len(feed), total+total/perSave)
	}
	next := map[string]uint64{"e": 1, "small": 1}
	for _, e := range feed {
		if e.Seq != next[e.ID] {
			t.Fatalf("feed: %s seq %d, want %d", e.ID, e.Seq, next[e.ID])
		}
		next[e.ID]++
	}
	r := rec("big", "e", 1, 1, "snap 9000")
	r.DeleteEventsBefore = 9000
	mustSaveOK(t, s, r)
	if got := readEvents(t, j, "big", "e", 0, 500); len(got) != 1001 || got[0].Seq != 9000 {
		t.Fatalf("after deleting before 9000: %s", seqs(got))
	}
	// Large events: eight of 128 KiB in one Save.
	rng := rand.New(rand.NewPCG(3, 4))
	large := make([]persistence.Event, 8)
	for i := range large {
		b := make([]byte, 128<<10)
		for k := range b {
			b[k] = byte(rng.Uint32())
		}
		large[i] = persistence.Event{Seq: total + 1 + uint64(i), Data: b}
	}
	mustSaveOK(t, s, evRec("big", "e", 1, 1, "large", large))
	got = readEvents(t, j, "big", "e", total+1, 3)
	if len(got) != len(large) {
		t.Fatalf("read %d large events", len(got))
	}
	for i := range got {
		if got[i].Seq != large[i].Seq || !bytes.Equal(got[i].Data, large[i].Data) {
			t.Fatalf("large event %d differs", i)
		}
	}
	more, _ := readFeed(t, j, "big", end, 3)
	if len(more) != len(large) {
		t.Fatalf("feed after the large events: %d entries", len(more))
	}
}

// feedItem is one event as the feed tests track it.
type feedItem struct {
	id  string
	seq uint64
}

// testJournalFeed follows a kind's journal with several page sizes and
// checks exactly-once delivery, per-entity order, per-shard commit order,
// resumption from stored offsets, kind isolation and the end of the feed.
func testJournalFeed(t *testing.T, s persistence.Store) {
	j := asJournal(t, s)
	ctx := ctxFor(t)
	if got, next, err := j.ReadJournal(ctx, "acct", "", 5); err != nil || len(got) != 0 || next != "" {
		t.Fatalf("empty feed: %v, %q, %v", got, next, err)
	}
	for sh := uint32(1); sh <= 3; sh++ {
		mustFence(t, s, sh, 1)
	}
	// Rounds of Saves, each with several entities of several shards, some
	// with more than one event, and another kind mixed in.
	next := map[string]uint64{}
	var want []feedItem
	const rounds = 6
	for round := range rounds {
		var recs []persistence.Record
		for sh := uint32(1); sh <= 3; sh++ {
			for e := range 2 {
				id := fmt.Sprintf("s%d-%d", sh, e)
				n := 1 + (round+e+int(sh))%3
				r := evRec("acct", id, sh, 1, "", nil)
				for range n {
					next[id]++
					r.Events = append(r.Events, persistence.Event{Seq: next[id], Data: fmt.Appendf(nil, "%d:%d", sh, round)})
					want = append(want, feedItem{id, next[id]})
				}
				recs = append(recs, r)
			}
			recs = append(recs, evRec("other", fmt.Sprint(sh), sh, 1, "", evs("o", uint64(round)+1, 1)))
		}
		mustSaveOK(t, s, recs...)
	}
	check := func(name string, got []persistence.JournalEntry, want []feedItem) {
		t.Helper()
		seen := map[feedItem]bool{}
		last := map[string]uint64{}
		lastRound := map[string]int{} // per shard
		for _, e := range got {
			it := feedItem{e.ID, e.Seq}
			if seen[it] {
				t.Fatalf("%s: %s seq %d twice", name, e.ID, e.Seq)
			}
			seen[it] = true
			if e.Seq <= last[e.ID] {
				t.Fatalf("%s: %s seq %d after %d", name, e.ID, e.Seq, last[e.ID])
			}
			last[e.ID] = e.Seq
			var sh, round int
			if _, err := fmt.Sscanf(string(e.Data), "%d:%d", &sh, &round); err != nil {
				t.Fatalf("%s: %+v: %v", name, e, err)
			}
			if shard := fmt.Sprint(sh); round < lastRound[shard] {
				t.Fatalf("%s: shard %s round %d after round %d", name, shard, round, lastRound[shard])
			} else {
				lastRound[shard] = round
			}
		}
		if len(got) != len(want) {
			t.Fatalf("%s: %d entries, want %d", name, len(got), len(want))
		}
		for _, it := range want {
			if !seen[it] {
				t.Fatalf("%s: %s seq %d missing", name, it.id, it.seq)
			}
		}
	}
	var end persistence.Offset
	for _, limit := range []int{1, 2, 5, 1000} {
		var got []persistence.JournalEntry
		got, end = readFeed(t, j, "acct", "", limit)
		check(fmt.Sprint("limit ", limit), got, want)
	}
	// Resuming from any stored offset reads exactly what the pages before
	// it did not.
	var (
		pages [][]persistence.JournalEntry
		offs  []persistence.Offset
		after persistence.Offset
	)
	for {
		page, nextOff, err := j.ReadJournal(ctx, "acct", after, 4)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		pages, offs, after = append(pages, page), append(offs, nextOff), nextOff
	}
	consumed := map[feedItem]bool{}
	for i, off := range offs {
		for _, e := range pages[i] {
			consumed[feedItem{e.ID, e.Seq}] = true
		}
		var rest []feedItem
		for _, it := range want {
			if !consumed[it] {
				rest = append(rest, it)
			}
		}
		got, _ := readFeed(t, j, "acct", off, 3)
		check(fmt.Sprint("from offset ", i), got, rest)
	}
	if len(consumed) != len(want) {
		t.Fatalf("pages of 4 read %d events, want %d", len(consumed), len(want))
	}
	// At the end: nothing, and the same offset back.
	if got, n, err := j.ReadJournal(ctx, "acct", end, 10); err != nil || len(got) != 0 || n != end {
		t.Fatalf("at the end: %d entries, %q, %v; want none, %q", len(got), n, err, end)
	}
	// A new Save shows up after the end.
	mustSaveOK(t, s, evRec("acct", "s1-0", 1, 1, "", []persistence.Event{{Seq: next["s1-0"] + 1, Data: []byte("1:99")}}))
	got, _ := readFeed(t, j, "acct", end, 10)
	if len(got) != 1 || got[0].ID != "s1-0" || got[0].Seq != next["s1-0"]+1 {
		t.Fatalf("after the end: %+v", got)
	}
	// The other kind has its own feed.
	others, _ := readFeed(t, j, "other", "", 7)
	if len(others) != 3*rounds {
		t.Fatalf("other kind: %d entries", len(others))
	}
	if got, _ := readFeed(t, j, "nobody", "", 7); len(got) != 0 {
		t.Fatalf("kind without events: %+v", got)
	}
}

// testJournalFeedConcurrent has one writer per shard appending while a
// reader follows the feed. Saves of different shards commit in whatever
// order they finish; the reader must still see every event exactly once,
// none passed over, each entity's in order.
func testJournalFeedConcurrent(t *testing.T, s persistence.Store) {
	j := asJournal(t, s)
	const writers, rounds, entities = 4, 25, 3
	seed := Seed(t)
	ctx := ctxFor(t)
	for w := range writers {
		mustFence(t, s, uint32(20+w), 1)
	}
	var (
		wg       sync.WaitGroup
		errc     = make(chan error, writers)
		stopRead = make(chan struct{})
		readc    = make(chan []persistence.JournalEntry, 1)
	)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			sh := uint32(20 + w)
			next := make([]uint64, entities)
			for round := range rounds {
				var recs []persistence.Record
				for e := range entities {
					if rng.IntN(2) == 0 {
						continue
					}
					r := evRec("fc", fmt.Sprint(w, "-", e), sh, 1, "", nil)
					for range 1 + rng.IntN(2) {
						next[e]++
						r.Events = append(r.Events, persistence.Event{Seq: next[e], Data: fmt.Appendf(nil, "%d:%d", w, round)})
					}
					recs = append(recs, r)
				}
				if len(recs) == 0 {
					continue
				}
				out, err := s.Save(ctx, recs)
				if err == nil {
					err = out[sh]
				}
				if err != nil {
					errc <- fmt.Errorf("writer %d round %d: %w", w, round, err)
					return
				}
			}
		}()
	}
	go func() {
		rng := rand.New(rand.NewPCG(seed, 99))
		var all []persistence.JournalEntry
		var after persistence.Offset
		stopping := false
		for {
			got, next, err := j.ReadJournal(ctx, "fc", after, 1+rng.IntN(7))
			if err != nil {
				t.Errorf("ReadJournal: %v", err)
				readc <- all
				return
			}
			all, after = append(all, got...), next
			if len(got) > 0 {
				continue
			}
			if stopping {
				readc <- all
				return
			}
			select {
			case <-stopRead:
				stopping = true // one more pass after the writers are done
			default:
				runtime.Gosched()
			}
		}
	}()
	wg.Wait()
	close(errc)
	close(stopRead)
	seen := <-readc
	for err := range errc {
		t.Fatal(err)
	}
	got := map[feedItem]int{}
	last := map[string]uint64{}
	lastRound := map[string]int{}
	for _, e := range seen {
		got[feedItem{e.ID, e.Seq}]++
		if e.Seq != last[e.ID]+1 {
			t.Fatalf("%s: seq %d after %d", e.ID, e.Seq, last[e.ID])
		}
		last[e.ID] = e.Seq
		var w, round int
		fmt.Sscanf(string(e.Data), "%d:%d", &w, &round)
		if round < lastRound[fmt.Sprint(w)] {
			t.Fatalf("writer %d: round %d after round %d", w, round, lastRound[fmt.Sprint(w)])
		}
		lastRound[fmt.Sprint(w)] = round
	}
	total := 0
	for w := range writers {
		for e := range entities {
			id := fmt.Sprint(w, "-", e)
			stored := readEvents(t, j, "fc", id, 0, 100)
			total += len(stored)
			for _, ev := range stored {
				if got[feedItem{id, ev.Seq}] != 1 {
					t.Fatalf("%s seq %d seen %d times by the reader", id, ev.Seq, got[feedItem{id, ev.Seq}])
				}
			}
		}
	}
	if total != len(seen) {
		t.Fatalf("reader saw %d events, the journals hold %d", len(seen), total)
	}
	t.Logf("%d events, read in %d entries", total, len(seen))
}

func testJournalInvalidInput(t *testing.T, s persistence.Store) {
	j := asJournal(t, s)
	mustFence(t, s, 1, 1)
	good := evRec("k", "good", 1, 1, "g", evs("g", 1, 1))
	bad := map[string][]persistence.Event{
		"seq 0":             {{Seq: 0, Data: []byte{}}},
		"gap":               {{Seq: 1, Data: []byte{}}, {Seq: 3, Data: []byte{}}},
		"repeat":            {{Seq: 1, Data: []byte{}}, {Seq: 1, Data: []byte{}}},
		"decreasing":        {{Seq: 2, Data: []byte{}}, {Seq: 1, Data: []byte{}}},
		"nil data":          {{Seq: 1, Data: []byte("x")}, {Seq: 2}},
		"seq above MaxSeq":  {{Seq: persistence.MaxSeq + 1, Data: []byte{}}},
		"seq wraps":         {{Seq: persistence.MaxSeq, Data: []byte{}}, {Seq: persistence.MaxSeq + 1, Data: []byte{}}},
		"max uint64":        {{Seq: ^uint64(0), Data: []byte{}}},
		"deleting too high": nil,
	}
	for name, events := range bad {
		t.Run(name, func(t *testing.T) {
			r := evRec("k", "a", 1, 1, "x", events)
			if events == nil {
				r.DeleteEventsBefore = persistence.MaxSeq + 1
			}
			out, err := s.Save(ctxFor(t), []persistence.Record{good, r})
			if !errors.Is(err, persistence.ErrInvalid) {
				t.Fatalf("Save = %v, %v; want ErrInvalid", out, err)
			}
			wantMissing(t, s, "k", "good")
			wantEvents(t, j, "k", "good", nil)
			wantEvents(t, j, "k", "a", nil)
		})
	}
	// Valid input the journal refuses: a first event at MaxSeq.
	out := mustSave(t, s, []persistence.Record{evRec("k", "a", 1, 1, "x", []persistence.Event{{Seq: persistence.MaxSeq, Data: []byte{}}})})
	wantSequence(t, out[1], 1, "k", "a", persistence.MaxSeq, 0)
	ctx := ctxFor(t)
	for _, k := range [][2]string{{"", "a"}, {"k", ""}, {"k\xff", "a"}, {"k", "a\x00"}} {
		if _, err := j.ReadEvents(ctx, k[0], k[1], 1, 1); !errors.Is(err, persistence.ErrInvalid) {
			t.Fatalf("ReadEvents(%q, %q) = %v, want ErrInvalid", k[0], k[1], err)
		}
		if _, err := j.LastSeq(ctx, k[0], k[1]); !errors.Is(err, persistence.ErrInvalid) {
			t.Fatalf("LastSeq(%q, %q) = %v, want ErrInvalid", k[0], k[1], err)
		}
	}
	for _, limit := range []int{0, -1} {
		if _, err := j.ReadEvents(ctx, "k", "a", 1, limit); !errors.Is(err, persistence.ErrInvalid) {
			t.Fatalf("ReadEvents(limit %d) = %v, want ErrInvalid", limit, err)
		}
		if _, _, err := j.ReadJournal(ctx, "k", "", limit); !errors.Is(err, persistence.ErrInvalid) {
			t.Fatalf("ReadJournal(limit %d) = %v, want ErrInvalid", limit, err)
		}
	}
	for _, kind := range []string{"", "k\x00", "k\xff"} {
		if _, _, err := j.ReadJournal(ctx, kind, "", 1); !errors.Is(err, persistence.ErrInvalid) {
			t.Fatalf("ReadJournal(%q) = %v, want ErrInvalid", kind, err)
		}
	}
	for _, off := range []persistence.Offset{"x", "\x00", "\xff\xff\xff\xff", "garbage offset", "\x01\x80"} {
		if _, _, err := j.ReadJournal(ctx, "k", off, 1); !errors.Is(err, persistence.ErrInvalid) {
			t.Fatalf("ReadJournal(offset %q) = %v, want ErrInvalid", off, err)
		}
	}
}

// testJournalCancelMidSave cancels Saves with events at random moments.
// Once the shard is fenced past the Save's epoch, each shard's records and
// events are all there or not at all, and the journal continues from
// wherever it ended.
func testJournalCancelMidSave(t *testing.T, s persistence.Store) {
	j := asJournal(t, s)
	const shards, perShard, rounds = 3, 10, 8
	seed := Seed(t)
	rng := rand.New(rand.NewPCG(seed, 2))
	epoch := int64(1)
	for sh := uint32(0); sh < shards; sh++ {
		mustFence(t, s, 300+sh, epoch)
	}
	last := map[string]uint64{}
	for round := range rounds {
		var recs []persistence.Record
		for sh := uint32(0); sh < shards; sh++ {
			for i := range perShard {
				id := fmt.Sprint(sh, "-", i)
				recs = append(recs, evRec("jc", id, 300+sh, epoch, fmt.Sprint(round), evs(fmt.Sprint(round), last[id]+1, 2)))
			}
		}
		ctx, cancel := context.WithCancel(t.Context())
		spin := rng.IntN(2000)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for range spin {
				runtime.Gosched()
			}
			cancel()
		}()
		out, err := s.Save(ctx, recs)
		<-done
		if err != nil {
			t.Fatalf("round %d: batch error %v", round, err)
		}
		epoch++
		for sh := uint32(0); sh < shards; sh++ {
			mustFence(t, s, 300+sh, epoch)
		}
		for sh := uint32(0); sh < shards; sh++ {
			if o := out[300+sh]; errors.Is(o, persistence.ErrFenced) || errors.Is(o, persistence.ErrSequence) {
				t.Fatalf("round %d shard %d: %v", round, 300+sh, o)
			}
			written := 0
			for i := range perShard {
				id := fmt.Sprint(sh, "-", i)
				r, err := s.Load(t.Context(), "jc", id)
				recNew := err == nil && string(r.Data) == fmt.Sprint(round)
				ls, err := j.LastSeq(t.Context(), "jc", id)
				if err != nil {
					t.Fatal(err)
				}
				evNew := ls == last[id]+2
				if !evNew && ls != last[id] {
					t.Fatalf("round %d: %s journal ends at %d, was %d", round, id, ls, last[id])
				}
				if recNew != evNew {
					t.Fatalf("round %d: %s record written %v, events written %v", round, id, recNew, evNew)
				}
				if evNew {
					written++
					last[id] = ls
				}
			}
			if written != 0 && written != perShard {
				t.Fatalf("round %d shard %d: %d of %d entities written (outcome %v)", round, 300+sh, written, perShard, out[300+sh])
			}
			if out[300+sh] == nil && written != perShard {
				t.Fatalf("round %d shard %d: acknowledged but not visible", round, 300+sh)
			}
		}
	}
}

func testJournalClosed(t *testing.T, s persistence.Store) {
	j := asJournal(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t)
	if _, err := j.ReadEvents(ctx, "k", "a", 1, 1); !errors.Is(err, persistence.ErrClosed) {
		t.Fatalf("ReadEvents after Close = %v", err)
	}
	if _, err := j.LastSeq(ctx, "k", "a"); !errors.Is(err, persistence.ErrClosed) {
		t.Fatalf("LastSeq after Close = %v", err)
	}
	if _, _, err := j.ReadJournal(ctx, "k", "", 1); !errors.Is(err, persistence.ErrClosed) {
		t.Fatalf("ReadJournal after Close = %v", err)
	}
}

// testJournalReopen writes events, follows part of the feed, closes the
// store, and goes on from the stored offset in a new one.
func testJournalReopen(t *testing.T, open Opener) {
	s := open(t)
	j := asJournal(t, s)
	mustFence(t, s, 1, 1)
	mustSaveOK(t, s, evRec("k", "a", 1, 1, "a", evs("a", 1, 5)))
	page, off, err := j.ReadJournal(ctxFor(t), "k", "", 3)
	if err != nil || len(page) == 0 {
		t.Fatalf("ReadJournal = %v, %v", page, err)
	}
	stored := []byte(off)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := open(t)
	defer s2.Close()
	j2 := asJournal(t, s2)
	wantEvents(t, j2, "k", "a", evs("a", 1, 5))
	mustSaveOK(t, s2, evRec("k", "a", 1, 1, "a", evs("a", 6, 1)))
	rest, _ := readFeed(t, j2, "k", persistence.Offset(stored), 2)
	if len(page)+len(rest) != 6 || rest[len(rest)-1].Seq != 6 || rest[0].Seq != page[len(page)-1].Seq+1 {
		t.Fatalf("read %d, then %d after reopening", len(page), len(rest))
	}
	out := mustSave(t, s2, []persistence.Record{evRec("k", "a", 1, 1, "a", evs("a", 6, 1))})
	wantSequence(t, out[1], 1, "k", "a", 6, 6)
}
