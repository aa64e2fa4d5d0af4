// Package history defines the bank's client history format: one JSON object
// per line, one line per client operation, as recorded by `bank load` and
// `bank chaos` and read back by `bank check`.
//
// A transfer line looks like
//
//	{"client":3,"op":"transfer","id":"t-42","from":"acct-000001","to":"acct-000007","amount":5,"call":1700000000000000000,"ret":1700000000001000000,"outcome":"ok"}
//
// and a balance read like
//
//	{"client":1,"op":"balance","account":"acct-000001","call":1700000000000000000,"ret":1700000000000500000,"outcome":"ok","balance":995}
//
// Call and ret are Unix nanoseconds taken by the client just before it sent
// the request and just after it got the answer (or gave up). Outcome is one
// of "ok", "rejected" (transfers only: no effect at all) or "unknown" (the
// client gave up without a definite answer; ret is when it gave up). Error
// carries the server's or client's error text for non-ok outcomes; a
// rejection caused by insufficient funds must contain InsufficientFunds.
// Fields that do not apply to an op are omitted, and a reader rejects them.
//
// Accounts are named by AccountName: "acct-" and six decimal digits.
// Amounts are int64 minor units and strictly positive.
//
// Writer appends ops as JSON lines and is safe for concurrent use; Reader,
// ReadAll and ReadFile decode and validate them, reporting the line number of
// the first malformed line in a *LineError.
package history
