package check

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/ordo-actors/ordo/robustness/history"
)

// Status is the result of checking one invariant.
type Status string

// Invariant statuses.
const (
	// StatusPass means the invariant holds.
	StatusPass Status = "pass"
	// StatusFail means at least one violation was found.
	StatusFail Status = "fail"
	// StatusUnknown means the check could not decide in time (the
	// linearizability search hit its timeout without finding a violation).
	StatusUnknown Status = "unknown"
	// StatusSkipped means the input needed for the check was not given.
	StatusSkipped Status = "skipped"
)

// Invariant is the outcome of one invariant.
type Invariant struct {
	// Name is one of the Inv* constants.
	Name string `json:"name"`
	// Status is pass, fail, unknown or skipped.
	Status Status `json:"status"`
	// Details says what was checked, or why it was not.
	Details string `json:"details,omitempty"`
	// Violations is the total number of violations found, including those
	// beyond MaxListed that the report does not list.
	Violations int `json:"violations"`
}

// Violation is one broken invariant instance.
type Violation struct {
	// Invariant is the name of the broken invariant.
	Invariant string `json:"invariant"`
	// Account is the account concerned, if any.
	Account string `json:"account,omitempty"`
	// ID is the transfer concerned, if any.
	ID string `json:"id,omitempty"`
	// Op is the 1-based position of the op concerned in Input.Ops, or 0.
	Op int `json:"op,omitempty"`
	// Expected is the value the invariant requires, when there is one.
	Expected *int64 `json:"expected,omitempty"`
	// Actual is the value found, when there is one.
	Actual *int64 `json:"actual,omitempty"`
	// Message describes the violation.
	Message string `json:"message"`
}

// Report is the result of Check. It marshals to a JSON summary with an
// "ok" field equal to OK(). A Report is a plain value, safe to read from
// several goroutines.
type Report struct {
	// Ops is the number of ops in the history.
	Ops int `json:"ops"`
	// Accounts is the number of accounts of the bank.
	Accounts int `json:"accounts"`
	// InitialBalance is the opening balance of every account.
	InitialBalance int64 `json:"initial_balance"`
	// Counts counts the ops by kind and recorded outcome.
	Counts map[history.Kind]map[history.Outcome]int `json:"counts"`
	// Resolved counts the transfers recorded as unknown by final outcome;
	// "unknown" counts those left unresolved.
	Resolved map[history.Outcome]int `json:"resolved,omitempty"`
	// Invariants lists every invariant in a fixed order.
	Invariants []Invariant `json:"invariants"`
	// Violations lists up to MaxListed violations per invariant.
	Violations []Violation `json:"violations"`
	// LinearizabilityElapsed is how long the porcupine search took, in
	// nanoseconds in JSON.
	LinearizabilityElapsed time.Duration `json:"linearizability_elapsed_ns"`
	// Visualization is the path of the porcupine HTML visualisation, when
	// one was written.
	Visualization string `json:"visualization,omitempty"`
}

// OK reports whether every invariant passed or was skipped. An unknown
// linearizability result is not OK.
func (r Report) OK() bool {
	for _, inv := range r.Invariants {
		if inv.Status != StatusPass && inv.Status != StatusSkipped {
			return false
		}
	}
	return len(r.Invariants) > 0
}

// Invariant returns the invariant named name.
func (r Report) Invariant(name string) (Invariant, bool) {
	for _, inv := range r.Invariants {
		if inv.Name == name {
			return inv, true
		}
	}
	return Invariant{}, false
}

// MarshalJSON encodes r with an additional "ok" field.
func (r Report) MarshalJSON() ([]byte, error) {
	type plain Report // no methods: avoids recursion
	v := struct {
		OK bool `json:"ok"`
		plain
	}{r.OK(), plain(r)}
	if v.Violations == nil {
		v.Violations = []Violation{}
	}
	return json.Marshal(v)
}

// String returns a short multi-line human-readable summary.
func (r Report) String() string {
	var b strings.Builder
	verdict := "OK"
	if !r.OK() {
		verdict = "FAILED"
	}
	fmt.Fprintf(&b, "bank check %s: %d ops, %d accounts, initial balance %d\n", verdict, r.Ops, r.Accounts, r.InitialBalance)
	for _, inv := range r.Invariants {
		fmt.Fprintf(&b, "  %-13s %-7s", inv.Name, inv.Status)
		if inv.Violations > 0 {
			fmt.Fprintf(&b, " %d violations", inv.Violations)
		}
		if inv.Details != "" {
			fmt.Fprintf(&b, " (%s)", inv.Details)
		}
		b.WriteByte('\n')
	}
	for _, v := range r.Violations {
		fmt.Fprintf(&b, "  - %s", v.Invariant)
		if v.Account != "" {
			fmt.Fprintf(&b, " %s", v.Account)
		}
		if v.ID != "" {
			fmt.Fprintf(&b, " %s", v.ID)
		}
		fmt.Fprintf(&b, ": %s\n", v.Message)
	}
	if r.Visualization != "" {
		fmt.Fprintf(&b, "  visualisation: %s\n", r.Visualization)
	}
	return b.String()
}
