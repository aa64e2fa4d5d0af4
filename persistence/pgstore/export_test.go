package pgstore

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"

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

// DedupWindow returns data of the size and make of an entity's dedup
// record at the default window: 128 replies, each a request ID, a reply
// (its type and a balance) and a fingerprint, about 9.5 KiB that
// compress to about 2.5 KiB. seed varies the IDs, balances and
// fingerprints.
func DedupWindow(seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	steps := [...]string{"debit", "forget-from", "credit", "forget-to"}
	var b []byte
	for i := range 128 {
		id := fmt.Sprintf("lab-18eed59af50d4b48-%d:%s", seed*1000+uint64(i/2), steps[i%4])
		b = append(b, 0x22, byte(len(id)+30))
		b = append(b, 0x0a, byte(len(id)))
		b = append(b, id...)
		b = append(b, 0x12, 0x18, 0x12, 0x16, 0x0a, 0x14)
		b = append(b, "ordo.bank.v1.Balance"...)
		b = append(b, 0x12, 0x03, 0x08, byte(r.IntN(128)), byte(r.IntN(16)))
		b = binary.LittleEndian.AppendUint64(append(b, 0x19), r.Uint64())
	}
	return b
}
