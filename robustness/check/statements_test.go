package check_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/robustness/check"
	"github.com/ordo-actors/ordo/robustness/history"
)

// entries builds a statement from (type, transfer ID, amount) triples,
// numbering and summing them.
func entries(es ...check.Entry) []check.Entry {
	var bal int64
	for i := range es {
		es[i].Seq = uint64(i + 1)
		if es[i].Type == check.EntryOpened {
			bal = 0
		}
		bal += es[i].Amount
		es[i].Balance = bal
	}
	return es
}

func opened() check.Entry { return check.Entry{Type: check.EntryOpened, Amount: initial} }
func debit(id string, n int64) check.Entry {
	return check.Entry{Type: check.EntryDebit, TransferID: id, Amount: -n}
}
func credit(id string, n int64) check.Entry {
	return check.Entry{Type: check.EntryCredit, TransferID: id, Amount: n}
}
func refund(id string, n int64) check.Entry {
	return check.Entry{Type: check.EntryRefund, TransferID: id, Amount: n}
}

func TestStatements(t *testing.T) {
	ops := []history.Op{
		xfer(0, "t1", 0, 1, 10, 10, 20, history.OK, ""),
		xfer(0, "t2", 0, 1, 500, 30, 40, history.Rejected, history.InsufficientFunds),
		xfer(0, "t3", 1, 0, 5, 50, 60, history.Rejected, "compensated: unknown account"),
		xfer(1, "t4", 1, 0, 7, 50, 60, history.Unknown, ""),
	}
	good := func() map[string][]check.Entry {
		return map[string][]check.Entry{
			acct(0): entries(opened(), debit("t1", 10), credit("t4", 7)),
			acct(1): entries(opened(), credit("t1", 10), debit("t3", 5), refund("t3", 5), debit("t4", 7)),
		}
	}
	cases := []struct {
		name    string
		change  func(map[string][]check.Entry)
		mention string // "" : passes
	}{
		{name: "as the history says"},
		{name: "a lost credit", mention: "1 debits, 0 credits, 0 refunds",
			change: func(s map[string][]check.Entry) {
				s[acct(1)] = entries(opened(), debit("t3", 5), refund("t3", 5), debit("t4", 7))
			}},
		{name: "a credit twice", mention: "1 debits, 2 credits",
			change: func(s map[string][]check.Entry) {
				s[acct(1)] = entries(opened(), credit("t1", 10), credit("t1", 10), debit("t3", 5), refund("t3", 5), debit("t4", 7))
			}},
		{name: "a rejected transfer debited and not refunded", mention: "want none, or one debit and one refund",
			change: func(s map[string][]check.Entry) {
				s[acct(1)] = entries(opened(), credit("t1", 10), debit("t3", 5), debit("t4", 7), credit("x", 5))
			}},
		{name: "a debit of the wrong account", mention: "a debit of acct-000001",
			change: func(s map[string][]check.Entry) {
				s[acct(0)] = entries(opened(), credit("t4", 7))
				s[acct(1)] = entries(opened(), credit("t1", 10), debit("t1", 10), debit("t3", 5), refund("t3", 5), debit("t4", 7))
			}},
		{name: "a wrong amount", mention: "a credit of 11",
			change: func(s map[string][]check.Entry) {
				s[acct(1)] = entries(opened(), credit("t1", 11), debit("t3", 5), refund("t3", 5), debit("t4", 7))
			}},
		{name: "a running balance that does not add up", mention: "shows balance 95, its entries sum to 90",
			change: func(s map[string][]check.Entry) { s[acct(0)][1].Balance = 95 }},
		{name: "no statement", mention: "no statement",
			change: func(s map[string][]check.Entry) { delete(s, acct(0)) }},
		{name: "no opening", mention: "no opening",
			change: func(s map[string][]check.Entry) { s[acct(0)] = s[acct(0)][1:] }},
		{name: "whole transfers the history does not hold",
			change: func(s map[string][]check.Entry) {
				s[acct(0)] = entries(opened(), debit("t1", 10), credit("t4", 7), debit("t8", 1), credit("t9", 1))
				s[acct(1)] = entries(opened(), credit("t1", 10), debit("t3", 5), refund("t3", 5), debit("t4", 7),
					credit("t8", 1), debit("t9", 1), debit("t10", 3), refund("t10", 3))
			}},
		{name: "half a transfer the history does not hold", mention: "transfer t9, which the history does not hold: 1 debits, 0 credits",
			change: func(s map[string][]check.Entry) {
				s[acct(0)] = entries(opened(), debit("t1", 10), credit("t4", 7), debit("t9", 1), check.Entry{Type: check.EntryDeposit, Amount: 1})
			}},
		{name: "a transfer the history does not hold, to its source", mention: "a debit of 1 from acct-000000 and a credit of 1 to acct-000000",
			change: func(s map[string][]check.Entry) {
				s[acct(0)] = entries(opened(), debit("t1", 10), credit("t4", 7), debit("t9", 1), credit("t9", 1))
			}},
		{name: "the statement ends away from the balance", mention: "the statement sums to 90, the account's balance is 97",
			change: func(s map[string][]check.Entry) { s[acct(0)] = entries(opened(), debit("t1", 10)) }},
		{name: "a negative balance", mention: "is negative",
			change: func(s map[string][]check.Entry) {
				s[acct(0)] = entries(opened(), check.Entry{Type: check.EntryWithdrawal, Amount: -200}, check.Entry{Type: check.EntryDeposit, Amount: 200},
					debit("t1", 10), credit("t4", 7))
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := good()
			if tc.change != nil {
				tc.change(st)
			}
			r := check.Check(check.Input{Ops: ops, Accounts: 2, InitialBalance: initial, Final: finals(97, 103),
				Resolved: map[string]history.Outcome{"t4": history.OK}, Timeout: 10 * time.Second, Statements: st})
			inv, _ := r.Invariant(check.InvStatements)
			if tc.mention == "" {
				if !r.OK() || inv.Status != check.StatusPass {
					t.Fatalf("not passing:\n%s", r)
				}
				return
			}
			if inv.Status != check.StatusFail || r.OK() {
				t.Fatalf("statements %s, want fail:\n%s", inv.Status, r)
			}
			if !strings.Contains(r.String(), tc.mention) {
				t.Fatalf("report does not mention %q:\n%s", tc.mention, r)
			}
			if got := failing(r); !slices.Contains(got, "statements=fail") {
				t.Fatalf("failing %v", got)
			}
		})
	}
}
