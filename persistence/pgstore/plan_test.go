package pgstore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/ordo-actors/ordo/persistence"
	"github.com/ordo-actors/ordo/persistence/pgstore"
	"github.com/ordo-actors/ordo/persistence/pgstore/pgtest"
	"github.com/stretchr/testify/require"
)

// LoadMany looks every key up in the primary key, with the plan
// PostgreSQL keeps for a prepared statement (the generic plan) made while
// the table was empty and without statistics, as in a new store: a plan
// that joins the keys to the table hashes the whole table on every read
// once the table has grown. The test makes the generic plan on the empty
// table, fills the table, and checks the plan of a read of two keys.
func TestLoadManyReadsByKeyWithPlanOfEmptyTable(t *testing.T) {
	url, schema := pgtest.URL(t), pgtest.Schema(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cfg := pgstore.DefaultConfig()
	cfg.URL, cfg.Schema = url, schema
	s, err := pgstore.Open(ctx, cfg)
	require.NoError(t, err)
	defer s.Close()

	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `SET plan_cache_mode = force_generic_plan`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `PREPARE load_many(text[], text[]) AS `+pgstore.LoadManySQL(schema))
	require.NoError(t, err)
	explain := func() string {
		var b strings.Builder
		rows, err := conn.Query(ctx, `EXPLAIN (ANALYZE, BUFFERS, TIMING OFF, SUMMARY OFF) EXECUTE load_many('{k,k}', '{x-1,missing}')`,
			pgx.QueryExecModeSimpleProtocol)
		require.NoError(t, err)
		for rows.Next() {
			var line string
			require.NoError(t, rows.Scan(&line))
			b.WriteString(line + "\n")
		}
		require.NoError(t, rows.Err())
		return b.String()
	}
	// The generic plan, made on the empty table, is checked at once and
	// again once the table has grown: a catalog invalidation in between
	// (an autovacuum's analyze, another session's DDL) makes PostgreSQL
	// plan again, with the table's real size.
	check := func(plan string) {
		require.NotContains(t, plan, "Seq Scan", "a read of two keys scans the table:\n%s", plan)
		require.Contains(t, plan, "entities_pkey", "a read of two keys does not use the primary key:\n%s", plan)
	}
	check(explain())

	// Fill the table through the store, far beyond a few pages.
	const n = 5000
	require.NoError(t, s.Fence(ctx, 1, 1))
	recs := make([]persistence.Record, 0, 250)
	for i := range n {
		recs = append(recs, persistence.Record{Kind: "k", ID: fmt.Sprintf("x-%d", i), Shard: 1, Epoch: 1, Data: make([]byte, 100)})
		if len(recs) == cap(recs) {
			outcome, err := s.Save(ctx, recs)
			require.NoError(t, err)
			require.NoError(t, outcome[1])
			recs = recs[:0]
		}
	}

	check(explain())

	got, err := s.LoadMany(ctx, []persistence.Key{{Kind: "k", ID: "x-1"}, {Kind: "k", ID: "missing"}, {Kind: "k", ID: fmt.Sprint("x-", n-1)}})
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Contains(t, got, persistence.Key{Kind: "k", ID: "x-1"})
	require.Contains(t, got, persistence.Key{Kind: "k", ID: fmt.Sprint("x-", n-1)})
}

// A Save's check of the records written as new (Record.Create) looks each
// up in the primary key, in both statements, with the generic plan made
// on the empty table: a join of the batch to the table would hash the
// whole table on every Save once it has grown.
func TestSaveChecksCreationsByKeyWithPlanOfEmptyTable(t *testing.T) {
	url, schema := pgtest.URL(t), pgtest.Schema(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cfg := pgstore.DefaultConfig()
	cfg.URL, cfg.Schema = url, schema
	s, err := pgstore.Open(ctx, cfg)
	require.NoError(t, err)
	defer s.Close()

	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `SET plan_cache_mode = force_generic_plan`)
	require.NoError(t, err)
	plain, journal, checked := pgstore.SaveSQL(schema)
	_, err = conn.Exec(ctx, `PREPARE save(bigint[], bigint[], text[], text[], bigint[], bigint[], bytea[], bigint[], bool[]) AS `+plain)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `PREPARE save_journal(bigint[], bigint[], text[], text[], bigint[], bigint[], bytea[], bigint[], bigint[], bigint[],
		bigint[], bigint[], bytea[], bigint[], bool[], bigint[]) AS `+journal)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `PREPARE save_checked(bigint[], bigint[], text[], text[], bigint[], bigint[], bytea[], bigint[], bigint[], bigint[],
		bigint[], bigint[], bytea[], bigint[], bool[], bigint[]) AS `+checked)
	require.NoError(t, err)
	explain := func(stmt string) string {
		var b strings.Builder
		rows, err := conn.Query(ctx, `EXPLAIN `+stmt, pgx.QueryExecModeSimpleProtocol)
		require.NoError(t, err)
		for rows.Next() {
			var line string
			require.NoError(t, rows.Scan(&line))
			b.WriteString(line + "\n")
		}
		require.NoError(t, rows.Err())
		return b.String()
	}
	const (
		savePlain   = `EXECUTE save('{1}', '{1}', '{k,k}', '{x-1,new}', '{1,1}', '{1,1}', '{"",""}', '{0,0}', '{t,t}')`
		saveJournal = `EXECUTE save_journal('{1}', '{1}', '{k,k}', '{x-1,new}', '{1,1}', '{1,1}', '{"",""}', '{1,1}', '{1,1}', '{0,0}',
			'{1,2}', '{1,1}', '{"",""}', '{0,0}', '{t,t}', '{1,1}')`
		saveChecked = `EXECUTE save_checked('{1}', '{1}', '{k,k}', '{x-1,new}', '{1,1}', '{1,1}', '{"",""}', '{1,1}', '{1,1}', '{0,0}',
			'{1,2}', '{1,1}', '{"",""}', '{0,0}', '{t,t}', '{1,1}')`
	)
	// The generic plans, made on the empty table, are checked at once and
	// again once the table has grown (see the test above).
	check := func() {
		for _, stmt := range []string{savePlain, saveJournal, saveChecked} {
			plan := explain(stmt)
			require.NotContains(t, plan, "Seq Scan on entities", "a Save of two records scans the table:\n%s", plan)
		}
	}
	check()

	const n = 5000
	require.NoError(t, s.Fence(ctx, 1, 1))
	recs := make([]persistence.Record, 0, 250)
	for i := range n {
		recs = append(recs, persistence.Record{Kind: "k", ID: fmt.Sprintf("x-%d", i), Shard: 1, Epoch: 1, Data: make([]byte, 100)})
		if len(recs) == cap(recs) {
			outcome, err := s.Save(ctx, recs)
			require.NoError(t, err)
			require.NoError(t, outcome[1])
			recs = recs[:0]
		}
	}
	check()
}

// A connection's first Saves decide, by default, whether PostgreSQL plans
// every later Save with its arguments (see genericPlans): after Saves of
// one record each, it kept planning each one. The store's connections
// keep one plan per statement: Saves of one record, then of sixteen,
// plain and journal, are never planned for their arguments.
func TestStatementsKeepOnePlan(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cfg := pgstore.DefaultConfig()
	cfg.URL, cfg.Schema, cfg.MaxConns = pgtest.URL(t), pgtest.Schema(t), 1
	s, err := pgstore.Open(ctx, cfg)
	require.NoError(t, err)
	defer s.Close()
	for sh := range uint32(16) {
		require.NoError(t, s.Fence(ctx, sh, 1))
	}
	var seqs [16]uint64 // per journal
	save := func(n int, events bool) {
		t.Helper()
		recs := make([]persistence.Record, n)
		for i := range recs {
			recs[i] = persistence.Record{Kind: "plan", ID: fmt.Sprintf("e%d", i), Shard: uint32(i), Epoch: 1, Data: []byte("x")}
			if events {
				seqs[i]++
				recs[i].ID = fmt.Sprintf("j%d", i)
				recs[i].Events = []persistence.Event{{Seq: seqs[i], Data: []byte("e")}}
			}
		}
		out, err := s.Save(ctx, recs)
		require.NoError(t, err)
		for sh, err := range out {
			require.NoError(t, err, "shard %d", sh)
		}
	}
	const runs = 10
	for _, events := range []bool{false, true} {
		for _, n := range []int{1, 16} {
			for range runs {
				save(n, events)
			}
		}
	}
	custom, generic, err := pgstore.Plans(ctx, s)
	require.NoError(t, err)
	t.Logf("custom plans %d, generic %d", custom, generic)
	require.GreaterOrEqual(t, generic, int64(4*runs), "the Saves ran without the plans they keep")
	require.Zero(t, custom, "statements were planned for their arguments")
}
