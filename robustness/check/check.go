package check

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/ordo-actors/ordo/robustness/history"
)

// DefaultTimeout is the linearizability search budget used when
// Input.Timeout is zero.
const DefaultTimeout = time.Minute

// MaxListed is the most violations listed per invariant in a Report; the
// invariant's Violations count keeps the total.
const MaxListed = 50

// Names of the invariants in a Report, in report order.
const (
	InvHistory      = "history"
	InvConservation = "conservation"
	InvExactlyOnce  = "exactly_once"
	InvNonNegative  = "non_negative"
	InvLinearizable = "linearizable"
	InvStatements   = "statements"
)

// Input is everything Check needs. It is read, never modified.
type Input struct {
	// Ops is the recorded history, in any order.
	Ops []history.Op
	// Accounts is the number of accounts N: acct-000000 … acct-(N-1).
	Accounts int
	// InitialBalance is the balance B every account was opened with.
	InitialBalance int64
	// Final holds the final balance of every account, read after the run
	// and after resolving unknown transfers. When nil, the conservation and
	// exactly-once invariants are skipped and non-negativity only covers
	// reads.
	Final map[string]int64
	// Resolved maps the ID of each transfer recorded as unknown to its
	// definite outcome (history.OK or history.Rejected), as learned by
	// re-submitting it with the same ID; see Resolve.
	Resolved map[string]history.Outcome
	// Timeout bounds the linearizability search; zero means DefaultTimeout.
	// Writing a visualisation may take up to a second more.
	Timeout time.Duration
	// VisualizationPath, when not empty, is where the porcupine HTML
	// visualisation is written if the history is not linearizable.
	VisualizationPath string
	// Statements holds the statement of every account, by account name:
	// its money events with running balances, as the bank's journal
	// records them, read after the run and after resolving (see
	// Entry). When nil, the statements invariant is skipped.
	Statements map[string][]Entry
}

// transfer is a valid transfer op with its final outcome.
type transfer struct {
	idx     int // index in Input.Ops
	op      history.Op
	outcome history.Outcome // final outcome: OK, Rejected, or Unknown if unresolved
	from    int             // account index, -1 if outside the bank
	to      int
}

// checker carries the state of one Check call.
type checker struct {
	in         Input
	report     Report
	invariants map[string]*Invariant
	transfers  []transfer
	reads      []int // indexes of valid ok reads in Input.Ops
	horizon    int64 // a time after every recorded call and return
	unresolved int
}

// Check checks in and returns the report. It never panics on bad input:
// malformed ops, duplicate IDs and missing data are reported as violations
// of the history invariant.
func Check(in Input) Report {
	c := &checker{in: in, invariants: map[string]*Invariant{}}
	c.report = Report{
		Ops:            len(in.Ops),
		Accounts:       in.Accounts,
		InitialBalance: in.InitialBalance,
		Counts:         map[history.Kind]map[history.Outcome]int{},
	}
	for _, name := range []string{InvHistory, InvConservation, InvExactlyOnce, InvNonNegative, InvLinearizable, InvStatements} {
		c.report.Invariants = append(c.report.Invariants, Invariant{Name: name, Status: StatusPass})
	}
	for i := range c.report.Invariants {
		c.invariants[c.report.Invariants[i].Name] = &c.report.Invariants[i]
	}
	c.collect()
	c.checkFinal()
	c.checkStatements()
	nn := c.invariants[InvNonNegative]
	nn.Details = fmt.Sprintf("%d final balances and %d ok reads", len(c.in.Final), len(c.reads))
	c.checkLinearizable()
	rank := map[string]int{}
	for i, inv := range c.report.Invariants {
		rank[inv.Name] = i
	}
	slices.SortStableFunc(c.report.Violations, func(a, b Violation) int {
		return cmp.Compare(rank[a.Invariant], rank[b.Invariant])
	})
	return c.report
}

// violate records a violation of invariant name.
func (c *checker) violate(v Violation) {
	inv := c.invariants[v.Invariant]
	inv.Status = StatusFail
	inv.Violations++
	if inv.Violations <= MaxListed {
		c.report.Violations = append(c.report.Violations, v)
	}
}

// account returns the index of a bank account name, or -1 when the name is
// not one of the bank's accounts.
func (c *checker) account(name string) int {
	n, err := history.ParseAccount(name)
	if err != nil || n >= c.in.Accounts {
		return -1
	}
	return n
}

func ptr(v int64) *int64 { return &v }

// collect validates the ops, counts them, resolves transfer outcomes and
// fills c.transfers and c.reads.
func (c *checker) collect() {
	if c.in.Accounts <= 0 || c.in.Accounts > history.MaxAccounts {
		c.violate(Violation{Invariant: InvHistory, Message: fmt.Sprintf("accounts %d outside [1, %d]", c.in.Accounts, history.MaxAccounts)})
	}
	if c.in.InitialBalance < 0 {
		c.violate(Violation{Invariant: InvHistory, Message: fmt.Sprintf("initial balance %d < 0", c.in.InitialBalance)})
	}
	seen := map[string]int{}
	resolvedCounts := map[history.Outcome]int{}
	for i, op := range c.in.Ops {
		byOutcome := c.report.Counts[op.Op]
		if byOutcome == nil {
			byOutcome = map[history.Outcome]int{}
			c.report.Counts[op.Op] = byOutcome
		}
		byOutcome[op.Outcome]++
		if op.Call >= c.horizon {
			c.horizon = op.Call + 1
		}
		if op.Ret >= c.horizon {
			c.horizon = op.Ret + 1
		}
		if err := op.Validate(); err != nil {
			c.violate(Violation{Invariant: InvHistory, Op: i + 1, ID: op.ID, Message: err.Error()})
			continue
		}
		switch op.Op {
		case history.OpTransfer:
			if first, dup := seen[op.ID]; dup {
				c.violate(Violation{Invariant: InvHistory, Op: i + 1, ID: op.ID,
					Message: fmt.Sprintf("transfer id %q already used by op #%d", op.ID, first)})
			} else {
				seen[op.ID] = i + 1
			}
			t := transfer{idx: i, op: op, outcome: op.Outcome, from: c.account(op.From), to: c.account(op.To)}
			res, hasRes := c.in.Resolved[op.ID]
			if op.Outcome == history.Unknown {
				switch {
				case hasRes && (res == history.OK || res == history.Rejected):
					t.outcome = res
					resolvedCounts[res]++
				default:
					c.unresolved++
					resolvedCounts[history.Unknown]++
					c.violate(Violation{Invariant: InvHistory, Op: i + 1, ID: op.ID,
						Message: "unknown transfer was not resolved; it is left out of every other check"})
				}
			} else if hasRes && res != op.Outcome {
				c.violate(Violation{Invariant: InvHistory, Op: i + 1, ID: op.ID,
					Message: fmt.Sprintf("transfer recorded %s but re-submission answered %s", op.Outcome, res)})
			}
			if t.outcome == history.OK && (t.from < 0 || t.to < 0) {
				c.violate(Violation{Invariant: InvHistory, Op: i + 1, ID: op.ID,
					Message: fmt.Sprintf("ok transfer %s -> %s names an account outside the bank (%d accounts)", op.From, op.To, c.in.Accounts)})
			}
			c.transfers = append(c.transfers, t)
		case history.OpBalance:
			if op.Outcome != history.OK {
				continue
			}
			if c.account(op.Account) < 0 {
				c.violate(Violation{Invariant: InvHistory, Op: i + 1, Account: op.Account,
					Message: fmt.Sprintf("ok read of an account outside the bank (%d accounts)", c.in.Accounts)})
				continue
			}
			if op.Balance < 0 {
				c.violate(Violation{Invariant: InvNonNegative, Op: i + 1, Account: op.Account, Actual: ptr(op.Balance),
					Message: fmt.Sprintf("read observed a negative balance %d", op.Balance)})
			}
			c.reads = append(c.reads, i)
		}
	}
	if len(resolvedCounts) > 0 {
		c.report.Resolved = resolvedCounts
	}
}

// checkFinal checks conservation, exactly-once and non-negativity of the
// final balances.
func (c *checker) checkFinal() {
	if c.in.Final == nil {
		for _, name := range []string{InvConservation, InvExactlyOnce} {
			inv := c.invariants[name]
			inv.Status = StatusSkipped
			inv.Details = "no final balances given"
		}
		return
	}
	n := min(max(c.in.Accounts, 0), history.MaxAccounts)
	expected := make([]int64, n)
	for i := range expected {
		expected[i] = c.in.InitialBalance
	}
	for _, t := range c.transfers {
		if t.outcome != history.OK || t.from < 0 || t.to < 0 {
			continue
		}
		expected[t.from] -= t.op.Amount
		expected[t.to] += t.op.Amount
	}
	var sum int64
	for _, name := range slices.Sorted(maps.Keys(c.in.Final)) {
		bal := c.in.Final[name]
		sum += bal
		a := c.account(name)
		if a < 0 {
			c.violate(Violation{Invariant: InvHistory, Account: name, Actual: ptr(bal),
				Message: "final balance given for an account outside the bank"})
			continue
		}
		if bal < 0 {
			c.violate(Violation{Invariant: InvNonNegative, Account: name, Actual: ptr(bal),
				Message: fmt.Sprintf("final balance %d is negative", bal)})
		}
		if bal != expected[a] {
			c.violate(Violation{Invariant: InvExactlyOnce, Account: name, Expected: ptr(expected[a]), Actual: ptr(bal),
				Message: fmt.Sprintf("final balance %d, want %d from ok transfers (off by %+d)", bal, expected[a], bal-expected[a])})
		}
	}
	missing := 0
	for a := range n {
		if _, ok := c.in.Final[history.AccountName(a)]; !ok {
			missing++
			c.violate(Violation{Invariant: InvHistory, Account: history.AccountName(a), Message: "no final balance given"})
		}
	}
	want := int64(n) * c.in.InitialBalance
	cons := c.invariants[InvConservation]
	cons.Details = fmt.Sprintf("sum of final balances %d, want %d accounts × %d = %d", sum, n, c.in.InitialBalance, want)
	if sum != want || missing > 0 {
		msg := fmt.Sprintf("money %s: final balances sum to %d, want %d (off by %+d)", createdOrLost(sum-want), sum, want, sum-want)
		if missing > 0 {
			msg = fmt.Sprintf("%d accounts have no final balance; %s", missing, msg)
		}
		c.violate(Violation{Invariant: InvConservation, Expected: ptr(want), Actual: ptr(sum), Message: msg})
	}
	ok := 0
	for _, t := range c.transfers {
		if t.outcome == history.OK {
			ok++
		}
	}
	eo := c.invariants[InvExactlyOnce]
	eo.Details = fmt.Sprintf("%d final balances against %d ok transfers", len(c.in.Final), ok)
	if c.unresolved > 0 {
		eo.Details += fmt.Sprintf("; %d unresolved transfers counted as not applied", c.unresolved)
	}
}

func createdOrLost(diff int64) string {
	switch {
	case diff > 0:
		return "created"
	case diff < 0:
		return "lost"
	}
	return "conserved"
}

// sortOps orders ops by account, then call time, for partitioning.
func sortOps(ops []lop) {
	slices.SortStableFunc(ops, func(a, b lop) int {
		return cmp.Or(cmp.Compare(a.account, b.account), cmp.Compare(a.call, b.call))
	})
}
