// Package check checks a bank history (package history) against the bank's
// guarantees. It is pure logic: it needs the recorded ops, the bank's shape
// (number of accounts, initial balance), the final balances read after the
// run and the resolved outcomes of transfers the clients left unknown.
//
// # Invariants
//
// Check reports six invariants, each pass, fail, unknown or skipped:
//
//   - history: every op is well formed, transfer IDs are unique, every
//     unknown transfer was resolved, ok ops name existing accounts and the
//     final balances cover exactly the bank's accounts;
//   - conservation: the final balances sum to Accounts × InitialBalance;
//   - exactly_once: every account's final balance equals the initial balance
//     plus the credits minus the debits of the transfers whose final outcome
//     is ok, so no acknowledged transfer is lost or applied twice;
//   - non_negative: no final balance and no balance read is negative;
//   - linearizable: per account, the debits, credits, rejections and reads
//     fit one sequential order consistent with their real-time intervals
//     (checked with porcupine);
//   - statements: every account's statement (the money events of its
//     journal, Input.Statements) opens once with the initial balance, its
//     running balances add up, never go negative and end at the account's
//     final balance, and every transfer with a final outcome appears as
//     that outcome says: an ok one exactly once as a debit of its source
//     and once as a credit of its destination, a rejected one not at all,
//     or (compensated) as one debit and one refund of its source; a
//     transfer the history does not hold (made by hand) is whole: one
//     debit, and one credit of another account or one refund.
//
// # Unknown outcomes
//
// A transfer whose client gave up is recorded as unknown. Before checking,
// `bank check` re-submits each of them with the same ID until the bank gives
// a definite answer (Resolve does the loop; Unresolved lists them) and passes
// the answers in Input.Resolved. Because IDs make transfers idempotent, that
// answer is the transfer's one and only outcome. A resolved-ok transfer may
// have taken effect at any time after its call, so for linearizability its
// interval is open-ended: it ends after every recorded op. A resolved
// rejection has no effect and, its reason being unknown, adds no constraint.
//
// # Linearizability model
//
// Each account is checked on its own (a porcupine partition) against a
// register holding its balance, starting at InitialBalance. A transfer is a
// saga, so it contributes two independent ops with the transfer's interval:
// a debit of From (legal only when the balance covers the amount, because
// balances never go negative) and a credit of To. A transfer rejected for
// insufficient funds (history.IsInsufficientFunds) contributes a rejection
// on From, legal only when the balance is below the amount at its
// linearization point; other rejections contribute nothing. Ok reads must
// return the balance; unknown reads are dropped.
//
// When the statements are given, each account's journal proposes a
// witness first: its debits and credits in the order the account applied
// them, each read and rejection placed between them where the balance fits
// it and its interval allows. The witness is checked as a linearization
// (every op legal in turn, none placed before an op that returned before
// it was called), so one that passes proves the account linearizable
// whatever the journal says; one that does not proves nothing, and the
// search decides. A busy account's search can take exponentially long
// (many transfers overlapping, their effects late in their intervals);
// its witness costs a pass over its ops.
//
// Accounts are checked in parallel, one porcupine search each, so a verdict
// names the accounts that fail. Open-ended ops make the search exponential,
// so an account with resolved-unknown transfers is first searched for a
// narrowed witness: each open op's effect is placed either while its client
// waited or after the run (or left open), decided in call order on short
// sub-histories. A narrowed history that porcupine accepts proves the
// account linearizable, because narrowing only removes candidate orders;
// when no witness is found the exact open-ended search decides. A search
// that exceeds Input.Timeout gives status unknown, distinct from an illegal
// history. When accounts are illegal and Input.VisualizationPath is set, the
// porcupine HTML visualisation of those accounts is written there.
//
// Check is safe for concurrent use; it does not modify its input.
package check
