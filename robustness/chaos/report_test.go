package chaos

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/robustness/check"
	"github.com/ordo-actors/ordo/robustness/history"
)

func TestPercentiles(t *testing.T) {
	if p := percentiles(nil); p != (Percentiles{}) {
		t.Fatalf("empty %+v", p)
	}
	p := percentiles([]int64{5, 1, 4, 2, 3})
	if p.N != 5 || p.P50 != 3 || p.P99 != 5 || p.Max != 5 {
		t.Fatalf("%+v", p)
	}
	ms := make([]int64, 200)
	for i := range ms {
		ms[i] = int64(i + 1)
	}
	if p := percentiles(ms); p.P50 != 100 || p.P99 != 198 || p.Max != 200 {
		t.Fatalf("%+v", p)
	}
}

func TestCountOps(t *testing.T) {
	path := filepath.Join(t.TempDir(), "h.jsonl")
	w, err := history.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	a, b := history.AccountName(0), history.AccountName(1)
	for _, op := range []history.Op{
		{Client: 0, Op: history.OpTransfer, ID: "t1", From: a, To: b, Amount: 1, Call: 1, Ret: 2, Outcome: history.OK},
		{Client: 0, Op: history.OpTransfer, ID: "t2", From: a, To: b, Amount: 1, Call: 3, Ret: 4, Outcome: history.Unknown, Error: "timeout"},
		{Client: 1, Op: history.OpBalance, Account: a, Call: 1, Ret: 2, Outcome: history.OK, Balance: 5},
	} {
		if err := w.Append(op); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := countOps(path)
	if err != nil {
		t.Fatal(err)
	}
	if got[history.OpTransfer][history.OK] != 1 || got[history.OpTransfer][history.Unknown] != 1 || got[history.OpBalance][history.OK] != 1 {
		t.Fatalf("%v", got)
	}
	// A torn last line: the ops before it are counted, with an error.
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"client":1,"op":"bal`)
	f.Close()
	got, err = countOps(path)
	if err == nil || got[history.OpTransfer][history.OK] != 1 {
		t.Fatalf("torn: %v %v", got, err)
	}
}

func TestReportVerdict(t *testing.T) {
	dir := t.TempDir()
	checkPath := filepath.Join(dir, "check.json")
	cr := check.Report{Ops: 3, Invariants: []check.Invariant{{Name: "conservation", Status: check.StatusPass}, {Name: "exactly_once", Status: check.StatusPass}}}
	b, _ := json.Marshal(cr)
	os.WriteFile(checkPath, b, 0o644)

	start := time.Now()
	rep := &Report{Seed: 7, Duration: "45s", Store: "etcd", Nodes: 3, EtcdMembers: 3, FencedWrites: 4, Dir: dir,
		Faults: []FaultReport{
			{Fault: Fault{Index: 0, Kind: KindPause, Node: 1, Member: -2, At: 4 * time.Second}, Target: "n2", Start: start, End: start.Add(5 * time.Second), Probed: []string{"acct-000001"}, Recovered: true, RecoveryMS: 4100, FencedWrites: 4},
			{Fault: Fault{Index: 1, Kind: KindKill, Node: 0, Member: -2, At: 12 * time.Second}, Target: "n1", Start: start, End: start.Add(time.Second), Probed: []string{"acct-000002"}, Recovered: true, RecoveryMS: 2100},
			{Fault: Fault{Index: 2, Kind: KindEtcd, Node: -1, Member: -1, At: 20 * time.Second}, Target: "etcd leader e2", Start: start, End: start.Add(time.Second), Probed: []string{"acct-000003"}, Recovered: true, RecoveryMS: 900},
		},
		Ops: map[history.Kind]map[history.Outcome]int{history.OpTransfer: {history.OK: 10, history.Unknown: 1}}}
	if err := readCheckReport(checkPath, &rep.Check); err != nil {
		t.Fatal(err)
	}
	rep.finish()
	if !rep.OK || rep.Violations != 0 || rep.Recovery.N != 2 || rep.Recovery.P50 != 2100 || rep.Recovery.P99 != 4100 || len(rep.Notes) != 0 {
		t.Fatalf("%+v", rep)
	}
	sum := rep.Summary()
	for _, want := range []string{"PASS", "seed 7", "pause", "n2", "recovered in 4100 ms, 4 fenced writes", "etcd leader e2", "fenced writes 4", "p50 2100 ms p99 4100 ms"} {
		if !strings.Contains(sum, want) {
			t.Errorf("summary lacks %q:\n%s", want, sum)
		}
	}
	path := filepath.Join(dir, "r.json")
	if err := rep.write(path); err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	b, _ = os.ReadFile(path)
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"seed", "faults", "ops", "check", "violations", "fenced_writes", "recovery_ms", "ok"} {
		if _, ok := back[k]; !ok {
			t.Errorf("report lacks %q", k)
		}
	}
	f0 := back["faults"].([]any)[0].(map[string]any)
	for _, k := range []string{"kind", "target", "start", "end", "recovery_ms", "fenced_writes"} {
		if _, ok := f0[k]; !ok {
			t.Errorf("fault lacks %q", k)
		}
	}

	// A violation, an unrecovered fault, a pause without fencing.
	rep.Check.Invariants[1] = check.Invariant{Name: "exactly_once", Status: check.StatusFail, Violations: 2}
	rep.Check.OK = false
	rep.Faults[1].Recovered = false
	rep.FencedWrites = 0
	rep.Faults[0].FencedWrites = 0
	rep.Notes = nil
	rep.finish()
	if rep.OK || rep.Violations != 2 || len(rep.Notes) != 2 || !strings.Contains(rep.Summary(), "FAIL") {
		t.Fatalf("%+v", rep)
	}
	// A fault that could not be injected fails the run.
	rep = &Report{Check: CheckVerdict{OK: true}, Faults: []FaultReport{{Fault: Fault{Kind: KindKill, Node: 0}, Error: "boom"}}}
	rep.finish()
	if rep.OK {
		t.Fatal("failed injection passed")
	}
	if err := readCheckReport(filepath.Join(dir, "missing.json"), &rep.Check); err == nil {
		t.Fatal("missing check report read")
	}
}
