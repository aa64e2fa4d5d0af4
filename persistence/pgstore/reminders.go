package pgstore

import (
	"context"
	"fmt"

	"github.com/ordo-actors/ordo/persistence"
)

var _ persistence.ReminderIndex = (*Store)(nil)

// dueSQL reads a shard's earliest due records: $1 shard, $2 bound, $3
// limit. The partial index entities_due (shard, due) WHERE due > 0 serves
// it; Save keeps the due column with the record, in the same statement.
func dueSQL(entities string) string {
	return `SELECT kind, id, due FROM ` + entities + ` WHERE shard = $1 AND due > 0 AND due <= $2 ORDER BY due LIMIT $3`
}

// Due implements persistence.ReminderIndex with one indexed query. The
// due time is a column of the record's row, so the index is never stale:
// Record.PrevDue is not needed.
func (s *Store) Due(ctx context.Context, shard uint32, upTo int64, limit int) ([]persistence.DueEntry, error) {
	if err := persistence.ValidateDueQuery(upTo, limit); err != nil {
		return nil, err
	}
	if s.closed.Load() {
		return nil, persistence.ErrClosed
	}
	rows, err := s.pool.Query(ctx, s.dueSQL, int64(shard), upTo, limit)
	if err != nil {
		return nil, fmt.Errorf("pgstore: reminder index of shard %d: %w", shard, err)
	}
	defer rows.Close()
	var out []persistence.DueEntry
	for rows.Next() {
		var e persistence.DueEntry
		if err := rows.Scan(&e.Kind, &e.ID, &e.Due); err != nil {
			return nil, fmt.Errorf("pgstore: reminder index of shard %d: %w", shard, err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgstore: reminder index of shard %d: %w", shard, err)
	}
	return out, nil
}
