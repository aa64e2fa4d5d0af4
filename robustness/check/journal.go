package check

import (
	"cmp"
	"slices"

	"github.com/ordo-actors/ordo/robustness/history"
)

// journalWitness looks for a linearization of one account's ops in the
// order its journal recorded them (Input.Statements): the debits and
// credits in the order the account applied them (a credit applied late
// moved before the effects called after it returned, see creditsFirst),
// each read and rejection
// placed between them where the balance fits it and where its interval
// allows. It reports whether the order it built is a linearization, which
// it checks as porcupine would: every op sequentially legal, and no op
// placed before one that returned before it was called. The journal only
// proposes the order; the check proves it, so a true answer proves the
// account linearizable and a false one proves nothing (the search
// decides then).
//
// The search needs no order: it finds one by trying the ops' possible
// orders, which can take exponentially long when many transfers overlap
// on a busy account, the more so the later in their intervals their
// effects fall. A witness costs a pass over the account's ops.
func (c *checker) journalWitness(ls []lop) bool {
	entries, ok := c.in.Statements[history.AccountName(ls[0].account)]
	if !ok {
		return false
	}
	type key struct {
		kind lopKind
		id   string
	}
	pending := map[key]lop{}
	var quiet []lop // reads and rejections: no effect on the balance
	for _, l := range ls {
		switch l.kind {
		case lopDebit, lopCredit:
			pending[key{l.kind, c.in.Ops[l.idx].ID}] = l
		default:
			quiet = append(quiet, l)
		}
	}
	// The effects in journal order.
	var effects []lop
	for i, e := range entries {
		var k key
		switch {
		case e.Type == EntryOpened && i == 0 && e.Amount == c.in.InitialBalance:
			continue
		case e.Type == EntryDebit:
			k = key{lopDebit, e.TransferID}
		case e.Type == EntryCredit:
			k = key{lopCredit, e.TransferID}
		default:
			return false // a money event the model has no op for
		}
		l, found := pending[k]
		if !found {
			return false
		}
		delete(pending, k)
		effects = append(effects, l)
	}
	if len(pending) > 0 {
		return false // an op the journal does not hold
	}
	creditsFirst(effects)
	// The balance after each effect: bal[k] after the first k.
	bal := []int64{c.in.InitialBalance}
	for _, l := range effects {
		b := bal[len(bal)-1]
		if l.kind == lopDebit {
			b -= l.amount
		} else {
			b += l.amount
		}
		bal = append(bal, b)
	}

	// Place each quiet op, in call order, at the first position that its
	// interval allows, that no quiet op which returned before it was
	// called follows, and whose balance fits it.
	slices.SortFunc(quiet, func(a, b lop) int { return cmp.Compare(a.call, b.call) })
	pos := make([]int, len(quiet))
	byRet := make([]int, 0, len(quiet)) // placed quiet ops, by return
	floor, done := 0, 0
	for i, q := range quiet {
		// Quiet ops that returned before q was called come before it.
		for done < len(byRet) && quiet[byRet[done]].ret < q.call {
			floor = max(floor, pos[byRet[done]])
			done++
		}
		lo, hi := floor, len(effects)
		for k, e := range effects {
			if e.ret < q.call {
				lo = max(lo, k+1) // returned before q was called: before it
			}
			if e.call > q.ret && k < hi {
				hi = k // called after q returned: after it
			}
		}
		p := -1
		for k := lo; k <= hi; k++ {
			if q.kind == lopRead && bal[k] == c.in.Ops[q.idx].Balance ||
				q.kind == lopReject && bal[k] < q.amount {
				p = k
				break
			}
		}
		if p < 0 {
			return false
		}
		pos[i] = p
		at, _ := slices.BinarySearchFunc(byRet[done:], q.ret, func(j int, ret int64) int { return cmp.Compare(quiet[j].ret, ret) })
		byRet = slices.Insert(byRet, done+at, i)
	}

	// The order: each position's quiet ops, by return, then the effect.
	order := make([]int, len(quiet))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		return cmp.Or(cmp.Compare(pos[a], pos[b]), cmp.Compare(quiet[a].ret, quiet[b].ret))
	})
	seq := make([]lop, 0, len(effects)+len(quiet))
	next := 0
	for k := 0; k <= len(effects); k++ {
		for next < len(order) && pos[order[next]] == k {
			seq = append(seq, quiet[order[next]])
			next++
		}
		if k < len(effects) {
			seq = append(seq, effects[k])
		}
	}
	return c.isLinearization(seq)
}

// creditsFirst moves each credit before the effects next to it in the
// journal that were called after it returned. An account may apply a
// credit later than its transfer was acknowledged: one whose release was
// lost with the account's memory is applied again when its saga settles
// it, and a debit the balance covered may have been applied meanwhile.
// A credit moved earlier leaves every debit after it a larger balance, so
// the order stays legal for the effects; the reads and rejections are
// placed afterwards, and the whole order is checked in the end.
func creditsFirst(effects []lop) {
	for j := range effects {
		if effects[j].kind != lopCredit {
			continue
		}
		i := j
		for i > 0 && effects[i-1].call > effects[i].ret {
			effects[i-1], effects[i] = effects[i], effects[i-1]
			i--
		}
	}
}

// isLinearization reports whether seq, all of one account's ops, is a
// linearization of them: each op legal in turn from the initial balance,
// and none placed after an op that was called after it returned (ops whose
// call equals an earlier op's return are taken as ordered the other way,
// to leave no doubt).
func (c *checker) isLinearization(seq []lop) bool {
	b := c.in.InitialBalance
	maxCall := int64(-1 << 63)
	for _, l := range seq {
		if maxCall >= l.ret {
			return false
		}
		maxCall = max(maxCall, l.call)
		switch l.kind {
		case lopDebit:
			if b < l.amount {
				return false
			}
			b -= l.amount
		case lopCredit:
			b += l.amount
		case lopReject:
			if b >= l.amount {
				return false
			}
		case lopRead:
			if b != c.in.Ops[l.idx].Balance {
				return false
			}
		}
	}
	return true
}
