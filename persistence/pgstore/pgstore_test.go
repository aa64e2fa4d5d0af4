package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/ordo-actors/ordo/ordotls"
	"github.com/ordo-actors/ordo/persistence"
	pgstore "github.com/ordo-actors/ordo/persistence/pgstore"
	"github.com/ordo-actors/ordo/persistence/pgstore/pgtest"
	"github.com/ordo-actors/ordo/persistence/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func open(t testing.TB, schema string) *pgstore.Store {
	t.Helper()
	s, err := pgstore.Open(t.Context(), pgstore.Config{URL: pgtest.URL(t), Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	pgtest.URL(t)
	storetest.RunWithReopen(t, func(t *testing.T) storetest.Opener {
		schema := pgtest.Schema(t)
		return func(t *testing.T) persistence.Store { return open(t, schema) }
	})
}

func TestConfig(t *testing.T) {
	bad := []pgstore.Config{{}, {URL: "postgres://x", MaxConns: -1}, {URL: "postgres://x", Schema: "a\x00"},
		{URL: "postgres://x", BackendHeap: pgstore.MaxBackendHeap + 1}}
	for _, c := range bad {
		if err := c.Validate(); !errors.Is(err, persistence.ErrInvalidConfig) {
			t.Fatalf("%+v: %v, want ErrInvalidConfig", c, err)
		}
		if _, err := pgstore.Open(t.Context(), c); !errors.Is(err, persistence.ErrInvalidConfig) {
			t.Fatalf("Open(%+v) succeeded", c)
		}
	}
	c := pgstore.DefaultConfig()
	c.URL = "postgres://x"
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestConcurrentOpens(t *testing.T) {
	url, schema := pgtest.URL(t), pgtest.Schema(t)
	const n = 8
	var wg sync.WaitGroup
	errc := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := pgstore.Open(t.Context(), pgstore.Config{URL: url, Schema: schema, MaxConns: 2})
			if err != nil {
				errc <- err
				return
			}
			errc <- s.Fence(t.Context(), 1, 1)
			s.Close()
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		if err != nil {
			t.Fatal(err)
		}
	}
	// And once more on the existing schema.
	s := open(t, schema)
	if err := s.Fence(t.Context(), 1, 1); err != nil {
		t.Fatal(err)
	}
}

func TestNewerSchemaRefused(t *testing.T) {
	url, schema := pgtest.URL(t), pgtest.Schema(t)
	open(t, schema).Close()
	if err := pgtest.Exec(t.Context(), url,
		fmt.Sprintf("UPDATE %s SET version = $1", pgx.Identifier{schema, "schema_version"}.Sanitize()),
		pgstore.SchemaVersion+1); err != nil {
		t.Fatal(err)
	}
	_, err := pgstore.Open(t.Context(), pgstore.Config{URL: url, Schema: schema})
	if !errors.Is(err, pgstore.ErrSchemaTooNew) {
		t.Fatalf("Open over a newer schema: %v", err)
	}
}

func TestUnreachableServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	_, err := pgstore.Open(ctx, pgstore.Config{URL: "postgres://nobody:x@127.0.0.1:1/none?sslmode=disable&connect_timeout=2"})
	if err == nil {
		t.Fatal("Open against a closed port succeeded")
	}
}

// The URL's TLS parameters reach pgx, and no error shows the password:
// sslrootcert is read at Open, and with sslmode=verify-full against a
// server whose certificate that CA did not sign (or that has no TLS), no
// connection is made.
func TestOpenHonoursSSLParams(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	const secret = "secret-pw-7f3a"
	_, err := pgstore.Open(ctx, pgstore.Config{URL: "postgres://u:" + secret + "@127.0.0.1:1/db?sslmode=verify-full&sslrootcert=/nonexistent/root.pem"})
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/root.pem") || strings.Contains(err.Error(), secret) {
		t.Fatalf("Open with an unreadable sslrootcert: %v", err)
	}
	url := pgtest.URL(t) // skips without a server
	ca, err := ordotls.NewCA("not-the-server-ca")
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(t.TempDir(), "root.pem")
	if err := os.WriteFile(root, ca.CAPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("sslmode", "verify-full")
	q.Set("sslrootcert", root)
	u.RawQuery = q.Encode()
	_, err = pgstore.Open(ctx, pgstore.Config{URL: u.String(), Schema: pgtest.Schema(t)})
	if err == nil {
		t.Fatal("Open verified the server against a CA that did not sign its certificate")
	}
	if pw, ok := u.User.Password(); ok && (strings.Contains(err.Error(), ":"+pw+"@") || strings.Contains(err.Error(), "password="+pw)) {
		t.Fatalf("the error shows the password: %v", err)
	}
	t.Logf("refused as expected: %v", err)
}

// A Fence waits for a Save holding the fence row's lock, and a Save that
// starts after a Fence has taken the row sees the new epoch.
func TestFenceWaitsForLockedSave(t *testing.T) {
	url, schema := pgtest.URL(t), pgtest.Schema(t)
	s := open(t, schema)
	if err := s.Fence(t.Context(), 1, 1); err != nil {
		t.Fatal(err)
	}
	// Hold the row as a Save does, in a transaction of our own.
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	tx, err := conn.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	fences := pgx.Identifier{schema, "fences"}.Sanitize()
	if _, err := tx.Exec(t.Context(), "SELECT epoch FROM "+fences+" WHERE shard = 1 FOR SHARE"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Fence(t.Context(), 1, 2) }()
	// The Fence is blocked on the lock: wait until PostgreSQL says so.
	waitForLockWait(t, url, schema, "INSERT INTO %fences%")
	select {
	case err := <-done:
		t.Fatalf("Fence returned %v while the row was locked", err)
	default:
	}
	if err := tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	out, err := s.Save(t.Context(), []persistence.Record{{Kind: "k", ID: "a", Shard: 1, Epoch: 1, Data: []byte("x")}})
	if err != nil || !errors.Is(out[1], persistence.ErrFenced) {
		t.Fatalf("stale Save after the Fence: %v, %v", out, err)
	}
}

// TestServerRestart restarts the local PostgreSQL 15 cluster while saves
// run. It runs only with ORDO_PG_RESTART=1, as it disturbs every other user
// of the server.
func TestServerRestart(t *testing.T) {
	if os.Getenv("ORDO_PG_RESTART") != "1" {
		t.Skip("restarts the server; run with ORDO_PG_RESTART=1 (uses pg_ctlcluster 15 main restart)")
	}
	s := open(t, pgtest.Schema(t))
	const shards, perShard = 3, 10
	for sh := uint32(0); sh < shards; sh++ {
		if err := s.Fence(t.Context(), sh, 1); err != nil {
			t.Fatal(err)
		}
	}
	batch := func(round int) []persistence.Record {
		var recs []persistence.Record
		for sh := uint32(0); sh < shards; sh++ {
			for i := range perShard {
				recs = append(recs, persistence.Record{Kind: "r", ID: fmt.Sprint(sh, "-", i), Shard: sh, Epoch: 1, Data: []byte(fmt.Sprint(round))})
			}
		}
		return recs
	}
	var (
		mu         sync.Mutex
		lastAcked  = -1
		errs, oks  int // after the restart began
		restarting bool
		stop       = make(chan struct{})
		done       = make(chan error, 1)
	)
	stopWriter := sync.OnceFunc(func() { close(stop) })
	defer stopWriter()
	go func() {
		for round := 0; ; round++ {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			out, err := s.Save(ctx, batch(round))
			cancel()
			if err != nil {
				done <- err
				return
			}
			mu.Lock()
			allOK := true
			for sh, e := range out {
				if errors.Is(e, persistence.ErrFenced) {
					mu.Unlock()
					done <- fmt.Errorf("round %d shard %d: %w", round, sh, e)
					return
				}
				allOK = allOK && e == nil
			}
			if allOK {
				lastAcked = round
			}
			if restarting {
				if allOK {
					oks++
				} else {
					errs++
				}
			}
			mu.Unlock()
		}
	}()
	storetest.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error {
		mu.Lock()
		defer mu.Unlock()
		if lastAcked < 3 {
			return errors.New("no saves yet")
		}
		restarting = true
		return nil
	})
	if out, err := exec.CommandContext(t.Context(), "pg_ctlcluster", "15", "main", "restart").CombinedOutput(); err != nil {
		t.Fatalf("restart: %v: %s", err, out)
	}
	// The store recovers: saves succeed again, after at least one failed.
	storetest.CheckFor(t, 60*time.Second, 10*time.Millisecond, func() error {
		mu.Lock()
		defer mu.Unlock()
		if errs == 0 || oks < 3 {
			return fmt.Errorf("after restart: %d failed, %d succeeded", errs, oks)
		}
		return nil
	})
	stopWriter()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Nothing partial: every shard's records carry one round, no older
	// than the last acknowledged one.
	for sh := uint32(0); sh < shards; sh++ {
		var first string
		for i := range perShard {
			r, err := s.Load(t.Context(), "r", fmt.Sprint(sh, "-", i))
			if err != nil {
				t.Fatal(err)
			}
			if i == 0 {
				first = string(r.Data)
				var round int
				fmt.Sscan(first, &round)
				if round < lastAcked {
					t.Fatalf("shard %d at round %d, last acknowledged %d", sh, round, lastAcked)
				}
			} else if string(r.Data) != first {
				t.Fatalf("shard %d partly written: record 0 has round %s, record %d has %s", sh, first, i, r.Data)
			}
		}
	}
}

// A Save that reaches a fence row while a Fence holds it waits, and then
// judges by the Fence's outcome: the committed new epoch rejects it, a
// rolled-back Fence lets it through. This is the READ COMMITTED case the
// FOR SHARE lock exists for.
func TestSaveWaitsForUncommittedFence(t *testing.T) {
	for _, commit := range []bool{true, false} {
		t.Run(fmt.Sprintf("commit=%v", commit), func(t *testing.T) {
			url, schema := pgtest.URL(t), pgtest.Schema(t)
			s := open(t, schema)
			if err := s.Fence(t.Context(), 1, 1); err != nil {
				t.Fatal(err)
			}
			if err := s.Fence(t.Context(), 2, 1); err != nil {
				t.Fatal(err)
			}
			conn, err := pgx.Connect(t.Context(), url)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(context.Background())
			tx, err := conn.Begin(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(context.Background())
			fences := pgx.Identifier{schema, "fences"}.Sanitize()
			if _, err := tx.Exec(t.Context(), "UPDATE "+fences+" SET epoch = 2 WHERE shard = 1"); err != nil {
				t.Fatal(err)
			}
			type result struct {
				out map[uint32]error
				err error
			}
			done := make(chan result, 1)
			go func() {
				out, err := s.Save(t.Context(), []persistence.Record{
					{Kind: "k", ID: "a", Shard: 1, Epoch: 1, Data: []byte("a")},
					{Kind: "k", ID: "b", Shard: 2, Epoch: 1, Data: []byte("b")},
				})
				done <- result{out, err}
			}()
			waitForBlockedSave(t, url, schema)
			if commit {
				err = tx.Commit(t.Context())
			} else {
				err = tx.Rollback(t.Context())
			}
			if err != nil {
				t.Fatal(err)
			}
			r := <-done
			if r.err != nil || r.out[2] != nil {
				t.Fatalf("Save: %v, %v", r.out, r.err)
			}
			_, loadErr := s.Load(t.Context(), "k", "a")
			if commit {
				var fe *persistence.FencedError
				if !errors.As(r.out[1], &fe) || fe.Want != 2 {
					t.Fatalf("shard 1 after the Fence committed: %v", r.out[1])
				}
				if !errors.Is(loadErr, persistence.ErrNotFound) {
					t.Fatalf("fenced record visible: %v", loadErr)
				}
			} else if r.out[1] != nil || loadErr != nil {
				t.Fatalf("shard 1 after the Fence rolled back: %v, load %v", r.out[1], loadErr)
			}
		})
	}
}

// A Save that numbered its events and is still running when a later Save
// of another shard commits must not be passed over by a reader that read
// the later one: with one sequence for every event (a bigserial), the
// reader's offset would move past the first Save's numbers before they
// are visible. The first Save is held inside its statement by an
// uncommitted row of a transaction of the test's own that holds the key
// of its events' row (the Seq of its first event).
func TestFeedSurvivesOutOfOrderCommits(t *testing.T) {
	url, schema, s := openFenced(t, 2)
	ctx := t.Context()
	ev := func(seq uint64, data string) []persistence.Event {
		return []persistence.Event{{Seq: seq, Data: []byte(data)}}
	}
	save := func(recs ...persistence.Record) error {
		out, err := s.Save(ctx, recs)
		if err != nil {
			return err
		}
		for sh, e := range out {
			if e != nil {
				return fmt.Errorf("shard %d: %w", sh, e)
			}
		}
		return nil
	}
	if err := save(
		persistence.Record{Kind: "k", ID: "a", Shard: 1, Epoch: 1, Data: []byte{}, Events: ev(1, "a1")},
		persistence.Record{Kind: "k", ID: "b", Shard: 2, Epoch: 1, Data: []byte{}, Events: ev(1, "b1")},
	); err != nil {
		t.Fatal(err)
	}
	feed := func(after persistence.Offset) ([]string, persistence.Offset) {
		t.Helper()
		got, next, err := s.ReadJournal(ctx, "k", after, 100)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, e := range got {
			ids = append(ids, fmt.Sprint(e.ID, e.Seq))
		}
		return ids, next
	}
	setup, off := feed("")
	if fmt.Sprint(setup) != "[a1 b1]" {
		t.Fatalf("feed = %v", setup)
	}

	events := pgx.Identifier{schema, "events"}.Sanitize()
	tx := holding(t, url, "INSERT INTO "+events+" (kind, id, seq, shard, pos, data) VALUES ('k', 'a', 2, 1, 1000000, '')")
	first := make(chan error, 1)
	go func() {
		first <- save(persistence.Record{Kind: "k", ID: "a", Shard: 1, Epoch: 1, Data: []byte{},
			Events: []persistence.Event{{Seq: 2, Data: []byte("a2")}, {Seq: 3, Data: []byte("a3")}}})
	}()
	waitForBlockedSave(t, url, schema)
	// A later Save of shard 2 commits first, and the reader reads it.
	if err := save(persistence.Record{Kind: "k", ID: "b", Shard: 2, Epoch: 1, Data: []byte{}, Events: ev(2, "b2")}); err != nil {
		t.Fatal(err)
	}
	got, off := feed(off)
	if fmt.Sprint(got) != "[b2]" {
		t.Fatalf("feed while the first Save runs = %v, want [b2]", got)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if got, _ = feed(off); fmt.Sprint(got) != "[a2 a3]" {
		t.Fatalf("feed after the first Save committed = %v, want [a2 a3]", got)
	}
}

// TestStaleSnapshotCannotReuseSeqs runs the one order of events in which a
// Save's snapshot alone would let two writers under the same epoch write a
// Seq twice: Save B takes its snapshot and waits for a lock; meanwhile A1
// appends the events B is about to append, and A2 appends more and deletes
// A1's. B's snapshot still shows the journal ending where it ended (or the
// entity not stored at all), and no stored row holds B's Seqs any more. B
// must be refused (ErrSequence) and the journal keep A2's events alone.
//
// B waits on shard 1's fence row, which a test transaction holds; its
// batch also writes shard 2, the journal's shard, whose fence row it locks
// after shard 1's (in shard order), so A1 and A2 run freely meanwhile.
func TestStaleSnapshotCannotReuseSeqs(t *testing.T) {
	for _, base := range []uint64{0, 1} {
		name := map[uint64]string{0: "new entity", 1: "stored journal"}[base]
		t.Run(name, func(t *testing.T) { testStaleSnapshot(t, base) })
	}
}

// testStaleSnapshot is TestStaleSnapshotCannotReuseSeqs on a journal of
// base events (none: the entity is not stored when B's snapshot is taken).
func testStaleSnapshot(t *testing.T, base uint64) {
	url, schema, s := openFenced(t, 2)
	ctx := t.Context()
	rec := func(data string, del uint64, seqs ...uint64) persistence.Record {
		r := persistence.Record{Kind: "k", ID: "j", Shard: 2, Epoch: 1, Data: []byte(data), DeleteEventsBefore: del}
		for _, seq := range seqs {
			r.Events = append(r.Events, persistence.Event{Seq: seq, Data: []byte(fmt.Sprint(data, seq))})
		}
		return r
	}
	mustSave := func(recs ...persistence.Record) {
		t.Helper()
		out, err := s.Save(ctx, recs)
		if err != nil {
			t.Fatal(err)
		}
		for sh, e := range out {
			if e != nil {
				t.Fatalf("shard %d: %v", sh, e)
			}
		}
	}
	if base > 0 {
		mustSave(rec("start", 0, base))
	}

	fences := pgx.Identifier{schema, "fences"}.Sanitize()
	tx := holding(t, url, "SELECT 1 FROM "+fences+" WHERE shard = 1 FOR NO KEY UPDATE")
	type result struct {
		out map[uint32]error
		err error
	}
	stale := make(chan result, 1)
	go func() {
		out, err := s.Save(ctx, []persistence.Record{
			{Kind: "k", ID: "other", Shard: 1, Epoch: 1, Data: []byte("other")},
			rec("B", 0, base+1),
		})
		stale <- result{out, err}
	}()
	waitForBlockedSave(t, url, schema)
	mustSave(rec("A1", 0, base+1, base+2))
	mustSave(rec("A2", base+3, base+3))
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	res := <-stale
	if res.err != nil {
		t.Fatal(res.err)
	}
	if err := res.out[1]; err != nil {
		t.Fatalf("shard 1, untouched by the other writers: %v", err)
	}
	if err := res.out[2]; !errors.Is(err, persistence.ErrSequence) {
		t.Fatalf("shard 2: %v, want ErrSequence", err)
	}
	evs, err := s.ReadEvents(ctx, "k", "j", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range evs {
		got = append(got, fmt.Sprintf("%d:%s", e.Seq, e.Data))
	}
	if want := fmt.Sprintf("[%d:A2%d]", base+3, base+3); fmt.Sprint(got) != want {
		t.Fatalf("journal = %v, want %v", got, want)
	}
	r, err := s.Load(ctx, "k", "j")
	if err != nil {
		t.Fatal(err)
	}
	if string(r.Data) != "A2" {
		t.Fatalf("record = %q, want A2's", r.Data)
	}
}

// holding runs stmt in a transaction it leaves open, holding the locks
// stmt took until the test rolls it back (or ends).
func holding(t *testing.T, url, stmt string) pgx.Tx {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	tx, err := conn.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	if _, err := tx.Exec(t.Context(), stmt); err != nil {
		t.Fatal(err)
	}
	return tx
}

// waitForBlockedSave waits until a Save statement on schema waits for a
// lock.
func waitForBlockedSave(t *testing.T, url, schema string) {
	t.Helper()
	waitForLockWait(t, url, schema, "WITH req AS%")
}

// waitForLockWait waits until a statement on schema whose text is LIKE
// like waits for a lock. It watches from a connection of its own: inside
// a transaction, pg_stat_activity is a snapshot taken at its first read,
// so a first poll before the statement waits would hide it for good.
func waitForLockWait(t *testing.T, url, schema, like string) {
	t.Helper()
	watch, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close(context.Background())
	storetest.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error {
		var n int
		err := watch.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity
WHERE wait_event_type = 'Lock' AND query LIKE $2 AND strpos(query, $1) > 0`, schema, like).Scan(&n)
		if err == nil && n == 0 {
			err = fmt.Errorf("no statement like %q is waiting for a lock", like)
		}
		return err
	})
}

// openFenced opens a store in a schema of its own, with shards 1 to n
// fenced at epoch 1, and returns the database URL and the schema too.
func openFenced(t *testing.T, n uint32) (url, schema string, s *pgstore.Store) {
	t.Helper()
	url, schema = pgtest.URL(t), pgtest.Schema(t)
	s = open(t, schema)
	for sh := uint32(1); sh <= n; sh++ {
		if err := s.Fence(t.Context(), sh, 1); err != nil {
			t.Fatal(err)
		}
	}
	return url, schema, s
}

// A record's new version stays on its row's page (a heap-only update, with
// no new index entry) even when the records were written one after
// another onto full pages: inserts leave room on every page of entities.
func TestUpdatesStayOnTheirPage(t *testing.T) {
	url, schema, s := openFenced(t, 1)
	ctx := t.Context()
	rec := func(i, v int) persistence.Record {
		return persistence.Record{Kind: "k", ID: fmt.Sprintf("r%03d", i), Shard: 1, Epoch: 1,
			Data: []byte(strings.Repeat(fmt.Sprint(v), 150))}
	}
	// One record per Save, so that the rows are inserted in order, until
	// they fill the first page and begin a second.
	page := func(id string) int {
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.WithoutCancel(ctx))
		var p int
		q := "SELECT (ctid::text::point)[0]::int FROM " + pgx.Identifier{schema, "entities"}.Sanitize() + " WHERE kind = 'k' AND id = $1"
		if err := conn.QueryRow(ctx, q, id).Scan(&p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	n := 0
	for ; n < 200; n++ {
		if out, err := s.Save(ctx, []persistence.Record{rec(n, 1)}); err != nil || out[1] != nil {
			t.Fatalf("Save %d: %v, %v", n, out, err)
		}
		if page(rec(n, 1).ID) > 0 {
			break
		}
	}
	if n < 2 || n == 200 {
		t.Fatalf("%d records filled the first page", n)
	}
	for i := range n {
		if out, err := s.Save(ctx, []persistence.Record{rec(i, 2)}); err != nil || out[1] != nil {
			t.Fatalf("update %d: %v, %v", i, out, err)
		}
		if p := page(rec(i, 2).ID); p != 0 {
			t.Fatalf("update %d of the %d records of the first page moved its row to page %d", i, n, p)
		}
	}
}
