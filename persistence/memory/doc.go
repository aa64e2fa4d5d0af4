// Package memory is an in-memory persistence.Store with exactly the fencing
// semantics of the contract, plus fault hooks (delayed, failing, blocked and
// size-limited saves) for tests. It keeps nothing across processes: use it
// for unit tests only. It implements persistence.Journal too: events are
// numbered for the feed, over all kinds, in the order their Saves commit.
// It is a persistence.BatchLoader and a persistence.ReminderIndex (an
// ordered tree per shard).
//
// Store is safe for concurrent use; its fault hooks may be changed while
// other goroutines call it, and a change applies to Saves that start after it.
package memory
