package check_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ordo-actors/ordo/robustness/check"
	"github.com/ordo-actors/ordo/robustness/history"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const initial = 100

func acct(i int) string { return history.AccountName(i) }

func xfer(client int, id string, from, to int, amount, call, ret int64, outcome history.Outcome, errText string) history.Op {
	return history.Op{Client: client, Op: history.OpTransfer, ID: id, From: acct(from), To: acct(to), Amount: amount,
		Call: call, Ret: ret, Outcome: outcome, Error: errText}
}

func read(client, a int, call, ret, balance int64) history.Op {
	return history.Op{Client: client, Op: history.OpBalance, Account: acct(a), Call: call, Ret: ret, Outcome: history.OK, Balance: balance}
}

func finals(bals ...int64) map[string]int64 {
	m := map[string]int64{}
	for i, b := range bals {
		m[acct(i)] = b
	}
	return m
}

// failing returns the names of the invariants that did not pass.
func failing(r check.Report) []string {
	var out []string
	for _, inv := range r.Invariants {
		if inv.Status != check.StatusPass {
			out = append(out, inv.Name+"="+string(inv.Status))
		}
	}
	return out
}

func TestHandmade(t *testing.T) {
	cases := []struct {
		name     string
		ops      []history.Op
		final    map[string]int64
		resolved map[string]history.Outcome
		want     []string // invariants that must not pass, with their status
		mention  string   // text some violation must contain
	}{
		{
			name:  "sequential transfers and reads",
			ops:   []history.Op{xfer(0, "t1", 0, 1, 10, 10, 20, history.OK, ""), read(1, 0, 30, 40, 90), read(1, 1, 50, 60, 110)},
			final: finals(90, 110),
		},
		{
			name: "overlapping transfers and saga intermediate reads",
			ops: []history.Op{
				xfer(0, "t1", 0, 1, 10, 10, 50, history.OK, ""),
				xfer(1, "t2", 1, 0, 30, 15, 45, history.OK, ""),
				read(2, 0, 20, 30, 90),  // t1 debited, t2 not yet credited
				read(3, 1, 20, 30, 70),  // t2 debited, t1 not yet credited
				read(2, 0, 31, 40, 120), // both applied to account 0
				read(3, 1, 60, 70, 80),
			},
			final: finals(120, 80),
		},
		{
			name: "rejections: insufficient funds and unknown account",
			ops: []history.Op{
				xfer(0, "t1", 0, 1, 80, 10, 20, history.OK, ""),
				xfer(0, "t2", 0, 1, 50, 30, 40, history.Rejected, "bank: insufficient funds"),
				xfer(1, "t3", 1, 5, 10, 30, 40, history.Rejected, "unknown account acct-000005"),
				read(1, 0, 50, 60, 20),
			},
			final: finals(20, 180),
		},
		{
			name: "insufficient funds legal thanks to a concurrent debit",
			ops: []history.Op{
				xfer(0, "t1", 0, 1, 60, 10, 50, history.OK, ""),
				xfer(1, "t2", 0, 1, 60, 20, 30, history.Rejected, "insufficient funds"),
			},
			final: finals(40, 160),
		},
		{
			name: "resolved unknown applied after later reads",
			ops: []history.Op{
				xfer(0, "t1", 0, 1, 10, 10, 20, history.Unknown, "timeout"),
				read(1, 0, 30, 40, 100), // not yet applied
				read(1, 0, 50, 60, 90),  // applied
				read(1, 1, 50, 60, 100), // credit not yet applied
				{Client: 2, Op: history.OpBalance, Account: acct(1), Call: 70, Ret: 80, Outcome: history.Unknown, Error: "timeout"},
			},
			final:    finals(90, 110),
			resolved: map[string]history.Outcome{"t1": history.OK},
		},
		{
			name: "resolved unknown rejected has no effect",
			ops: []history.Op{
				xfer(0, "t1", 0, 1, 10, 10, 20, history.Unknown, "connection reset"),
				read(1, 0, 30, 40, 100),
			},
			final:    finals(100, 100),
			resolved: map[string]history.Outcome{"t1": history.Rejected},
		},
		{
			name: "resolved unknowns applied during the wait, after it, and after the run",
			ops: []history.Op{
				xfer(0, "t1", 0, 1, 10, 10, 20, history.Unknown, "timeout"), // applied at 15
				xfer(1, "t2", 0, 1, 20, 30, 40, history.Unknown, "timeout"), // applied at 55, after giving up
				xfer(2, "t3", 0, 1, 40, 30, 35, history.Unknown, "timeout"), // applied by re-submission
				read(3, 0, 16, 25, 90),
				read(3, 0, 45, 50, 90),
				read(3, 0, 60, 70, 70),
				read(4, 1, 60, 70, 130),
			},
			final:    finals(30, 170),
			resolved: map[string]history.Outcome{"t1": history.OK, "t2": history.OK, "t3": history.OK},
		},
		{
			name: "resolved unknowns that no order explains",
			ops: []history.Op{
				xfer(0, "t1", 0, 1, 10, 10, 20, history.Unknown, "timeout"),
				xfer(1, "t2", 0, 1, 20, 30, 40, history.Unknown, "timeout"),
				read(3, 0, 45, 50, 85), // only 100, 90, 80 or 70 are possible
			},
			final:    finals(70, 130),
			resolved: map[string]history.Outcome{"t1": history.OK, "t2": history.OK},
			want:     []string{"linearizable=fail"},
		},
		{
			name:    "lost transfer",
			ops:     []history.Op{xfer(0, "t1", 0, 1, 10, 10, 20, history.OK, "")},
			final:   finals(100, 100),
			want:    []string{"exactly_once=fail"},
			mention: "final balance 100, want 90",
		},
		{
			name:    "doubled transfer",
			ops:     []history.Op{xfer(0, "t1", 0, 1, 10, 10, 20, history.OK, "")},
			final:   finals(80, 120),
			want:    []string{"exactly_once=fail"},
			mention: "off by -10",
		},
		{
			name: "doubled transfer seen by a read",
			ops: []history.Op{
				xfer(0, "t1", 0, 1, 10, 10, 20, history.OK, ""),
				read(1, 0, 30, 40, 80),
			},
			final: finals(80, 120),
			want:  []string{"exactly_once=fail", "linearizable=fail"},
		},
		{
			name: "stale read after an acked transfer",
			ops: []history.Op{
				xfer(0, "t1", 0, 1, 10, 10, 20, history.OK, ""),
				read(1, 0, 30, 40, 100),
			},
			final:   finals(90, 110),
			want:    []string{"linearizable=fail"},
			mention: "no sequential order",
		},
		{
			name: "read of a balance that never existed",
			ops: []history.Op{
				xfer(0, "t1", 0, 1, 10, 10, 50, history.OK, ""),
				xfer(1, "t2", 0, 1, 20, 10, 50, history.OK, ""),
				read(2, 0, 20, 30, 85), // only 100, 90, 80 or 70 are possible
			},
			final: finals(70, 130),
			want:  []string{"linearizable=fail"},
		},
		{
			name: "resolved unknown un-applied",
			ops: []history.Op{
				xfer(0, "t1", 0, 1, 10, 10, 20, history.Unknown, "timeout"),
				read(1, 0, 30, 40, 90),
				read(1, 0, 50, 60, 100),
			},
			final:    finals(90, 110),
			resolved: map[string]history.Outcome{"t1": history.OK},
			want:     []string{"linearizable=fail"},
		},
		{
			name: "rejection for insufficient funds with plenty of money",
			ops: []history.Op{
				xfer(0, "t1", 0, 1, 10, 10, 20, history.Rejected, "insufficient funds"),
			},
			final: finals(100, 100),
			want:  []string{"linearizable=fail"},
		},
		{
			name: "negative balance",
			ops: []history.Op{
				xfer(0, "t1", 0, 1, 60, 10, 20, history.OK, ""),
				xfer(0, "t2", 0, 1, 60, 30, 40, history.OK, ""),
			},
			final:   finals(-20, 220),
			want:    []string{"non_negative=fail", "linearizable=fail"},
			mention: "final balance -20 is negative",
		},
		{
			name:    "negative balance read",
			ops:     []history.Op{read(0, 0, 10, 20, -5)},
			final:   finals(100, 100),
			want:    []string{"non_negative=fail", "linearizable=fail"},
			mention: "negative balance -5",
		},
		{
			name:    "money created",
			ops:     []history.Op{read(0, 1, 10, 20, 100)},
			final:   finals(100, 110),
			want:    []string{"conservation=fail", "exactly_once=fail"},
			mention: "money created",
		},
		{
			name:    "money lost with a missing account",
			ops:     nil,
			final:   finals(100),
			want:    []string{"history=fail", "conservation=fail"},
			mention: "no final balance given",
		},
		{
			name:    "unresolved unknown",
			ops:     []history.Op{xfer(0, "t1", 0, 1, 10, 10, 20, history.Unknown, "timeout")},
			final:   finals(100, 100),
			want:    []string{"history=fail"},
			mention: "not resolved",
		},
		{
			name: "duplicate transfer id",
			ops: []history.Op{
				xfer(0, "t1", 0, 1, 10, 10, 20, history.OK, ""),
				xfer(0, "t1", 0, 1, 10, 30, 40, history.OK, ""),
			},
			final:   finals(80, 120),
			want:    []string{"history=fail"},
			mention: "already used",
		},
		{
			name:    "ok transfer to an account outside the bank",
			ops:     []history.Op{xfer(0, "t1", 0, 7, 10, 10, 20, history.OK, "")},
			final:   finals(90, 100),
			want:    []string{"history=fail", "conservation=fail", "exactly_once=fail"},
			mention: "outside the bank",
		},
		{
			name:    "malformed op",
			ops:     []history.Op{{Op: "deposit", Call: 1, Ret: 2}},
			final:   finals(100, 100),
			want:    []string{"history=fail"},
			mention: `unknown op "deposit"`,
		},
		{
			name:     "resolution contradicts a definite outcome",
			ops:      []history.Op{xfer(0, "t1", 0, 1, 10, 10, 20, history.OK, "")},
			final:    finals(90, 110),
			resolved: map[string]history.Outcome{"t1": history.Rejected},
			want:     []string{"history=fail"},
			mention:  "re-submission answered rejected",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			accounts := max(len(tc.final), 2)
			r := check.Check(check.Input{Ops: tc.ops, Accounts: accounts, InitialBalance: initial, Final: tc.final,
				Resolved: tc.resolved, Timeout: 10 * time.Second})
			// These cases give no statements (TestStatements checks them).
			got := slices.DeleteFunc(failing(r), func(s string) bool { return s == check.InvStatements+"=skipped" })
			if !slices.Equal(got, tc.want) {
				t.Fatalf("not passing: %v, want %v\n%s", got, tc.want, r)
			}
			if r.OK() != (len(tc.want) == 0) {
				t.Fatalf("OK() = %v with failures %v", r.OK(), got)
			}
			if tc.mention != "" && !strings.Contains(r.String(), tc.mention) {
				t.Fatalf("report does not mention %q:\n%s", tc.mention, r)
			}
		})
	}
}

func TestLostTransferNamesAccounts(t *testing.T) {
	r := check.Check(check.Input{
		Ops:      []history.Op{xfer(0, "t1", 0, 1, 10, 10, 20, history.OK, "")},
		Accounts: 3, InitialBalance: initial, Final: finals(100, 100, 100),
	})
	var got []string
	for _, v := range r.Violations {
		if v.Invariant == check.InvExactlyOnce {
			got = append(got, v.Account)
			if v.Expected == nil || v.Actual == nil || *v.Actual != 100 {
				t.Errorf("violation %+v lacks expected/actual", v)
			}
		}
	}
	if !slices.Equal(got, []string{acct(0), acct(1)}) {
		t.Fatalf("exactly-once violations on %v, want accounts 0 and 1\n%s", got, r)
	}
}

func TestVisualizationWritten(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lin.html")
	ops := []history.Op{
		xfer(0, "t1", 0, 1, 10, 10, 20, history.OK, ""),
		read(1, 0, 30, 40, 100),
		read(1, 2, 30, 40, 100), // a healthy account, left out of the visualisation
	}
	r := check.Check(check.Input{Ops: ops, Accounts: 3, InitialBalance: initial, Final: finals(90, 110, 100), VisualizationPath: path})
	if r.Visualization != path {
		t.Fatalf("Visualization = %q, want %q\n%s", r.Visualization, path, r)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "<html") || !strings.Contains(string(b), "read -\\u003e 100") {
		t.Fatalf("visualisation does not look like porcupine's HTML with our ops (%d bytes)", len(b))
	}

	// A passing history writes nothing.
	ok := filepath.Join(t.TempDir(), "ok.html")
	r = check.Check(check.Input{Ops: ops[:1], Accounts: 2, InitialBalance: initial, Final: finals(90, 110), VisualizationPath: ok})
	if !r.OK() || r.Visualization != "" {
		t.Fatalf("passing history: %s", r)
	}
	if _, err := os.Stat(ok); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("visualisation written for a passing history: %v", err)
	}
}

func TestLinearizabilityTimeoutIsUnknown(t *testing.T) {
	// Open-ended credits with distinct powers of two and a read no subset
	// sum can produce: the search must try every subset, far beyond the
	// budget, and must report unknown rather than illegal or ok.
	var ops []history.Op
	const n = 40
	for i := range n {
		ops = append(ops, xfer(i, "t"+string(rune('A'+i)), 1, 0, int64(1)<<i, 10, 20, history.Unknown, "timeout"))
	}
	resolved := map[string]history.Outcome{}
	for _, op := range ops {
		resolved[op.ID] = history.OK
	}
	ops = append(ops, read(n, 0, 30, 40, -1))
	r := check.Check(check.Input{Ops: ops, Accounts: 2, InitialBalance: 1 << 50, Resolved: resolved, Timeout: 300 * time.Millisecond})
	inv, _ := r.Invariant(check.InvLinearizable)
	if inv.Status != check.StatusUnknown {
		t.Fatalf("linearizable = %s, want unknown\n%s", inv.Status, r)
	}
	if r.OK() {
		t.Fatal("OK() with an unknown linearizability result")
	}
}

func TestReportJSON(t *testing.T) {
	r := check.Check(check.Input{
		Ops: []history.Op{
			xfer(0, "t1", 0, 1, 10, 10, 20, history.OK, ""),
			xfer(0, "t2", 0, 1, 10, 30, 40, history.Unknown, "timeout"),
			read(1, 0, 50, 60, 80),
		},
		Accounts: 2, InitialBalance: initial, Final: finals(80, 120),
		Resolved: map[string]history.Outcome{"t2": history.OK},
	})
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		OK         bool                            `json:"ok"`
		Counts     map[string]map[string]int       `json:"counts"`
		Resolved   map[string]int                  `json:"resolved"`
		Invariants []struct{ Name, Status string } `json:"invariants"`
		Violations []map[string]any                `json:"violations"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if !got.OK || got.Counts["transfer"]["ok"] != 1 || got.Counts["transfer"]["unknown"] != 1 ||
		got.Counts["balance"]["ok"] != 1 || got.Resolved["ok"] != 1 || len(got.Invariants) != 6 ||
		got.Violations == nil || len(got.Violations) != 0 {
		t.Fatalf("unexpected JSON: %s", b)
	}
}

func TestResolve(t *testing.T) {
	ops := []history.Op{
		xfer(0, "t1", 0, 1, 10, 10, 20, history.Unknown, "timeout"),
		xfer(0, "t2", 0, 1, 10, 30, 40, history.OK, ""),
		xfer(1, "t3", 1, 0, 10, 30, 40, history.Unknown, "timeout"),
	}
	if got := check.Unresolved(ops, map[string]history.Outcome{"t3": history.OK}); len(got) != 1 || got[0].ID != "t1" {
		t.Fatalf("Unresolved = %v, want t1 only", got)
	}
	attempts := map[string]int{}
	submit := func(_ context.Context, op history.Op) (history.Outcome, error) {
		attempts[op.ID]++
		switch {
		case op.ID == "t1" && attempts[op.ID] < 3:
			return history.Unknown, nil
		case op.ID == "t3" && attempts[op.ID] < 2:
			return "", errors.New("connection refused")
		case op.ID == "t1":
			return history.OK, nil
		}
		return history.Rejected, nil
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	got, err := check.Resolve(ctx, ops, submit)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got["t1"] != history.OK || got["t3"] != history.Rejected || attempts["t2"] != 0 {
		t.Fatalf("Resolve = %v after attempts %v", got, attempts)
	}

	never := func(context.Context, history.Op) (history.Outcome, error) { return history.Unknown, nil }
	ctx2, cancel2 := context.WithCancel(t.Context())
	cancel2()
	got, err = check.Resolve(ctx2, ops, never)
	if !errors.Is(err, context.Canceled) || len(got) != 0 {
		t.Fatalf("Resolve on a cancelled context = %v, %v", got, err)
	}
}

func ExampleCheck() {
	ops := []history.Op{
		{Client: 0, Op: history.OpTransfer, ID: "t-1", From: "acct-000000", To: "acct-000001", Amount: 10, Call: 10, Ret: 20, Outcome: history.OK},
		{Client: 1, Op: history.OpTransfer, ID: "t-2", From: "acct-000001", To: "acct-000000", Amount: 5, Call: 15, Ret: 30, Outcome: history.Unknown, Error: "timeout"},
		{Client: 2, Op: history.OpBalance, Account: "acct-000000", Call: 40, Ret: 50, Outcome: history.OK, Balance: 100},
	}
	// bank check first re-submits t-2 with the same ID (check.Resolve) and
	// then reads every final balance.
	r := check.Check(check.Input{
		Ops:            ops,
		Accounts:       2,
		InitialBalance: 100,
		Final:          map[string]int64{"acct-000000": 95, "acct-000001": 105},
		Resolved:       map[string]history.Outcome{"t-2": history.OK},
	})
	fmt.Println("ok:", r.OK())
	for _, inv := range r.Invariants {
		fmt.Println(inv.Name, inv.Status)
	}
	for _, v := range r.Violations {
		fmt.Println(v.Invariant, v.Account, v.Message)
	}
	// Output:
	// ok: false
	// history pass
	// conservation pass
	// exactly_once pass
	// non_negative pass
	// linearizable fail
	// statements skipped
	// linearizable acct-000000 no sequential order of the account's 3 ops fits their intervals
}

func TestNoFinalBalances(t *testing.T) {
	r := check.Check(check.Input{
		Ops:      []history.Op{xfer(0, "t1", 0, 1, 10, 10, 20, history.OK, ""), read(1, 0, 30, 40, 90)},
		Accounts: 2, InitialBalance: initial,
	})
	if got := failing(r); !slices.Equal(got, []string{"conservation=skipped", "exactly_once=skipped", "statements=skipped"}) || !r.OK() {
		t.Fatalf("without final balances: %v, OK() = %v\n%s", got, r.OK(), r)
	}
}

func TestBadInputDoesNotPanic(t *testing.T) {
	ops := []history.Op{
		{},
		{Op: history.OpTransfer, ID: "t1", From: "x", To: "y", Amount: -1, Call: 5, Ret: 1, Outcome: "maybe"},
		xfer(0, "t2", 0, 1, 10, 10, 20, history.OK, ""),
		read(0, 3, 10, 20, 7),
	}
	for _, accounts := range []int{-1, 0, 1, history.MaxAccounts + 1} {
		r := check.Check(check.Input{Ops: ops, Accounts: accounts, InitialBalance: -5,
			Final: map[string]int64{"nope": 1, acct(0): 3}, Resolved: map[string]history.Outcome{"zz": "?"}})
		if r.OK() {
			t.Fatalf("accounts %d: bad input passed:\n%s", accounts, r)
		}
		if inv, _ := r.Invariant(check.InvHistory); inv.Status != check.StatusFail {
			t.Fatalf("accounts %d: history = %s", accounts, inv.Status)
		}
	}
	if r := check.Check(check.Input{}); r.OK() {
		t.Fatalf("empty input passed:\n%s", r)
	}
}
