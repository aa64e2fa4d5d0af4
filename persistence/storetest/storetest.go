package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/ordo-actors/ordo/persistence"
)

// Opener opens a Store over one data set. Every call returns a new Store
// over the same data, so that a test can close a store and open it again.
// The caller closes each store it gets; Opener may also register cleanups
// with t.
type Opener func(t *testing.T) persistence.Store

// Run runs the conformance suite. open returns a Store over a fresh, empty
// data set each time it is called; the suite closes it.
func Run(t *testing.T, open func(t *testing.T) persistence.Store) {
	t.Helper()
	for _, tc := range slices.Concat(cases, journalCases, createCases) {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t)
			t.Cleanup(func() { _ = s.Close() })
			tc.fn(t, s)
		})
	}
}

// RunWithReopen runs Run and, in addition, the tests that need two stores
// over the same data: closing a store and opening the data again, and an
// old and a new owner racing from two stores. newData returns an Opener over a fresh, empty
// data set each time it is called.
func RunWithReopen(t *testing.T, newData func(t *testing.T) Opener) {
	t.Helper()
	Run(t, func(t *testing.T) persistence.Store { return newData(t)(t) })
	t.Run("ReopenKeepsEverything", func(t *testing.T) { testReopen(t, newData(t)) })
	t.Run("StaleAndCurrentWritersTwoStores", func(t *testing.T) {
		open := newData(t)
		old, cur := open(t), open(t)
		defer old.Close()
		defer cur.Close()
		staleAndCurrentWriters(t, old, cur)
	})
	t.Run("JournalReopen", func(t *testing.T) { testJournalReopen(t, newData(t)) })
	t.Run("JournalStaleAndCurrentWritersTwoStores", func(t *testing.T) {
		open := newData(t)
		old, cur := open(t), open(t)
		defer old.Close()
		defer cur.Close()
		journalStaleAndCurrentWriters(t, old, cur)
	})
}

type testCase struct {
	name string
	fn   func(t *testing.T, s persistence.Store)
}

var cases = []testCase{
	{"FenceOnlyRaises", testFenceOnlyRaises},
	{"FenceInvalidEpoch", testFenceInvalidEpoch},
	{"ConcurrentFences", testConcurrentFences},
	{"SaveLoadRoundTrip", testSaveLoadRoundTrip},
	{"EmptyBatch", testEmptyBatch},
	{"LoadMissing", testLoadMissing},
	{"SaveUnfencedShard", testSaveUnfencedShard},
	{"SaveWrongEpoch", testSaveWrongEpoch},
	{"MixedBatch", testMixedBatch},
	{"InvalidInput", testInvalidInput},
	{"LargeStates", testLargeStates},
	{"ManyShardsOneBatch", testManyShardsOneBatch},
	{"ConcurrentShards", testConcurrentShards},
	{"StaleAndCurrentWriters", testStaleAndCurrentWriters},
	{"FenceRacesSave", testFenceRacesSave},
	{"CancelMidSave", testCancelMidSave},
	{"CanceledContext", testCanceledContext},
	{"Closed", testClosed},
	{"LoadMany", testLoadMany},
	{"ReminderIndexQueries", testDueQueries},
	{"ReminderIndexMoves", testDueMoves},
	{"ReminderIndexFenced", testDueFenced},
	{"ReminderIndexManyShards", testDueManyShards},
}

// Seed returns the seed of a randomised test: ORDO_SEED when set, otherwise
// a fresh one. It logs the seed so that a failure can be replayed.
func Seed(t *testing.T) uint64 {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("ORDO_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("ORDO_SEED=%q: %v", v, err)
		}
		seed = s
	}
	t.Logf("seed %d (replay with ORDO_SEED=%d)", seed, seed)
	return seed
}

// CheckFor calls f every interval until it returns nil, failing the test
// with f's last error when timeout passes first (testutil.Eventually).
func CheckFor(t testing.TB, timeout, interval time.Duration, f func() error) {
	t.Helper()
	testutil.Eventually(t, timeout, interval, f)
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func rec(kind, id string, shard uint32, epoch int64, data string) persistence.Record {
	return persistence.Record{Kind: kind, ID: id, Shard: shard, Epoch: epoch, Data: []byte(data)}
}

func mustFence(t *testing.T, s persistence.Store, shard uint32, epoch int64) {
	t.Helper()
	if err := s.Fence(ctxFor(t), shard, epoch); err != nil {
		t.Fatalf("Fence(%d, %d): %v", shard, epoch, err)
	}
}

// mustSave saves recs and checks the batch error is nil and that every shard
// in recs has an outcome entry and no other shard has one.
func mustSave(t *testing.T, s persistence.Store, recs []persistence.Record) map[uint32]error {
	t.Helper()
	out, err := s.Save(ctxFor(t), recs)
	if err != nil {
		t.Fatalf("Save: %v", err)
	}
	checkOutcomeKeys(t, recs, out)
	return out
}

func checkOutcomeKeys(t *testing.T, recs []persistence.Record, out map[uint32]error) {
	t.Helper()
	want := map[uint32]bool{}
	for _, r := range recs {
		want[r.Shard] = true
	}
	for sh := range want {
		if _, ok := out[sh]; !ok {
			t.Fatalf("outcome has no entry for shard %d: %v", sh, out)
		}
	}
	for sh := range out {
		if !want[sh] {
			t.Fatalf("outcome has an entry for shard %d, which is not in the batch", sh)
		}
	}
}

func mustSaveOK(t *testing.T, s persistence.Store, recs ...persistence.Record) {
	t.Helper()
	for sh, err := range mustSave(t, s, recs) {
		if err != nil {
			t.Fatalf("shard %d: %v", sh, err)
		}
	}
}

// wantFenced checks that err is a *FencedError for shard with the given
// Have and Want (want < 0: any Want).
func wantFenced(t *testing.T, err error, shard uint32, have, want int64) {
	t.Helper()
	if !errors.Is(err, persistence.ErrFenced) {
		t.Fatalf("shard %d: got %v, want an error matching ErrFenced", shard, err)
	}
	var fe *persistence.FencedError
	if !errors.As(err, &fe) {
		t.Fatalf("shard %d: %v is not a *FencedError", shard, err)
	}
	if fe.Shard != shard || fe.Have != have || (want >= 0 && fe.Want != want) {
		t.Fatalf("got %+v, want Shard %d Have %d Want %d", *fe, shard, have, want)
	}
}

func wantRecord(t *testing.T, s persistence.Store, want persistence.Record) {
	t.Helper()
	got, err := s.Load(ctxFor(t), want.Kind, want.ID)
	if err != nil {
		t.Fatalf("Load(%s/%s): %v", want.Kind, want.ID, err)
	}
	if got.Kind != want.Kind || got.ID != want.ID || got.Shard != want.Shard || got.Epoch != want.Epoch || got.Due != want.Due {
		t.Fatalf("Load(%s/%s) = {%q %q shard %d epoch %d due %d}, want shard %d epoch %d due %d",
			want.Kind, want.ID, got.Kind, got.ID, got.Shard, got.Epoch, got.Due, want.Shard, want.Epoch, want.Due)
	}
	if got.PrevDue != 0 {
		t.Fatalf("Load(%s/%s) returned PrevDue %d, want 0", want.Kind, want.ID, got.PrevDue)
	}
	if got.Data == nil {
		t.Fatalf("Load(%s/%s) returned nil Data", want.Kind, want.ID)
	}
	if !bytes.Equal(got.Data, want.Data) {
		t.Fatalf("Load(%s/%s) data = %s, want %s", want.Kind, want.ID, short(got.Data), short(want.Data))
	}
}

func wantMissing(t *testing.T, s persistence.Store, kind, id string) {
	t.Helper()
	got, err := s.Load(ctxFor(t), kind, id)
	if !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("Load(%s/%s) = %+v, %v; want ErrNotFound", kind, id, got, err)
	}
}

func short(b []byte) string {
	if len(b) > 40 {
		return fmt.Sprintf("%q... (%d bytes)", b[:40], len(b))
	}
	return fmt.Sprintf("%q", b)
}

func testFenceOnlyRaises(t *testing.T, s persistence.Store) {
	ctx := ctxFor(t)
	mustFence(t, s, 1, 5)
	mustFence(t, s, 1, 5) // equal is fine
	mustFence(t, s, 1, 7)
	err := s.Fence(ctx, 1, 6)
	wantFenced(t, err, 1, 6, 7)
	wantFenced(t, s.Fence(ctx, 1, 1), 1, 1, 7)
	// Shards are independent.
	mustFence(t, s, 2, 1)
	mustFence(t, s, 0, 3)
	mustFence(t, s, ^uint32(0), 1<<62)
	// The failed Fence did not lower anything: epoch 7 still writes, 6 does not.
	mustSaveOK(t, s, rec("k", "a", 1, 7, "x"))
	out := mustSave(t, s, []persistence.Record{rec("k", "b", 1, 6, "y")})
	wantFenced(t, out[1], 1, 6, 7)
	mustSaveOK(t, s, rec("k", "c", ^uint32(0), 1<<62, "z"))
}

func testFenceInvalidEpoch(t *testing.T, s persistence.Store) {
	for _, e := range []int64{0, -1, -1 << 63} {
		if err := s.Fence(ctxFor(t), 1, e); !errors.Is(err, persistence.ErrInvalid) {
			t.Fatalf("Fence(1, %d) = %v, want ErrInvalid", e, err)
		}
	}
	// Nothing was fenced: a write at epoch 1 is refused as unfenced.
	out := mustSave(t, s, []persistence.Record{rec("k", "a", 1, 1, "x")})
	wantFenced(t, out[1], 1, 1, 0)
}

// testConcurrentFences races Fence calls with epochs 1..n on one shard:
// whatever the interleaving, the highest epoch ends up recorded, and every
// call either succeeds or reports a higher fence.
func testConcurrentFences(t *testing.T, s persistence.Store) {
	const n = 16
	errc := make(chan error, n)
	for e := int64(1); e <= n; e++ {
		go func() {
			err := s.Fence(ctxFor(t), 5, e)
			var fe *persistence.FencedError
			if errors.As(err, &fe) {
				if fe.Want <= e || fe.Have != e {
					err = fmt.Errorf("Fence(5, %d): %+v", e, *fe)
				} else {
					err = nil
				}
			}
			errc <- err
		}()
	}
	for range n {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	wantFenced(t, s.Fence(ctxFor(t), 5, n-1), 5, n-1, n)
	mustSaveOK(t, s, rec("k", "a", 5, n, "x"))
}

func testSaveLoadRoundTrip(t *testing.T, s persistence.Store) {
	mustFence(t, s, 3, 2)
	r1 := rec("account", "alice", 3, 2, "v1")
	r2 := rec("account", "bob", 3, 2, "")
	r3 := persistence.Record{Kind: "k/ind", ID: "i/d\xe2\x82\xac \x01", Shard: 3, Epoch: 2, Data: []byte{0, 1, 2, 255}}
	r4 := rec("k", "ind/i/d", 3, 2, "distinct from k/ind + i/d")
	mustSaveOK(t, s, r1, r2, r3, r4)
	for _, r := range []persistence.Record{r1, r2, r3, r4} {
		wantRecord(t, s, r)
	}
	// Overwrite under a newer epoch; the record carries the new epoch.
	mustFence(t, s, 3, 9)
	r1b := rec("account", "alice", 3, 9, "v2")
	mustSaveOK(t, s, r1b)
	wantRecord(t, s, r1b)
	wantRecord(t, s, r2)
	// Kind and ID are matched exactly.
	wantMissing(t, s, "account", "Alice")
	wantMissing(t, s, "Account", "alice")
	wantMissing(t, s, "account", "alic")
	// The store does not keep a reference to the caller's buffer.
	buf := []byte("v3")
	mustSaveOK(t, s, persistence.Record{Kind: "account", ID: "alice", Shard: 3, Epoch: 9, Data: buf})
	buf[0] = 'X'
	wantRecord(t, s, rec("account", "alice", 3, 9, "v3"))
	got, err := s.Load(ctxFor(t), "account", "alice")
	if err != nil {
		t.Fatal(err)
	}
	got.Data[0] = 'Y'
	wantRecord(t, s, rec("account", "alice", 3, 9, "v3"))
}

func testEmptyBatch(t *testing.T, s persistence.Store) {
	for _, recs := range [][]persistence.Record{nil, {}} {
		out, err := s.Save(ctxFor(t), recs)
		if err != nil || len(out) != 0 {
			t.Fatalf("Save(%v) = %v, %v; want empty outcome, nil", recs, out, err)
		}
	}
}

func testLoadMissing(t *testing.T, s persistence.Store) {
	wantMissing(t, s, "k", "nobody")
	mustFence(t, s, 1, 1)
	wantMissing(t, s, "k", "nobody")
}

func testSaveUnfencedShard(t *testing.T, s persistence.Store) {
	out := mustSave(t, s, []persistence.Record{rec("k", "a", 4, 1, "x"), rec("k", "b", 4, 1, "y")})
	wantFenced(t, out[4], 4, 1, 0)
	wantMissing(t, s, "k", "a")
	wantMissing(t, s, "k", "b")
	// Fencing another shard does not fence this one.
	mustFence(t, s, 5, 1)
	out = mustSave(t, s, []persistence.Record{rec("k", "a", 4, 1, "x")})
	wantFenced(t, out[4], 4, 1, 0)
	wantMissing(t, s, "k", "a")
}

func testSaveWrongEpoch(t *testing.T, s persistence.Store) {
	mustFence(t, s, 1, 5)
	base := rec("k", "a", 1, 5, "base")
	mustSaveOK(t, s, base)
	for _, e := range []int64{4, 1, 6, 1 << 40} {
		out := mustSave(t, s, []persistence.Record{
			rec("k", "a", 1, e, "stale"),
			rec("k", "new", 1, e, "stale"),
		})
		wantFenced(t, out[1], 1, e, 5)
		wantRecord(t, s, base)
		wantMissing(t, s, "k", "new")
	}
}

func testMixedBatch(t *testing.T, s persistence.Store) {
	mustFence(t, s, 1, 3)
	mustFence(t, s, 2, 3)
	mustFence(t, s, 2, 4) // shard 2 moved on: epoch 3 is stale
	mustFence(t, s, 4, 3)
	mustFence(t, s, 5, 2) // epoch 3 is ahead of shard 5's fence
	recs := []persistence.Record{
		rec("k", "1a", 1, 3, "1a"),
		rec("k", "2a", 2, 3, "2a"),
		rec("k", "3a", 3, 3, "3a"), // shard 3 never fenced
		rec("k", "1b", 1, 3, "1b"),
		rec("k", "4a", 4, 3, "4a"),
		rec("k", "5a", 5, 3, "5a"),
		rec("k", "2b", 2, 3, "2b"),
		rec("k", "3b", 3, 3, "3b"),
		rec("k", "4b", 4, 3, "4b"),
	}
	out := mustSave(t, s, recs)
	if out[1] != nil || out[4] != nil {
		t.Fatalf("valid shards failed: %v", out)
	}
	wantFenced(t, out[2], 2, 3, 4)
	wantFenced(t, out[3], 3, 3, 0)
	wantFenced(t, out[5], 5, 3, 2)
	for _, r := range recs {
		if r.Shard == 1 || r.Shard == 4 {
			wantRecord(t, s, r)
		} else {
			wantMissing(t, s, r.Kind, r.ID)
		}
	}
}

func testInvalidInput(t *testing.T, s persistence.Store) {
	mustFence(t, s, 1, 1)
	good := rec("k", "good", 1, 1, "g")
	long := func(n int) string { return string(bytes.Repeat([]byte("x"), n)) }
	bad := map[string]persistence.Record{
		"empty kind":            rec("", "a", 1, 1, "x"),
		"empty id":              rec("k", "", 1, 1, "x"),
		"non-UTF-8 kind":        rec("k\xff", "a", 1, 1, "x"),
		"non-UTF-8 id":          rec("k", "a\xc3\x28", 1, 1, "x"),
		"NUL in kind":           rec("k\x00", "a", 1, 1, "x"),
		"NUL in id":             rec("k", "a\x00b", 1, 1, "x"),
		"kind too long":         rec(long(persistence.MaxKindLen+1), "a", 1, 1, "x"),
		"id too long":           rec("k", long(persistence.MaxIDLen+1), 1, 1, "x"),
		"zero epoch":            rec("k", "a", 1, 0, "x"),
		"negative epoch":        rec("k", "a", 1, -1, "x"),
		"nil data":              {Kind: "k", ID: "a", Shard: 1, Epoch: 1},
		"duplicate key":         good,
		"two epochs per shard":  rec("k", "b", 1, 2, "x"),
		"negative due":          {Kind: "k", ID: "a", Shard: 1, Epoch: 1, Data: []byte("x"), Due: -1},
		"negative previous due": {Kind: "k", ID: "a", Shard: 1, Epoch: 1, Data: []byte("x"), PrevDue: -1},
	}
	for name, r := range bad {
		t.Run(name, func(t *testing.T) {
			out, err := s.Save(ctxFor(t), []persistence.Record{good, r})
			if !errors.Is(err, persistence.ErrInvalid) {
				t.Fatalf("Save = %v, %v; want ErrInvalid", out, err)
			}
			wantMissing(t, s, "k", "good")
		})
	}
	for _, k := range [][2]string{{"", "a"}, {"k", ""}, {"k\xff", "a"}, {"k", "a\x00"}} {
		if _, err := s.Load(ctxFor(t), k[0], k[1]); !errors.Is(err, persistence.ErrInvalid) {
			t.Fatalf("Load(%q, %q) = %v, want ErrInvalid", k[0], k[1], err)
		}
	}
	// Limits are inclusive.
	edge := rec(long(persistence.MaxKindLen), long(persistence.MaxIDLen), 1, 1, "edge")
	mustSaveOK(t, s, edge)
	wantRecord(t, s, edge)
}

func testLargeStates(t *testing.T, s persistence.Store) {
	rng := rand.New(rand.NewPCG(1, 2))
	big := func() []byte {
		b := make([]byte, 1<<20)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	var recs []persistence.Record
	for sh := uint32(1); sh <= 3; sh++ {
		mustFence(t, s, sh, 1)
		recs = append(recs, persistence.Record{Kind: "big", ID: fmt.Sprint(sh), Shard: sh, Epoch: 1, Data: big()})
	}
	mustSaveOK(t, s, recs[0])
	wantRecord(t, s, recs[0])
	// Several 1 MiB records of different shards in one batch.
	recs[0].Data = big()
	mustSaveOK(t, s, recs...)
	for _, r := range recs {
		wantRecord(t, s, r)
	}
}

func testManyShardsOneBatch(t *testing.T, s persistence.Store) {
	// More shards and records than one etcd transaction may hold by default.
	const shards, perShard = 150, 3
	var recs []persistence.Record
	for sh := uint32(0); sh < shards; sh++ {
		if sh%10 != 7 {
			mustFence(t, s, sh, 2)
		}
		for i := 0; i < perShard; i++ {
			recs = append(recs, rec("many", fmt.Sprintf("%d-%d", sh, i), sh, 2, fmt.Sprintf("v%d-%d", sh, i)))
		}
	}
	out := mustSave(t, s, recs)
	for sh := uint32(0); sh < shards; sh++ {
		if sh%10 == 7 {
			wantFenced(t, out[sh], sh, 2, 0)
		} else if out[sh] != nil {
			t.Fatalf("shard %d: %v", sh, out[sh])
		}
	}
	for _, r := range recs {
		if r.Shard%10 == 7 {
			wantMissing(t, s, r.Kind, r.ID)
		} else {
			wantRecord(t, s, r)
		}
	}
}

func testConcurrentShards(t *testing.T, s persistence.Store) {
	const writers, rounds = 8, 20
	var wg sync.WaitGroup
	errc := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := ctxFor(t)
			sh := uint32(100 + w)
			if err := s.Fence(ctx, sh, 1); err != nil {
				errc <- err
				return
			}
			for i := range rounds {
				recs := []persistence.Record{
					rec("c", fmt.Sprintf("%d-a", w), sh, 1, fmt.Sprint(i)),
					rec("c", fmt.Sprintf("%d-b", w), sh, 1, fmt.Sprint(i)),
				}
				out, err := s.Save(ctx, recs)
				if err == nil {
					err = out[sh]
				}
				if err != nil {
					errc <- fmt.Errorf("writer %d round %d: %w", w, i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	for w := range writers {
		wantRecord(t, s, rec("c", fmt.Sprintf("%d-a", w), uint32(100+w), 1, fmt.Sprint(rounds-1)))
		wantRecord(t, s, rec("c", fmt.Sprintf("%d-b", w), uint32(100+w), 1, fmt.Sprint(rounds-1)))
	}
}

// value is what the racing tests write: the writer's epoch and a sequence
// number, so a Load tells who wrote it.
func value(epoch int64, seq int) []byte { return fmt.Appendf(nil, "%d:%d", epoch, seq) }

func parseValue(b []byte) (epoch int64, seq int, err error) {
	_, err = fmt.Sscanf(string(b), "%d:%d", &epoch, &seq)
	return epoch, seq, err
}

// testStaleAndCurrentWriters races an owner at epoch 1 with a new owner at
// epoch 2 on one shard while a reader watches. Once the new owner's Fence
// has returned, nothing the old owner writes may become visible: the value
// seen right after the Fence is the last epoch-1 value anyone ever sees.
func testStaleAndCurrentWriters(t *testing.T, s persistence.Store) {
	staleAndCurrentWriters(t, s, s)
}

// staleAndCurrentWriters runs the old owner on store old and the new owner
// and the reader on store s, which may be the same store or two stores over
// the same data (two processes).
func staleAndCurrentWriters(t *testing.T, old, s persistence.Store) {
	const shard = 9
	ctx := ctxFor(t)
	mustFence(t, old, shard, 1)
	keys := []string{"x", "y"}
	saveBoth := func(epoch int64, seq int) error {
		st := s
		if epoch == 1 {
			st = old
		}
		recs := make([]persistence.Record, len(keys))
		for i, k := range keys {
			recs[i] = persistence.Record{Kind: "race", ID: k, Shard: shard, Epoch: epoch, Data: value(epoch, seq)}
		}
		out, err := st.Save(ctx, recs)
		if err != nil {
			return err
		}
		return out[shard]
	}

	var (
		mu         sync.Mutex
		staleAcked int // highest seq the stale writer got acknowledged
		staleErr   error
		fenced     = make(chan struct{}) // closed when the new owner's Fence returned
		stop       = make(chan struct{})
		wg         sync.WaitGroup
	)
	// The old owner writes as fast as it can until told to stop, also after
	// it has been fenced (it does not know).
	wg.Add(1)
	go func() {
		defer wg.Done()
		for seq := 1; ; seq++ {
			select {
			case <-stop:
				return
			default:
			}
			err := saveBoth(1, seq)
			mu.Lock()
			switch {
			case err == nil:
				staleAcked = seq
			case errors.Is(err, persistence.ErrFenced):
			default:
				staleErr = err
			}
			mu.Unlock()
		}
	}()

	// A reader checks that, per key, the epoch never goes back and that
	// after the Fence no epoch-1 value newer than the first one seen is seen.
	readerErr := make(chan error, 1)
	firstAfterFence := make(chan map[string]int, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		readerErr <- func() error {
			lastEpoch := map[string]int64{}
			var after map[string]int // epoch-1 seq per key in the first Load after the Fence
			for {
				isFenced := false
				select {
				case <-fenced:
					isFenced = true
				default:
				}
				for _, k := range keys {
					r, err := s.Load(ctx, "race", k)
					if errors.Is(err, persistence.ErrNotFound) {
						continue
					}
					if err != nil {
						return err
					}
					e, seq, err := parseValue(r.Data)
					if err != nil {
						return err
					}
					if e != r.Epoch {
						return fmt.Errorf("%s: record epoch %d, data written under epoch %d", k, r.Epoch, e)
					}
					if e < lastEpoch[k] {
						return fmt.Errorf("%s: epoch went back from %d to %d", k, lastEpoch[k], e)
					}
					lastEpoch[k] = e
					if !isFenced || e != 1 {
						continue
					}
					if after == nil {
						after = map[string]int{}
					}
					if prev, ok := after[k]; !ok {
						after[k] = seq
					} else if seq != prev {
						return fmt.Errorf("%s: stale write %d became visible after the Fence (first seen %d)", k, seq, prev)
					}
				}
				select {
				case <-stop:
					firstAfterFence <- after
					return nil
				default:
				}
				runtime.Gosched()
			}
		}()
	}()

	// Let the old owner make progress, then fence it out.
	CheckFor(t, 30*time.Second, time.Millisecond, func() error {
		mu.Lock()
		defer mu.Unlock()
		if staleErr != nil {
			return nil
		}
		if staleAcked < 5 {
			return fmt.Errorf("stale writer acknowledged %d writes", staleAcked)
		}
		return nil
	})
	mustFence(t, s, shard, 2)
	mu.Lock()
	ackedAtFence := staleAcked
	mu.Unlock()
	close(fenced)
	snapshot := map[string][]byte{}
	for _, k := range keys {
		r, err := s.Load(ctx, "race", k)
		if err != nil {
			t.Fatal(err)
		}
		snapshot[k] = r.Data
	}
	// The stale owner keeps trying; let it fail a few more times while the
	// new owner writes.
	for seq := 1; seq <= 20; seq++ {
		if err := saveBoth(2, seq); err != nil {
			t.Fatalf("current writer seq %d: %v", seq, err)
		}
	}
	close(stop)
	wg.Wait()
	if err := <-readerErr; err != nil {
		t.Fatal(err)
	}
	after := <-firstAfterFence
	mu.Lock()
	defer mu.Unlock()
	if staleErr != nil {
		t.Fatalf("stale writer: unexpected error %v", staleErr)
	}
	// Acknowledged stale writes all happened before the Fence returned.
	if staleAcked > ackedAtFence+1 {
		// At most the one Save in flight while Fence ran may be acknowledged later.
		t.Fatalf("stale writer acknowledged seq %d after the Fence (had %d)", staleAcked, ackedAtFence)
	}
	for _, k := range keys {
		e, seq, err := parseValue(snapshot[k])
		if err != nil {
			t.Fatal(err)
		}
		if e != 1 || seq < ackedAtFence || seq > staleAcked {
			t.Fatalf("%s right after the Fence = %s; stale acks %d..%d", k, snapshot[k], ackedAtFence, staleAcked)
		}
		if v, ok := after[k]; ok && v != seq {
			t.Fatalf("%s: reader saw stale seq %d after the Fence, snapshot has %d", k, v, seq)
		}
		wantRecord(t, s, persistence.Record{Kind: "race", ID: k, Shard: shard, Epoch: 2, Data: value(2, 20)})
	}
}

// testFenceRacesSave runs rounds in which several writers at epoch e save
// while Fence(e+1) runs. What is visible right after Fence returns must be
// exactly what is visible once every writer has finished.
func testFenceRacesSave(t *testing.T, s persistence.Store) {
	const shard, writers, rounds = 11, 4, 15
	ctx := ctxFor(t)
	seed := Seed(t)
	rng := rand.New(rand.NewPCG(seed, 0))
	for e := int64(1); e <= rounds; e++ {
		mustFence(t, s, shard, e)
		start := make(chan struct{})
		var wg sync.WaitGroup
		errc := make(chan error, writers)
		acked := make([]bool, writers)
		for w := range writers {
			spin := rng.IntN(200)
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for range spin {
					runtime.Gosched()
				}
				out, err := s.Save(ctx, []persistence.Record{
					{Kind: "fr", ID: "k", Shard: shard, Epoch: e, Data: value(e, w)},
					{Kind: "fr", ID: fmt.Sprint("w", w), Shard: shard, Epoch: e, Data: value(e, w)},
				})
				if err == nil {
					err = out[shard]
				}
				switch {
				case err == nil:
					acked[w] = true
				case errors.Is(err, persistence.ErrFenced):
				default:
					errc <- err
				}
			}()
		}
		spin := rng.IntN(200)
		close(start)
		for range spin {
			runtime.Gosched()
		}
		mustFence(t, s, shard, e+1)
		snap, snapErr := s.Load(ctx, "fr", "k")
		wg.Wait()
		close(errc)
		for err := range errc {
			t.Fatalf("epoch %d: %v", e, err)
		}
		final, finalErr := s.Load(ctx, "fr", "k")
		if (snapErr == nil) != (finalErr == nil) || !bytes.Equal(snap.Data, final.Data) {
			t.Fatalf("epoch %d: right after Fence(%d): %s, %v; after the writers finished: %s, %v",
				e, e+1, short(snap.Data), snapErr, short(final.Data), finalErr)
		}
		for w := range writers {
			_, err := s.Load(ctx, "fr", fmt.Sprint("w", w))
			if acked[w] && err != nil {
				t.Fatalf("epoch %d: writer %d acknowledged but not visible: %v", e, w, err)
			}
		}
	}
}

// testCancelMidSave cancels Saves at random moments. Whatever the outcome,
// each shard's group is all there or not at all once the shard has been
// fenced past the Save's epoch.
func testCancelMidSave(t *testing.T, s persistence.Store) {
	const shards, perShard, rounds = 3, 20, 12
	seed := Seed(t)
	rng := rand.New(rand.NewPCG(seed, 1))
	epoch := int64(1)
	for sh := uint32(0); sh < shards; sh++ {
		mustFence(t, s, 200+sh, epoch)
	}
	for round := range rounds {
		var recs []persistence.Record
		for sh := uint32(0); sh < shards; sh++ {
			for i := range perShard {
				recs = append(recs, persistence.Record{
					Kind: "cancel", ID: fmt.Sprintf("%d-%d", sh, i), Shard: 200 + sh, Epoch: epoch,
					Data: value(epoch, round),
				})
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
			t.Fatalf("round %d: Save returned a batch error %v; a cancellation is a per-shard outcome", round, err)
		}
		checkOutcomeKeys(t, recs, out)
		// Shut out anything still in flight, then look.
		epoch++
		for sh := uint32(0); sh < shards; sh++ {
			mustFence(t, s, 200+sh, epoch)
		}
		for sh := uint32(0); sh < shards; sh++ {
			if errors.Is(out[200+sh], persistence.ErrFenced) {
				t.Fatalf("round %d shard %d: %v", round, 200+sh, out[200+sh])
			}
			newCount := 0
			for i := range perShard {
				r, err := s.Load(t.Context(), "cancel", fmt.Sprintf("%d-%d", sh, i))
				if err == nil && bytes.Equal(r.Data, value(epoch-1, round)) {
					newCount++
				} else if err != nil && !errors.Is(err, persistence.ErrNotFound) {
					t.Fatal(err)
				}
			}
			if newCount != 0 && newCount != perShard {
				t.Fatalf("round %d shard %d: %d of %d records written (outcome %v)", round, 200+sh, newCount, perShard, out[200+sh])
			}
			if out[200+sh] == nil && newCount != perShard {
				t.Fatalf("round %d shard %d: acknowledged but not visible", round, 200+sh)
			}
		}
	}
}

func testCanceledContext(t *testing.T, s persistence.Store) {
	mustFence(t, s, 1, 1)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := s.Fence(ctx, 1, 2); err == nil {
		t.Fatal("Fence with a canceled context succeeded")
	}
	out, err := s.Save(ctx, []persistence.Record{rec("k", "a", 1, 1, "x")})
	if err == nil && out[1] == nil {
		t.Fatal("Save with a canceled context succeeded")
	}
	if err == nil && errors.Is(out[1], persistence.ErrFenced) {
		t.Fatalf("Save with a canceled context: %v, want an unknown-outcome error", out[1])
	}
	if _, err := s.Load(ctx, "k", "a"); err == nil || errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("Load with a canceled context = %v, want a context error", err)
	}
	// Fence(1, 2) failed, so epoch 1 still writes.
	mustSaveOK(t, s, rec("k", "a", 1, 1, "x"))
}

func testClosed(t *testing.T, s persistence.Store) {
	mustFence(t, s, 1, 1)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	ctx := ctxFor(t)
	if err := s.Fence(ctx, 1, 2); !errors.Is(err, persistence.ErrClosed) {
		t.Fatalf("Fence after Close = %v", err)
	}
	if _, err := s.Load(ctx, "k", "a"); !errors.Is(err, persistence.ErrClosed) {
		t.Fatalf("Load after Close = %v", err)
	}
	if out, err := s.Save(ctx, []persistence.Record{rec("k", "a", 1, 1, "x")}); !errors.Is(err, persistence.ErrClosed) {
		t.Fatalf("Save after Close = %v, %v", out, err)
	}
}

func testReopen(t *testing.T, open Opener) {
	s := open(t)
	mustFence(t, s, 1, 3)
	mustFence(t, s, 2, 8)
	big := bytes.Repeat([]byte{0xab}, 1<<20)
	recs := []persistence.Record{
		rec("k", "a", 1, 3, "a"),
		rec("k", "b", 1, 3, ""),
		{Kind: "k", ID: "big", Shard: 2, Epoch: 8, Data: big},
	}
	mustSaveOK(t, s, recs...)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2 := open(t)
	defer s2.Close()
	for _, r := range recs {
		wantRecord(t, s2, r)
	}
	// Fences survived too.
	wantFenced(t, s2.Fence(ctxFor(t), 2, 7), 2, 7, 8)
	out := mustSave(t, s2, []persistence.Record{rec("k", "a", 1, 2, "old")})
	wantFenced(t, out[1], 1, 2, 3)
	mustSaveOK(t, s2, rec("k", "a", 1, 3, "a2"))
	wantRecord(t, s2, rec("k", "a", 1, 3, "a2"))
}
