package check

import (
	"fmt"
	"strconv"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/ordo-actors/ordo/examples/bank/history"
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
	idx     int // index in Input.Ops
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

// lops builds the per-account ops of the model, sorted by account.
func (c *checker) lops() []lop {
	var out []lop
	for _, t := range c.transfers {
		op := t.op
		switch {
		case t.outcome == history.OK:
			if t.from < 0 || t.to < 0 {
				continue // reported under the history invariant
			}
			ret := op.Ret
			if op.Outcome == history.Unknown {
				ret = c.horizon // may have taken effect any time after its call
			}
			out = append(out,
				lop{account: t.from, kind: lopDebit, amount: op.Amount, call: op.Call, ret: ret, client: op.Client, idx: t.idx},
				lop{account: t.to, kind: lopCredit, amount: op.Amount, call: op.Call, ret: ret, client: op.Client, idx: t.idx})
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

func toPorcupine(ls []lop, ops []history.Op) []porcupine.Operation {
	out := make([]porcupine.Operation, len(ls))
	for i, l := range ls {
		var output any
		if l.kind == lopRead {
			output = ops[l.idx].Balance
		}
		out[i] = porcupine.Operation{ClientId: l.client, Input: l, Call: l.call, Output: output, Return: l.ret, Metadata: l.idx}
	}
	return out
}

// checkLinearizable runs porcupine over every account.
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
	model := accountModel(c.in.InitialBalance, c.in.Ops)
	hist := toPorcupine(ls, c.in.Ops)
	parts := partitionByAccount(hist)
	start := time.Now()
	res, info := porcupine.CheckOperationsVerbose(model, hist, timeout)
	c.report.LinearizabilityElapsed = time.Since(start)
	inv.Details = fmt.Sprintf("%d per-account ops on %d accounts", len(hist), len(parts))
	if c.unresolved > 0 {
		inv.Details += fmt.Sprintf("; %d unresolved transfers left out", c.unresolved)
	}
	switch res {
	case porcupine.Ok:
		return
	case porcupine.Unknown:
		inv.Status = StatusUnknown
		inv.Details += fmt.Sprintf("; search gave up after the %v timeout", timeout)
		return
	}
	// Illegal: find the accounts without a complete linearization.
	var failed []porcupine.Operation
	partials := info.PartialLinearizations()
	for i, part := range parts {
		complete := false
		if i < len(partials) {
			for _, p := range partials[i] {
				if len(p) == len(part) {
					complete = true
					break
				}
			}
		}
		if complete {
			continue
		}
		failed = append(failed, part...)
		longest := 0
		if i < len(partials) {
			for _, p := range partials[i] {
				longest = max(longest, len(p))
			}
		}
		acct := part[0].Input.(lop).account
		c.violate(Violation{Invariant: InvLinearizable, Account: history.AccountName(acct),
			Message: fmt.Sprintf("no sequential order of the account's %d ops fits their intervals (longest linearizable prefix: %d ops)", len(part), longest)})
	}
	if inv.Status != StatusFail { // defensive: porcupine said illegal
		c.violate(Violation{Invariant: InvLinearizable, Message: "porcupine found the history illegal"})
	}
	if c.in.VisualizationPath == "" {
		return
	}
	// Visualise only the failing accounts: the file stays small and to the point.
	if len(failed) > 0 {
		if r2, info2 := porcupine.CheckOperationsVerbose(model, failed, timeout); r2 == porcupine.Illegal {
			info = info2
		}
	}
	if err := porcupine.VisualizePath(model, info, c.in.VisualizationPath); err != nil {
		inv.Details += fmt.Sprintf("; writing visualisation: %v", err)
		return
	}
	c.report.Visualization = c.in.VisualizationPath
}
