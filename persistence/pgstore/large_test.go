package pgstore

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/ordo-actors/ordo/persistence"
	"github.com/ordo-actors/ordo/persistence/pgstore/pgtest"
)

// defaultTarget is PostgreSQL's toast_tuple_target (TOAST_TUPLE_TARGET on
// 8 KiB pages): above it, a row's large values are compressed, and moved
// out of the row while it is still above it.
const defaultTarget = 2032

// largeValue reports how the entities row of (kind, id) in schema holds
// its data: its size there (compressed or not), its compression ("" when
// not compressed), and how many live rows the entities table's TOAST
// table holds.
func largeValue(t *testing.T, s *Store, schema, kind, id string) (size int, compression string, toasted int) {
	t.Helper()
	ctx := t.Context()
	entities := pgx.Identifier{schema, "entities"}.Sanitize()
	err := s.pool.QueryRow(ctx, `SELECT pg_column_size(data), coalesce(pg_column_compression(data), '') FROM `+entities+
		` WHERE kind = $1 AND id = $2`, kind, id).Scan(&size, &compression)
	if err != nil {
		t.Fatal(err)
	}
	var toast string
	if err := s.pool.QueryRow(ctx, `SELECT reltoastrelid::regclass::text FROM pg_class WHERE oid = $1::regclass`, entities).Scan(&toast); err != nil {
		t.Fatal(err)
	}
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM `+toast).Scan(&toasted); err != nil {
		t.Fatal(err)
	}
	return size, compression, toasted
}

// wantCompression is the compression new large values get on the server
// of s: lz4 where it has it.
func wantCompression(t *testing.T, s *Store) string {
	t.Helper()
	tx, err := s.pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(t.Context()) }()
	lz4, err := hasLZ4(t.Context(), tx)
	if err != nil {
		t.Fatal(err)
	}
	if lz4 {
		return "lz4"
	}
	return "pglz"
}

// A record the size of a dedup window is stored compressed and in its
// row, where PostgreSQL's defaults would move it to the TOAST table, and
// reads back whole; so is an event row that large.
func TestLargeValuesStayInTheRow(t *testing.T) {
	url, schema := pgtest.URL(t), pgtest.Schema(t)
	ctx := t.Context()
	s, err := Open(ctx, Config{URL: url, Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.Fence(ctx, 7, 1); err != nil {
		t.Fatal(err)
	}
	data := DedupWindow(1)
	event := DedupWindow(2)
	out, err := s.Save(ctx, []persistence.Record{{Kind: "k", ID: "a", Shard: 7, Epoch: 1, Data: data,
		Events: []persistence.Event{{Seq: 1, Data: event}}}})
	if err != nil || out[7] != nil {
		t.Fatalf("Save = %v, %v", out, err)
	}
	size, compression, toasted := largeValue(t, s, schema, "k", "a")
	if size <= defaultTarget || size >= largeTarget || size >= len(data) {
		t.Fatalf("the record takes %d bytes in its row, data %d: want it compressed, between %d and %d",
			size, len(data), defaultTarget, largeTarget)
	}
	if want := wantCompression(t, s); compression != want || toasted != 0 {
		t.Fatalf("record compressed with %q, %d values in the TOAST table; want %q, none", compression, toasted, want)
	}
	var evCompression string
	if err := s.pool.QueryRow(ctx, `SELECT coalesce(pg_column_compression(data), '') FROM `+pgx.Identifier{schema, "events"}.Sanitize()).Scan(&evCompression); err != nil {
		t.Fatal(err)
	}
	if want := wantCompression(t, s); evCompression != want {
		t.Fatalf("event row compressed with %q, want %q", evCompression, want)
	}
	r, err := s.Load(ctx, "k", "a")
	if err != nil || !bytes.Equal(r.Data, data) {
		t.Fatalf("Load = %d bytes, %v; want the %d saved", len(r.Data), err, len(data))
	}
	got, _, err := s.ReadJournal(ctx, "k", "", 10)
	if err != nil || len(got) != 1 || !bytes.Equal(got[0].Data, event) {
		t.Fatalf("ReadJournal = %d events, %v", len(got), err)
	}
}

// A large value written at schema version 6, compressed with pglz and
// moved to the TOAST table, reads the same after the upgrade; the
// record's next write is kept in the row with the new compression.
func TestMigrateFromVersion6KeepsLargeValues(t *testing.T) {
	url, schema := pgtest.URL(t), pgtest.Schema(t)
	ctx := t.Context()
	old := DedupWindow(3)
	s, _ := openFromVersion(t, url, schema, 6,
		"INSERT INTO %s VALUES (7, 3, 0)", "fences",
		fmt.Sprintf("INSERT INTO %%s VALUES ('k', 'a', 7, 3, '\\x%x', 0, 0)", old), "entities")
	if _, compression, toasted := largeValue(t, s, schema, "k", "a"); compression != "pglz" || toasted == 0 {
		t.Fatalf("the value written at version 6 is compressed with %q, %d values in the TOAST table; want pglz, moved there",
			compression, toasted)
	}
	r, err := s.Load(ctx, "k", "a")
	if err != nil || !bytes.Equal(r.Data, old) {
		t.Fatalf("Load after the upgrade = %d bytes, %v; want the %d written before", len(r.Data), err, len(old))
	}
	data := DedupWindow(4)
	out, err := s.Save(ctx, []persistence.Record{{Kind: "k", ID: "a", Shard: 7, Epoch: 3, Data: data}})
	if err != nil || out[7] != nil {
		t.Fatalf("Save = %v, %v", out, err)
	}
	if _, compression, toasted := largeValue(t, s, schema, "k", "a"); compression != wantCompression(t, s) || toasted != 0 {
		t.Fatalf("the rewritten value is compressed with %q, %d values in the TOAST table; want %q, none",
			compression, toasted, wantCompression(t, s))
	}
	if r, err := s.Load(ctx, "k", "a"); err != nil || !bytes.Equal(r.Data, data) {
		t.Fatalf("Load = %d bytes, %v", len(r.Data), err)
	}
}
