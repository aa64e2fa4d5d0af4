package persistence

import (
	"context"
	"fmt"
)

// DueEntry is one entry of a ReminderIndex: a record and the due time it
// is indexed under.
type DueEntry struct {
	Kind string
	ID   string
	Due  int64 // Unix nanoseconds
}

// ReminderIndex is implemented by Stores that index records by their Due
// time, per shard, so that a shard's owner finds the entities whose
// reminders are due without loading any other record. The runtime needs
// it for durable reminders: over a Store without it, setting a reminder
// fails.
//
// The index is part of the records: every Save that writes a record with
// a Due > 0 indexes it under (shard, Due), and a Save that writes it with
// another Due moves or removes that entry, in the same atomic step as the
// record, under the same fence. A Save refused by fencing changes nothing
// of the index either.
//
// Implementations are safe for concurrent use by multiple goroutines.
type ReminderIndex interface {
	// Due returns up to limit entries of shard whose due time is in
	// [1, upTo], earliest first (entries due at the same time in an order
	// of the driver's choosing). upTo and limit must be positive
	// (ErrInvalid otherwise). It reads the index as of one point in time.
	//
	// A driver that cannot read a record's previous Due inside its write
	// (etcd) removes the old entry at the Save's Record.PrevDue; when a
	// writer passed a wrong PrevDue, an entry whose due time is not the
	// record's may stay behind. Such stale entries are returned like the
	// others: a caller checks an entry against the record itself (the
	// runtime does), and a later Save of the record whose PrevDue is the
	// stale entry's due time removes it.
	Due(ctx context.Context, shard uint32, upTo int64, limit int) ([]DueEntry, error)
}

// ValidateDueQuery checks the arguments of a ReminderIndex.Due call.
func ValidateDueQuery(upTo int64, limit int) error {
	switch {
	case upTo <= 0:
		return fmt.Errorf("%w: due time bound %d is not positive", ErrInvalid, upTo)
	case limit <= 0:
		return fmt.Errorf("%w: limit %d is not positive", ErrInvalid, limit)
	}
	return nil
}
