package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/ordo-actors/ordo/persistence"
)

var _ persistence.BatchLoader = (*Store)(nil)

// loadManySQL reads the records of the keys $1 (kinds) and $2 (ids), one
// statement for them all. Each key is looked up in the primary key on its
// own (LATERAL … LIMIT 1, which the planner cannot flatten into a join): as
// a join, a plan made while the table was small (a new store; statistics
// not yet gathered) hashes the whole table on every read, and PostgreSQL
// keeps that plan once the table has grown.
func loadManySQL(schema string) string {
	return `SELECT e.kind, e.id, e.shard, e.epoch, e.data, e.due FROM unnest($1::text[], $2::text[]) AS k(kind, id)
CROSS JOIN LATERAL (SELECT * FROM ` + pgx.Identifier{schema, "entities"}.Sanitize() + ` AS x WHERE x.kind = k.kind AND x.id = k.id LIMIT 1) AS e`
}

// LoadMany implements persistence.BatchLoader with one statement (one
// snapshot) for every key.
func (s *Store) LoadMany(ctx context.Context, keys []persistence.Key) (map[persistence.Key]persistence.Record, error) {
	if err := persistence.ValidateKeys(keys); err != nil {
		return nil, err
	}
	if s.closed.Load() {
		return nil, persistence.ErrClosed
	}
	kinds, ids := make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		kinds[i], ids[i] = k.Kind, k.ID
	}
	rows, err := s.pool.Query(ctx, s.loadManySQL, texts(kinds), texts(ids))
	if err != nil {
		return nil, fmt.Errorf("pgstore: load %d records: %w", len(keys), err)
	}
	defer rows.Close()
	out := make(map[persistence.Key]persistence.Record, len(keys))
	for rows.Next() {
		var (
			r     persistence.Record
			shard int64
		)
		if err := rows.Scan(&r.Kind, &r.ID, &shard, &r.Epoch, &r.Data, &r.Due); err != nil {
			return nil, fmt.Errorf("pgstore: load %d records: %w", len(keys), err)
		}
		r.Shard = uint32(shard)
		if r.Data == nil {
			r.Data = []byte{}
		}
		out[persistence.Key{Kind: r.Kind, ID: r.ID}] = r
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgstore: load %d records: %w", len(keys), err)
	}
	return out, nil
}
