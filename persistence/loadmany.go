package persistence

import (
	"context"
	"fmt"
)

// Key names one entity's record.
type Key struct {
	Kind string
	ID   string
}

// BatchLoader is implemented by Stores that load many records in one round
// trip. The runtime uses it, when the Store has it, to coalesce the loads
// of entities activating at the same time; a Store without it is loaded
// one record at a time.
//
// Implementations are safe for concurrent use by multiple goroutines.
type BatchLoader interface {
	// LoadMany returns the records of the keys that were ever saved, by
	// key; a key absent from the result was never saved (what Load reports
	// as ErrNotFound). Every record is read as Load would read it, at one
	// point in time or at several: the result is not a snapshot across
	// keys. Keys must be valid and distinct (ErrInvalid otherwise). The
	// Data of each record is never nil and belongs to the caller. A non-nil
	// error fails the whole call.
	LoadMany(ctx context.Context, keys []Key) (map[Key]Record, error)
}

// ValidateKeys checks the keys of a LoadMany call: each valid
// (ValidateKey), none twice.
func ValidateKeys(keys []Key) error {
	seen := make(map[Key]struct{}, len(keys))
	for i, k := range keys {
		if err := ValidateKey(k.Kind, k.ID); err != nil {
			return fmt.Errorf("key %d: %w", i, err)
		}
		if _, dup := seen[k]; dup {
			return fmt.Errorf("key %d: %w: %s/%s appears twice", i, ErrInvalid, k.Kind, k.ID)
		}
		seen[k] = struct{}{}
	}
	return nil
}
