package check

import (
	"fmt"
	"math"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/ordo-actors/ordo/robustness/history"
)

// lopKind is the kind of a per-account op in the linearizability model.
type lopKind uint8

const (
	lopDebit  lopKind = iota // ok transfer, source side: balance >= amount, then balance -= amount
	lopCredit                // ok transfer, target side: balance += amount
	lopReject                // rejected for insufficient funds: balance < amount, no change
	lopRead                  // ok read: returns balance
)

// lop is one op on one account, the porcupine Input.
type lop struct {
	account int
	kind    lopKind
	amount  int64
	call    int64
	ret     int64
	client  int
	idx     int   // index in Input.Ops
	open    bool  // a resolved-unknown transfer: may take effect any time after call
	gaveUp  int64 // for open ops, when the client gave up
}

// accountModel is the sequential specification of one account: a balance
// that never goes negative. States are int64 balances.
func accountModel(initial int64, ops []history.Op) porcupine.Model {
	return porcupine.Model{
		Partition: partitionByAccount,
		Init:      func() any { return initial },
		Step: func(state, input, output any) (bool, any) {
			bal := state.(int64)
			in := input.(lop)
			switch in.kind {
			case lopDebit:
				if bal < in.amount {
					return false, bal
				}
				return true, bal - in.amount
			case lopCredit:
				return true, bal + in.amount
			case lopReject:
				return bal < in.amount, bal
			case lopRead:
				return output.(int64) == bal, bal
			}
			return false, bal
		},
		Hash: func(state any) uint64 { return uint64(state.(int64)) },
		DescribeOperation: func(input, output any) string {
			in := input.(lop)
			who := ""
			if op := ops[in.idx]; op.ID != "" {
				who = " (" + op.ID + ")"
			}
			switch in.kind {
			case lopDebit:
				return fmt.Sprintf("debit %d%s", in.amount, who)
			case lopCredit:
				return fmt.Sprintf("credit %d%s", in.amount, who)
			case lopReject:
				return fmt.Sprintf("reject %d: insufficient funds%s", in.amount, who)
			case lopRead:
				return fmt.Sprintf("read -> %d", output.(int64))
			}
			return "?"
		},
		DescribeState: func(state any) string { return strconv.FormatInt(state.(int64), 10) },
		DescribeOperationMetadata: func(info any) string {
			i, ok := info.(int)
			if !ok || i < 0 || i >= len(ops) {
				return ""
			}
			return fmt.Sprintf("op #%d: %s", i+1, ops[i])
		},
	}
}

// partitionByAccount splits a history sorted by account into one partition
// per account.
func partitionByAccount(h []porcupine.Operation) [][]porcupine.Operation {
	var parts [][]porcupine.Operation
	start := 0
	for i := 1; i <= len(h); i++ {
		if i == len(h) || h[i].Input.(lop).account != h[start].Input.(lop).account {
			parts = append(parts, h[start:i])
			start = i
		}
	}
	return parts
}

// lops builds the per-account ops of the model, sorted by account then
// call time.
func (c *checker) lops() []lop {
	var out []lop
	for _, t := range c.transfers {
		op := t.op
		switch {
		case t.outcome == history.OK:
			if t.from < 0 || t.to < 0 {
				continue // reported under the history invariant
			}
			l := lop{kind: lopDebit, amount: op.Amount, call: op.Call, ret: op.Ret, client: op.Client, idx: t.idx}
			if op.Outcome == history.Unknown {
				// It may have taken effect any time after its call.
				l.open, l.gaveUp, l.ret = true, op.Ret, c.horizon
			}
			debit, credit := l, l
			debit.account, credit.account, credit.kind = t.from, t.to, lopCredit
			out = append(out, debit, credit)
		case op.Outcome == history.Rejected && t.from >= 0 && history.IsInsufficientFunds(op.Error):
			out = append(out, lop{account: t.from, kind: lopReject, amount: op.Amount, call: op.Call, ret: op.Ret, client: op.Client, idx: t.idx})
		}
	}
	for _, i := range c.reads {
		op := c.in.Ops[i]
		out = append(out, lop{account: c.account(op.Account), kind: lopRead, call: op.Call, ret: op.Ret, client: op.Client, idx: i})
	}
	sortOps(out)
	return out
}

// toPorcupine converts ls to porcupine operations. narrow, when not nil,
// replaces the interval end of open ops.
func toPorcupine(ls []lop, ops []history.Op, narrow func(lop) (call, ret int64)) []porcupine.Operation {
	out := make([]porcupine.Operation, len(ls))
	for i, l := range ls {
		var output any
		if l.kind == lopRead {
			output = ops[l.idx].Balance
		}
		call, ret := l.call, l.ret
		if l.open && narrow != nil {
			call, ret = narrow(l)
		}
		out[i] = porcupine.Operation{ClientId: l.client, Input: l, Call: call, Output: output, Return: ret, Metadata: l.idx}
	}
	return out
}

// accountResult is the linearizability verdict for one account.
type accountResult struct {
	account int
	ops     []lop
	result  porcupine.CheckResult
	exact   bool // decided by the fully open-ended search
	journal bool // decided by the order of the account's journal
}

// Windows tried for the effect of an open op by the witness search.
const (
	windowEarly = iota // while the client waited: [call, gave up]
	windowLate         // after every recorded op: the re-submission applied it
	windowOpen         // anywhere after call (exact)
)

// narrowTo returns the narrowing for per-op window choices.
func (c *checker) narrowTo(choice map[int]int) func(lop) (int64, int64) {
	return func(l lop) (int64, int64) {
		w, ok := choice[l.idx*2+int(l.kind)]
		if !ok {
			w = windowOpen
		}
		switch w {
		case windowEarly:
			return l.call, max(l.gaveUp, l.call)
		case windowLate:
			return c.horizon, c.horizon
		}
		return l.call, c.horizon
	}
}

// witnessLookahead is how many later open ops the sub-history deciding an
// open op's window includes, left open-ended.
const witnessLookahead = 5

// witness looks for a linearization of an account with open ops by
// narrowing each open op's effect to one window. It decides the open ops in
// call order, each on the sub-history of ops called before the
// witnessLookahead-th next open op (those later open ops still open-ended):
// during the client's wait if that sub-history is linearizable, else after
// the run, else left open-ended. Narrowing only removes candidate
// orders, so a narrowed history that porcupine accepts proves the account
// linearizable; a failure proves nothing.
func (c *checker) witness(model porcupine.Model, ls []lop, deadline time.Time) bool {
	choice := map[int]int{} // by idx*2+kind; absent means windowOpen
	key := func(l lop) int { return l.idx*2 + int(l.kind) }
	check := func(sub []lop) porcupine.CheckResult {
		left := time.Until(deadline)
		if left <= 0 {
			return porcupine.Unknown
		}
		return porcupine.CheckOperationsTimeout(model, toPorcupine(sub, c.in.Ops, c.narrowTo(choice)), left)
	}
	var opens []lop
	for _, l := range ls {
		if l.open {
			opens = append(opens, l)
		}
	}
	decided := map[int]bool{}
	for i, o := range opens {
		end := int64(math.MaxInt64)
		if i+witnessLookahead < len(opens) {
			end = opens[i+witnessLookahead].call
		}
		decided[key(o)] = true
		var sub []lop
		for _, l := range ls {
			if l.call < end {
				sub = append(sub, l) // undecided open ops stay open-ended
			}
		}
		for _, w := range []int{windowEarly, windowLate, windowOpen} {
			choice[key(o)] = w
			res := check(sub)
			if res == porcupine.Ok {
				break
			}
			if res == porcupine.Unknown {
				return false
			}
		}
	}
	return check(ls) == porcupine.Ok
}

// checkAccount decides one account. The order of the account's journal,
// when the statements are given, is tried first as a witness (see
// journalWitness). An account with resolved-unknown transfers (open ops)
// is then searched for a narrowed witness (see witness); only when none is
// found does the exact, open-ended search run, whose cost can grow
// exponentially with the number of open ops.
func (c *checker) checkAccount(model porcupine.Model, ls []lop, deadline time.Time) accountResult {
	res := accountResult{account: ls[0].account, ops: ls}
	if c.journalWitness(ls) {
		res.result, res.journal = porcupine.Ok, true
		return res
	}
	if slices.ContainsFunc(ls, func(l lop) bool { return l.open }) {
		if c.witness(model, ls, deadline) {
			res.result = porcupine.Ok
			return res
		}
		res.exact = true
	}
	left := time.Until(deadline)
	if left <= 0 {
		res.result = porcupine.Unknown
		return res
	}
	res.result = porcupine.CheckOperationsTimeout(model, toPorcupine(ls, c.in.Ops, nil), left)
	return res
}

// checkLinearizable checks every account, in parallel, within the timeout.
func (c *checker) checkLinearizable() {
	inv := c.invariants[InvLinearizable]
	ls := c.lops()
	if len(ls) == 0 {
		inv.Details = "no ops to check"
		return
	}
	timeout := c.in.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	start := time.Now()
	deadline := start.Add(timeout)
	model := accountModel(c.in.InitialBalance, c.in.Ops)

	var accounts [][]lop
	for i := 0; i < len(ls); {
		j := i + 1
		for j < len(ls) && ls[j].account == ls[i].account {
			j++
		}
		accounts = append(accounts, ls[i:j])
		i = j
	}
	results := make([]accountResult, len(accounts))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(accounts)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				results[i] = c.checkAccount(model, accounts[i], deadline)
			}
		}()
	}
	for i := range accounts {
		next <- i
	}
	close(next)
	wg.Wait()
	c.report.LinearizabilityElapsed = time.Since(start)

	var failed, timedOut []string
	var failedOps []lop
	exact, journal := 0, 0
	for _, r := range results {
		name := history.AccountName(r.account)
		if r.exact {
			exact++
		}
		if r.journal {
			journal++
		}
		switch r.result {
		case porcupine.Illegal:
			failed = append(failed, name)
			failedOps = append(failedOps, r.ops...)
			c.violate(Violation{Invariant: InvLinearizable, Account: name,
				Message: fmt.Sprintf("no sequential order of the account's %d ops fits their intervals", len(r.ops))})
		case porcupine.Unknown:
			timedOut = append(timedOut, name)
		}
	}
	inv.Details = fmt.Sprintf("%d per-account ops on %d accounts; %d accounts decided by their journal's order, %d needed the open-ended search",
		len(ls), len(accounts), journal, exact)
	if c.unresolved > 0 {
		inv.Details += fmt.Sprintf("; %d unresolved transfers left out", c.unresolved)
	}
	if len(timedOut) > 0 {
		if inv.Status == StatusPass {
			inv.Status = StatusUnknown
		}
		shown := timedOut[:min(len(timedOut), 10)]
		inv.Details += fmt.Sprintf("; search gave up after the %v timeout on %d accounts (%s)", timeout, len(timedOut), strings.Join(shown, ", "))
	}
	if len(failed) == 0 || c.in.VisualizationPath == "" {
		return
	}
	// Visualise only the failing accounts: the file stays small and to the point.
	// The failing accounts were decided by the exact search, which found
	// them illegal within the budget; give the re-run what is left of it,
	// but at least a second, and visualise whatever it found.
	budget := max(time.Until(deadline), time.Second)
	_, info := porcupine.CheckOperationsVerbose(model, toPorcupine(failedOps, c.in.Ops, nil), budget)
	if err := porcupine.VisualizePath(model, info, c.in.VisualizationPath); err != nil {
		inv.Details += fmt.Sprintf("; writing visualisation: %v", err)
		return
	}
	c.report.Visualization = c.in.VisualizationPath
}
