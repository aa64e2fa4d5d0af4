package memory

import (
	"bytes"
	"context"

	"github.com/ordo-actors/ordo/persistence"
)

var _ persistence.BatchLoader = (*Store)(nil)

// LoadMany implements persistence.BatchLoader: every key under one lock
// acquisition, so the result is a snapshot.
func (s *Store) LoadMany(ctx context.Context, keys []persistence.Key) (map[persistence.Key]persistence.Record, error) {
	if err := persistence.ValidateKeys(keys); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, persistence.ErrClosed
	}
	out := make(map[persistence.Key]persistence.Record, len(keys))
	for _, k := range keys {
		if r, ok := s.records[key{k.Kind, k.ID}]; ok {
			r.Data = bytes.Clone(r.Data)
			out[k] = r
		}
	}
	return out, nil
}
