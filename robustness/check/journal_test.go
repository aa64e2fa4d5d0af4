package check_test

import (
	"strings"
	"testing"

	"github.com/ordo-actors/ordo/robustness/check"
	"github.com/ordo-actors/ordo/robustness/history"
)

// statement builds an account's statement from its money events (type,
// transfer ID, amount), opening with the initial balance.
func statement(events ...check.Entry) []check.Entry {
	out := []check.Entry{{Seq: 1, Type: check.EntryOpened, Amount: initial, Balance: initial}}
	b := int64(initial)
	for i, e := range events {
		b += e.Amount
		e.Seq, e.Balance = uint64(i+2), b
		out = append(out, e)
	}
	return out
}

func debitOf(id string, amount int64) check.Entry {
	return check.Entry{Type: check.EntryDebit, TransferID: id, Amount: -amount}
}

func creditOf(id string, amount int64) check.Entry {
	return check.Entry{Type: check.EntryCredit, TransferID: id, Amount: amount}
}

// linearizable returns the linearizability invariant of a check of ops
// with statements.
func linearizable(t *testing.T, ops []history.Op, final map[string]int64, st map[string][]check.Entry) check.Invariant {
	t.Helper()
	r := check.Check(check.Input{Ops: ops, Accounts: 2, InitialBalance: initial, Final: final, Statements: st})
	inv, ok := r.Invariant(check.InvLinearizable)
	if !ok {
		t.Fatalf("no linearizability invariant in %s", r)
	}
	return inv
}

// The journal's order decides a linearizable account without a search:
// credits applied late in their intervals, reads and a rejection placed
// between them.
func TestJournalOrderWitnesses(t *testing.T) {
	ops := []history.Op{
		xfer(0, "t1", 1, 0, 30, 10, 100, history.OK, ""),
		xfer(1, "t2", 1, 0, 20, 15, 90, history.OK, ""),
		read(2, 0, 20, 30, 100),                                                  // neither credit applied yet
		xfer(3, "t3", 0, 1, 120, 40, 50, history.Rejected, "insufficient funds"), // 100 < 120
		read(2, 0, 95, 99, 120),                                                  // t2's credit applied
		read(2, 0, 110, 120, 150),
	}
	st := map[string][]check.Entry{
		acct(0): statement(creditOf("t2", 20), creditOf("t1", 30)),
		acct(1): statement(debitOf("t1", 30), debitOf("t2", 20)),
	}
	inv := linearizable(t, ops, finals(150, 50), st)
	if inv.Status != check.StatusPass {
		t.Fatalf("linearizable = %s: %s", inv.Status, inv.Details)
	}
	if !strings.Contains(inv.Details, "2 accounts decided by their journal's order") {
		t.Fatalf("details %q: want both accounts decided by their journal", inv.Details)
	}
	// Without statements the search decides the same.
	inv = linearizable(t, ops, finals(150, 50), nil)
	if inv.Status != check.StatusPass || !strings.Contains(inv.Details, "0 accounts decided by their journal's order") {
		t.Fatalf("without statements: %s: %s", inv.Status, inv.Details)
	}
}

// A journal order that breaks the ops' real-time order is no witness,
// even when the balances it gives fit: the search decides, and finds the
// history illegal. Here t2's debit of 120 returned before t1's credit of
// 50 was called, so it ran on 100; the journal claims the other order.
func TestJournalOrderAgainstRealTimeIsNoWitness(t *testing.T) {
	ops := []history.Op{
		xfer(0, "t2", 0, 1, 120, 10, 20, history.OK, ""),
		xfer(1, "t1", 1, 0, 50, 30, 40, history.OK, ""),
	}
	st := map[string][]check.Entry{
		acct(0): statement(creditOf("t1", 50), debitOf("t2", 120)),
		acct(1): statement(creditOf("t2", 120), debitOf("t1", 50)),
	}
	inv := linearizable(t, ops, finals(30, 170), st)
	if inv.Status != check.StatusFail {
		t.Fatalf("linearizable = %s: %s, want fail", inv.Status, inv.Details)
	}
}

// A credit that the account applied after a debit called once the
// credit's transfer had returned (its release lost with the account's
// memory and applied again; the debit covered by the balance meanwhile)
// still lets the journal decide: the credit goes first, where real time
// puts it.
func TestJournalCreditAppliedLateWitnesses(t *testing.T) {
	ops := []history.Op{
		xfer(0, "t1", 1, 0, 30, 10, 20, history.OK, ""),
		read(2, 0, 22, 25, 130),
		xfer(1, "t2", 0, 1, 50, 30, 40, history.OK, ""),
	}
	st := map[string][]check.Entry{
		acct(0): statement(debitOf("t2", 50), creditOf("t1", 30)),
		acct(1): statement(debitOf("t1", 30), creditOf("t2", 50)),
	}
	inv := linearizable(t, ops, finals(80, 120), st)
	if inv.Status != check.StatusPass || !strings.Contains(inv.Details, "2 accounts decided by their journal's order") {
		t.Fatalf("linearizable = %s: %s, want pass with both accounts decided by their journal", inv.Status, inv.Details)
	}
}

// A read that no order explains fails with the journal as without it.
func TestJournalOrderDoesNotExcuseABadRead(t *testing.T) {
	ops := []history.Op{
		xfer(0, "t1", 1, 0, 10, 10, 20, history.OK, ""),
		read(1, 0, 30, 40, 100), // after t1 returned: must see its credit
	}
	st := map[string][]check.Entry{
		acct(0): statement(creditOf("t1", 10)),
		acct(1): statement(debitOf("t1", 10)),
	}
	inv := linearizable(t, ops, finals(110, 90), st)
	if inv.Status != check.StatusFail {
		t.Fatalf("linearizable = %s: %s, want fail", inv.Status, inv.Details)
	}
}

// A journal that lacks an op of the history, or holds a money event the
// model has none for, is no witness: the search decides.
func TestIncompleteJournalIsNoWitness(t *testing.T) {
	ops := []history.Op{
		xfer(0, "t1", 1, 0, 10, 10, 20, history.OK, ""),
		read(1, 0, 30, 40, 110),
	}
	for name, st := range map[string]map[string][]check.Entry{
		"missing credit": {acct(0): statement(), acct(1): statement(debitOf("t1", 10))},
		"extra deposit": {acct(0): statement(creditOf("t1", 10), check.Entry{Type: check.EntryDeposit, Amount: 5}),
			acct(1): statement(debitOf("t1", 10))},
	} {
		inv := linearizable(t, ops, finals(110, 90), st)
		if inv.Status != check.StatusPass || !strings.Contains(inv.Details, "1 accounts decided by their journal's order") {
			t.Fatalf("%s: %s: %s, want pass with only account 1 decided by its journal", name, inv.Status, inv.Details)
		}
	}
}
