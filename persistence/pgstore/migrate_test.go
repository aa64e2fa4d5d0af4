package pgstore

import (
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
	q := func(name string) string { return pgx.Identifier{schema, name}.Sanitize() }
	for _, stmt := range []string{
		"CREATE SCHEMA " + pgx.Identifier{schema}.Sanitize(),
		"CREATE TABLE " + q("schema_version") + " (id int PRIMARY KEY CHECK (id = 1), version int NOT NULL)",
		"INSERT INTO " + q("schema_version") + " VALUES (1, 1)",
		migrations(schema)[0],
		"INSERT INTO " + q("fences") + " VALUES (7, 3)",
		"INSERT INTO " + q("entities") + " VALUES ('k', 'a', 7, 3, 'old')",
	} {
		if err := pgtest.Exec(ctx, url, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	s, err := Open(ctx, Config{URL: url, Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var version int
	if err := s.pool.QueryRow(ctx, "SELECT version FROM "+q("schema_version")).Scan(&version); err != nil || version != SchemaVersion {
		t.Fatalf("version %d, %v; want %d", version, err, SchemaVersion)
	}
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
