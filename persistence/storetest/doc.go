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
// Randomised tests log their seed; set ORDO_SEED to replay one.
//
// The suite is meant for tests only and may be run in parallel with other
// tests: every subtest uses its own store.
package storetest
