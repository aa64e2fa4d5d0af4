package pgstore

import (
	"context"

	"github.com/ordo-actors/ordo/persistence"
)

// LoadManySQL is loadManySQL, for the plan test.
var LoadManySQL = loadManySQL

// SaveSQL returns the Save statements, plain and journal, with their
// check of creations, and the journal statement with its check of the
// journals too, for the plan test.
func SaveSQL(schema string) (plain, journal, checked string) {
	s := newStore(nil, schema)
	return s.saveSQL[withCreates], s.journalSaveSQL[withCreates], s.journalSaveSQL[withCreates|checkJournals]
}

// BackendPID returns the process ID of the server process serving one of
// s's connections (the only one, with MaxConns 1).
func BackendPID(ctx context.Context, s *Store) (int, error) {
	var pid int
	err := s.pool.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid)
	return pid, err
}

// Exec runs sql on one of s's connections.
func Exec(ctx context.Context, s *Store, sql string) error {
	_, err := s.pool.Exec(ctx, sql)
	return err
}

// Plans returns how many times the prepared statements of one of s's
// connections (the only one, with MaxConns 1) were planned for their
// arguments (custom plans) and how many times they ran with the plan they
// keep (generic plans).
func Plans(ctx context.Context, s *Store) (custom, generic int64, err error) {
	err = s.pool.QueryRow(ctx, `SELECT coalesce(sum(custom_plans), 0)::bigint, coalesce(sum(generic_plans), 0)::bigint
FROM pg_prepared_statements`).Scan(&custom, &generic)
	return custom, generic, err
}

// SaveJournal runs the journal statement for recs once, with its check of
// the journals against the statement's snapshot (checkJournals) or
// without, for the benchmark that compares the two.
func SaveJournal(ctx context.Context, s *Store, recs []persistence.Record, checked bool) (map[uint32]error, error) {
	b := newJournalBatch(recs)
	if checked {
		b.variant |= checkJournals
	}
	outcome := make(map[uint32]error, len(b.want))
	return outcome, s.runJournal(ctx, b, outcome)
}
