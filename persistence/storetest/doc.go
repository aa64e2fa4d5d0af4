// Package storetest is the conformance suite every persistence.Store driver
// passes. A driver's tests call Run (or RunWithReopen, when the driver can
// open a second Store over the same data) with a function that opens a store
// over a fresh, empty data set:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) persistence.Store { return memory.New() })
//	}
//
// The suite checks the contract of persistence.Store: fences only rise;
// records of a shard are written only under the shard's current fence, and
// never partly; a Fence that has returned shuts out every later write under a
// lower epoch, even one already in flight; batches mixing valid and fenced
// shards; bad input; large records; cancellation; reopening; Close. For a
// store that is a persistence.ReminderIndex, it checks the index too: due
// time queries (order, bound, limit), entries moved, cleared and set again
// with their records, refused Saves that leave the index unchanged, and
// many shards in one batch.
//
// For a Store that also implements persistence.Journal it checks the
// journal (the cases named Journal*; skipped for other Stores): appends and
// reads; stale-epoch appends refused and invisible; gapless sequences, with
// out-of-sequence groups refused whole (ErrSequence), under concurrent
// stale and current owners and under confused writers sharing an epoch;
// events atomic with records; deletes that keep the last event; histories
// of 10,000 events read in pages; the feed of a kind (exactly once from
// stored offsets, per-entity order, per-shard commit order, nothing passed
// over while Saves of several shards commit concurrently); bad input;
// cancellation; reopening; Close.
//
// Randomised tests log their seed; set ORDO_SEED to replay one.
//
// The suite is meant for tests only and may be run in parallel with other
// tests: every subtest uses its own store.
package storetest
