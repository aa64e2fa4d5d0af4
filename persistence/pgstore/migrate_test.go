package pgstore

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/ordo-actors/ordo/persistence"
	"github.com/ordo-actors/ordo/persistence/pgstore/pgtest"
)

// A database at schema version 1 (no journal, no reminder index) is
// upgraded by Open and keeps its fences and records.
func TestMigrateFromVersion1(t *testing.T) {
	url, schema := pgtest.URL(t), pgtest.Schema(t)
	ctx := t.Context()
	s, _ := openFromVersion(t, url, schema, 1,
		"INSERT INTO %s VALUES (7, 3)", "fences",
		"INSERT INTO %s VALUES ('k', 'a', 7, 3, 'old')", "entities")
	r, err := s.Load(ctx, "k", "a")
	if err != nil || string(r.Data) != "old" || r.Epoch != 3 || r.Due != 0 {
		t.Fatalf("Load = %+v, %v", r, err)
	}
	if err := s.Fence(ctx, 7, 2); err == nil {
		t.Fatal("the fence did not survive the upgrade")
	}
	out, err := s.Save(ctx, []persistence.Record{{Kind: "k", ID: "a", Shard: 7, Epoch: 3, Data: []byte("new"),
		Events: []persistence.Event{{Seq: 1, Data: []byte("e1")}}, Due: 5}})
	if err != nil || out[7] != nil {
		t.Fatalf("Save with events after the upgrade: %v, %v", out, err)
	}
	got, next, err := s.ReadJournal(ctx, "k", "", 10)
	if err != nil || len(got) != 1 || string(got[0].Data) != "e1" || next == "" {
		t.Fatalf("ReadJournal = %v, %q, %v", got, next, err)
	}
	if due, err := s.Due(ctx, 7, 10, 10); err != nil || len(due) != 1 || due[0].ID != "a" || due[0].Due != 5 {
		t.Fatalf("Due after the upgrade = %v, %v", due, err)
	}
	// Opening again is a no-op.
	s2, err := Open(ctx, Config{URL: url, Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	s2.Close()
}

// A journal written at schema version 3, one event per row, is read after
// the upgrade to rows of several events, and continues in them: its
// events are read, followed and deleted alike, whichever rows hold them.
func TestMigrateFromVersion3KeepsJournal(t *testing.T) {
	url, schema := pgtest.URL(t), pgtest.Schema(t)
	ctx := t.Context()
	s, q := openFromVersion(t, url, schema, 3,
		"INSERT INTO %s VALUES (7, 3, 3)", "fences",
		"INSERT INTO %s VALUES ('k', 'a', 7, 3, 'old', 0)", "entities",
		"INSERT INTO %s VALUES ('k', 'a', 1, 7, 1, 'e1'), ('k', 'a', 2, 7, 2, 'e2'), ('k', 'a', 3, 7, 3, 'e3')", "events")
	var rows, events int
	counts := func() {
		t.Helper()
		if err := s.pool.QueryRow(ctx, "SELECT count(*), coalesce(sum(n - skip), 0) FROM "+q("events")).Scan(&rows, &events); err != nil {
			t.Fatal(err)
		}
	}
	if last, err := s.LastSeq(ctx, "k", "a"); err != nil || last != 3 {
		t.Fatalf("LastSeq after the upgrade = %d, %v", last, err)
	}
	save := func(r persistence.Record) {
		t.Helper()
		if out, err := s.Save(ctx, []persistence.Record{r}); err != nil || out[7] != nil {
			t.Fatalf("Save: %v, %v", out, err)
		}
	}
	var four []persistence.Event
	for seq := uint64(4); seq <= 7; seq++ {
		four = append(four, persistence.Event{Seq: seq, Data: fmt.Appendf(nil, "e%d", seq)})
	}
	save(persistence.Record{Kind: "k", ID: "a", Shard: 7, Epoch: 3, Data: []byte("new"), Events: four})
	counts()
	if rows != 4 || events != 7 {
		t.Fatalf("after a Save of 4 events: %d rows of %d events, want 4 rows (3 old, 1 new) of 7", rows, events)
	}
	want := func(from uint64, limit int, seqs string) {
		t.Helper()
		got, err := s.ReadEvents(ctx, "k", "a", from, limit)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		for _, e := range got {
			if string(e.Data) != fmt.Sprintf("e%d", e.Seq) {
				t.Fatalf("event %d holds %q", e.Seq, e.Data)
			}
			fmt.Fprint(&b, e.Seq, " ")
		}
		if b.String() != seqs {
			t.Fatalf("ReadEvents(%d, %d) = %q, want %q", from, limit, b.String(), seqs)
		}
	}
	want(0, 100, "1 2 3 4 5 6 7 ")
	want(2, 3, "2 3 4 ")
	want(5, 1, "5 ")
	want(6, 100, "6 7 ")
	want(8, 100, "")
	// A delete inside the new row keeps its events from the bound on; the
	// old rows go.
	save(persistence.Record{Kind: "k", ID: "a", Shard: 7, Epoch: 3, Data: []byte("snap"), DeleteEventsBefore: 6})
	counts()
	if rows != 1 || events != 2 {
		t.Fatalf("after deleting below 6: %d rows of %d events, want 1 row of 2", rows, events)
	}
	want(0, 100, "6 7 ")
	got, next, err := s.ReadJournal(ctx, "k", "", 1)
	if err != nil || len(got) != 1 || got[0].Seq != 6 {
		t.Fatalf("ReadJournal = %v, %v", got, err)
	}
	if got, _, err = s.ReadJournal(ctx, "k", next, 10); err != nil || len(got) != 1 || got[0].Seq != 7 {
		t.Fatalf("ReadJournal after 6 = %v, %v", got, err)
	}
	if last, err := s.LastSeq(ctx, "k", "a"); err != nil || last != 7 {
		t.Fatalf("LastSeq = %d, %v", last, err)
	}
}

// A journal written at schema version 4 gets its end on its entity's row
// (jend, counting every event of its last row), and continues from there.
func TestMigrateFromVersion4SetsJournalEnds(t *testing.T) {
	url, schema := pgtest.URL(t), pgtest.Schema(t)
	ctx := t.Context()
	three := packed(t, "e1", "e2", "e3")
	s, q := openFromVersion(t, url, schema, 4,
		"INSERT INTO %s VALUES (7, 3, 1)", "fences",
		"INSERT INTO %s VALUES ('k', 'a', 7, 3, 'old', 0), ('k', 'b', 7, 3, 'plain', 0)", "entities",
		"INSERT INTO %s VALUES ('k', 'a', 1, 7, 1, '\\x"+fmt.Sprintf("%x", three)+"', 3, 1)", "events")
	ends := map[string]int64{}
	rows, err := s.pool.Query(ctx, "SELECT id, jend FROM "+q("entities"))
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		var end int64
		if err := rows.Scan(&id, &end); err != nil {
			t.Fatal(err)
		}
		ends[id] = end
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(ends) != "map[a:3 b:0]" {
		t.Fatalf("journal ends after the upgrade = %v, want map[a:3 b:0]", ends)
	}
	rec := persistence.Record{Kind: "k", ID: "a", Shard: 7, Epoch: 3, Data: []byte("new"),
		Events: []persistence.Event{{Seq: 4, Data: []byte("e4")}}}
	if out, err := s.Save(ctx, []persistence.Record{rec}); err != nil || out[7] != nil {
		t.Fatalf("Save of event 4: %v, %v", out, err)
	}
	if out, err := s.Save(ctx, []persistence.Record{rec}); err != nil || !errors.Is(out[7], persistence.ErrSequence) {
		t.Fatalf("Save of event 4 again: %v, %v; want ErrSequence", out, err)
	}
	got, err := s.ReadEvents(ctx, "k", "a", 0, 10)
	if err != nil || len(got) != 3 || fmt.Sprintf("%s %s", got[0].Data, got[2].Data) != "e2 e4" {
		t.Fatalf("ReadEvents = %v, %v; want e2, e3, e4", got, err)
	}
}

// packed is the data of an event row holding datas (rows.go).
func packed(t *testing.T, datas ...string) []byte {
	t.Helper()
	evs := make([]persistence.Event, len(datas))
	for i, d := range datas {
		evs[i] = persistence.Event{Seq: uint64(i + 1), Data: []byte(d)}
	}
	data, n := packEvents(evs)
	if n != len(datas) {
		t.Fatalf("packEvents packed %d events of %d", n, len(datas))
	}
	return data
}

// openFromVersion makes schema a database at schema version v, with the
// rows the statements insert (pairs of a format and the table it names),
// opens it, and checks that Open brought it to SchemaVersion. It returns
// the store (closed with t) and a quoter of the schema's table names.
func openFromVersion(t *testing.T, url, schema string, v int, inserts ...string) (*Store, func(string) string) {
	t.Helper()
	ctx := t.Context()
	q := func(name string) string { return pgx.Identifier{schema, name}.Sanitize() }
	stmts := []string{
		"CREATE SCHEMA " + pgx.Identifier{schema}.Sanitize(),
		"CREATE TABLE " + q("schema_version") + " (id int PRIMARY KEY CHECK (id = 1), version int NOT NULL)",
		fmt.Sprintf("INSERT INTO %s VALUES (1, %d)", q("schema_version"), v),
	}
	stmts = append(stmts, migrations(schema, false)[:v]...)
	for i := 0; i+1 < len(inserts); i += 2 {
		stmts = append(stmts, fmt.Sprintf(inserts[i], q(inserts[i+1])))
	}
	for _, stmt := range stmts {
		if err := pgtest.Exec(ctx, url, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	s, err := Open(ctx, Config{URL: url, Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	var version int
	if err := s.pool.QueryRow(ctx, "SELECT version FROM "+q("schema_version")).Scan(&version); err != nil || version != SchemaVersion {
		t.Fatalf("version %d, %v; want %d", version, err, SchemaVersion)
	}
	return s, q
}
