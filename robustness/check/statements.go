package check

import (
	"fmt"
	"maps"
	"slices"

	"github.com/ordo-actors/ordo/robustness/history"
)

// Statement entry types (Entry.Type), as the bank's statements name them.
const (
	EntryOpened     = "opened"
	EntryDeposit    = "deposit"
	EntryWithdrawal = "withdrawal"
	EntryDebit      = "debit"
	EntryCredit     = "credit"
	EntryRefund     = "refund"
)

// Entry is one line of an account's statement: a money event of the
// account's journal and the balance the statement shows after it.
type Entry struct {
	// Seq is the event's position in the account's journal.
	Seq uint64 `json:"seq"`
	// Type is one of the Entry* constants.
	Type string `json:"type"`
	// TransferID names the transfer of a debit, credit or refund.
	TransferID string `json:"transfer_id,omitempty"`
	// Amount is the change to the balance: negative for debits and
	// withdrawals; an opening's is the initial balance.
	Amount int64 `json:"amount"`
	// Balance is the running balance the statement shows after the entry.
	Balance int64 `json:"balance"`
}

// moneyEntry is a transfer's entry on one account.
type moneyEntry struct {
	account string
	Entry
}

// checkStatements checks the statements invariant: every account of the
// bank has a statement that opens once with the initial balance, whose
// running balances add up, never go negative and end at the account's
// final balance; and every transfer appears as its final outcome says:
// an ok one exactly once as a debit of its source and once as a credit of
// its destination, a rejected one not at all or as one debit and one
// refund of its source, and no transfer the history does not hold.
func (c *checker) checkStatements() {
	inv := c.invariants[InvStatements]
	if c.in.Statements == nil {
		inv.Status = StatusSkipped
		inv.Details = "no statements given"
		return
	}
	byTransfer := map[string][]moneyEntry{}
	lines := 0
	n := min(max(c.in.Accounts, 0), history.MaxAccounts)
	for a := range n {
		name := history.AccountName(a)
		st, ok := c.in.Statements[name]
		if !ok {
			c.violate(Violation{Invariant: InvStatements, Account: name, Message: "no statement"})
			continue
		}
		lines += len(st)
		var sum int64
		opened := 0
		for i, e := range st {
			if i > 0 && e.Seq <= st[i-1].Seq {
				c.violate(Violation{Invariant: InvStatements, Account: name,
					Message: fmt.Sprintf("entry %d (seq %d) after seq %d: not in journal order", i+1, e.Seq, st[i-1].Seq)})
			}
			switch e.Type {
			case EntryOpened:
				opened++
				if i != 0 || e.Amount != c.in.InitialBalance {
					c.violate(Violation{Invariant: InvStatements, Account: name, Expected: ptr(c.in.InitialBalance), Actual: ptr(e.Amount),
						Message: fmt.Sprintf("opened at entry %d with %d: want once, first, with the initial balance", i+1, e.Amount)})
				}
				sum = 0
			case EntryDebit, EntryCredit, EntryRefund:
				byTransfer[e.TransferID] = append(byTransfer[e.TransferID], moneyEntry{account: name, Entry: e})
			case EntryDeposit, EntryWithdrawal:
			default:
				c.violate(Violation{Invariant: InvStatements, Account: name,
					Message: fmt.Sprintf("entry %d has unknown type %q", i+1, e.Type)})
			}
			sum += e.Amount
			if e.Balance != sum {
				c.violate(Violation{Invariant: InvStatements, Account: name, Expected: ptr(sum), Actual: ptr(e.Balance),
					Message: fmt.Sprintf("entry %d (seq %d) shows balance %d, its entries sum to %d", i+1, e.Seq, e.Balance, sum)})
				sum = e.Balance // report each break once
			}
			if sum < 0 {
				c.violate(Violation{Invariant: InvStatements, Account: name, Actual: ptr(sum),
					Message: fmt.Sprintf("balance %d after entry %d (seq %d) is negative", sum, i+1, e.Seq)})
			}
		}
		if opened == 0 {
			c.violate(Violation{Invariant: InvStatements, Account: name, Message: "the statement has no opening"})
		}
		if final, ok := c.in.Final[name]; ok && final != sum {
			c.violate(Violation{Invariant: InvStatements, Account: name, Expected: ptr(final), Actual: ptr(sum),
				Message: fmt.Sprintf("the statement sums to %d, the account's balance is %d", sum, final)})
		}
	}
	checked := 0
	known := map[string]bool{}
	for _, t := range c.transfers {
		known[t.op.ID] = true
		if t.outcome != history.OK && t.outcome != history.Rejected {
			continue // unresolved: left out of every check
		}
		checked++
		if msg := transferEntries(t, byTransfer[t.op.ID]); msg != "" {
			c.violate(Violation{Invariant: InvStatements, ID: t.op.ID, Op: t.idx + 1,
				Message: fmt.Sprintf("%s transfer %s -> %s of %d: %s", t.outcome, t.op.From, t.op.To, t.op.Amount, msg)})
		}
	}
	outside := 0
	for _, id := range slices.Sorted(maps.Keys(byTransfer)) {
		if known[id] {
			continue
		}
		// A transfer made outside the recorded run (by hand, say) must
		// still be whole: it moved money from one account to another, or
		// moved it back.
		outside++
		if msg := wholeTransfer(byTransfer[id]); msg != "" {
			es := byTransfer[id]
			c.violate(Violation{Invariant: InvStatements, ID: id, Account: es[0].account,
				Message: fmt.Sprintf("transfer %s, which the history does not hold: %s", id, msg)})
		}
	}
	inv.Details = fmt.Sprintf("%d statements, %d entries; %d transfers with a final outcome found as it says", n, lines, checked)
	if outside > 0 {
		inv.Details += fmt.Sprintf("; %d transfers outside the history", outside)
	}
}

// wholeTransfer returns what is wrong with the entries es of a transfer
// the history does not hold, "" when they are one debit and either one
// credit of the same amount to another account or one refund of it to the
// debited account.
func wholeTransfer(es []moneyEntry) string {
	var debits, credits, refunds []moneyEntry
	for _, e := range es {
		switch e.Type {
		case EntryDebit:
			debits = append(debits, e)
		case EntryCredit:
			credits = append(credits, e)
		case EntryRefund:
			refunds = append(refunds, e)
		}
	}
	if len(debits) != 1 || len(credits)+len(refunds) != 1 {
		return fmt.Sprintf("%d debits, %d credits, %d refunds; want one debit and one credit or refund", len(debits), len(credits), len(refunds))
	}
	d := debits[0]
	if len(credits) == 1 {
		if cr := credits[0]; cr.account == d.account || cr.Amount != -d.Amount {
			return fmt.Sprintf("a debit of %d from %s and a credit of %d to %s", -d.Amount, d.account, cr.Amount, cr.account)
		}
		return ""
	}
	if r := refunds[0]; r.account != d.account || r.Amount != -d.Amount {
		return fmt.Sprintf("a debit of %d from %s and a refund of %d to %s", -d.Amount, d.account, r.Amount, r.account)
	}
	return ""
}

// transferEntries returns what is wrong with the statement entries es of
// transfer t, "" when they are what its outcome says.
func transferEntries(t transfer, es []moneyEntry) string {
	count := func(typ, account string) (n int, bad string) {
		for _, e := range es {
			if e.Type != typ {
				continue
			}
			if e.account != account {
				return n, fmt.Sprintf("a %s of %s (seq %d), not of %s", typ, e.account, e.Seq, account)
			}
			if abs(e.Amount) != t.op.Amount {
				return n, fmt.Sprintf("a %s of %d on %s (seq %d)", typ, abs(e.Amount), e.account, e.Seq)
			}
			n++
		}
		return n, ""
	}
	debits, bad := count(EntryDebit, t.op.From)
	if bad != "" {
		return bad
	}
	credits, bad := count(EntryCredit, t.op.To)
	if bad != "" {
		return bad
	}
	refunds, bad := count(EntryRefund, t.op.From)
	if bad != "" {
		return bad
	}
	switch {
	case t.outcome == history.OK && (debits != 1 || credits != 1 || refunds != 0):
		return fmt.Sprintf("%d debits, %d credits, %d refunds in the statements; want one debit and one credit", debits, credits, refunds)
	case t.outcome == history.Rejected && !(debits == 0 && credits == 0 && refunds == 0) && !(debits == 1 && refunds == 1 && credits == 0):
		return fmt.Sprintf("%d debits, %d credits, %d refunds in the statements; want none, or one debit and one refund", debits, credits, refunds)
	}
	return ""
}

func abs(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}
