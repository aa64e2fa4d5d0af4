// Package workload drives the bank (package ledger) the way `bank load`,
// `bank demo` and `bank bench` do: a fixed number of clients issue
// transfers (and optionally balance reads) back to back for a bounded time,
// with account choice skewed by a Zipf distribution, and every operation is
// recorded in the history format of package history.
//
// It also holds the steps around a run that those commands share: opening
// the accounts (Open), reading every balance (Balances), resolving the
// transfers a run left unknown (Resolve) and checking the whole (Verify).
//
// Everything here is seeded: the same Config.Seed gives the same sequence of
// operations per client (timing aside). Transfer IDs are "t-<nonce>-<seed>-
// <client>-<n>", so two runs against the same cluster never share an ID.
//
// All functions are safe for concurrent use; Run calls its Record function
// from many goroutines at once.
package workload
