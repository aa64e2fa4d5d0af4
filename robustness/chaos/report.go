package chaos

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/ordo-actors/ordo/robustness/check"
	"github.com/ordo-actors/ordo/robustness/history"
)

// Report is the JSON report of a run.
type Report struct {
	// Seed replays the run's schedule.
	Seed uint64 `json:"seed"`
	// Duration is the load's duration.
	Duration string `json:"duration"`
	// Store, Nodes, EtcdMembers and LeaseTTL describe the cluster.
	Store       string `json:"store"`
	Nodes       int    `json:"nodes"`
	EtcdMembers int    `json:"etcd_members"`
	LeaseTTL    string `json:"lease_ttl"`
	// Kinds are the fault kinds drawn from.
	Kinds []Kind `json:"kinds"`
	// Proxied says which connections go through fault proxies.
	Proxied string `json:"proxied"`
	// LoadStart is when the load started; fault offsets (at_ns) are from
	// it.
	LoadStart time.Time `json:"load_start"`
	// Faults lists every injected fault.
	Faults []FaultReport `json:"faults"`
	// Ops counts the history's ops by kind and outcome.
	Ops map[history.Kind]map[history.Outcome]int `json:"ops"`
	// Sagas is what became of the transfers left unknown, before the
	// check resubmitted them.
	Sagas Sagas `json:"sagas"`
	// Unavailable lists the accounts whose balance could not be read after
	// the heal (each read bounded by 3 s): entities the cluster lost track
	// of.
	Unavailable []string `json:"unavailable,omitempty"`
	// UnservedShards lists the shards in which no entity answered after
	// the heal (each probe bounded by 3 s): held in placement, served by
	// no host.
	UnservedShards []uint32 `json:"unserved_shards,omitempty"`
	// UnservedLocks says, for each unserved shard, who holds its lock in
	// etcd (node, epoch, lease) and which nodes' placement claims it.
	UnservedLocks []string `json:"unserved_locks,omitempty"`
	// Check is the `bank check` verdict.
	Check CheckVerdict `json:"check"`
	// Violations is the total of violations the check found.
	Violations int `json:"violations"`
	// FencedWrites is the number of writes rejected by fencing, summed
	// over every node incarnation (ordo_fenced_writes_total).
	FencedWrites int64 `json:"fenced_writes"`
	// FencedByNode splits FencedWrites by node.
	FencedByNode map[string]int64 `json:"fenced_by_node"`
	// Recovery summarises the recovery times of the faults that affect a
	// node's entities (kill, pause, partition), in milliseconds.
	Recovery Percentiles `json:"recovery_ms"`
	// Notes lists anything that weakens the run's evidence.
	Notes []string `json:"notes,omitempty"`
	// Dir is the run directory (logs, history, check report).
	Dir string `json:"dir"`
	// OK is true when the check passed with no violation and every fault
	// was injected and healed.
	OK bool `json:"ok"`
}

// CheckVerdict is what `bank check` reported.
type CheckVerdict struct {
	// OK is the checker's verdict.
	OK bool `json:"ok"`
	// ExitCode is the check command's exit code.
	ExitCode int `json:"exit_code"`
	// Invariants lists each invariant's status.
	Invariants []check.Invariant `json:"invariants,omitempty"`
	// Resolved counts the unknown transfers by resolved outcome.
	Resolved map[history.Outcome]int `json:"resolved,omitempty"`
	// Error says why the check could not run or be read, if so.
	Error string `json:"error,omitempty"`
	// Report is the path of the checker's own JSON report.
	Report string `json:"report,omitempty"`
	// ElapsedMS is how long the check command ran (resolving unknown
	// transfers, reading balances, checking).
	ElapsedMS int64 `json:"elapsed_ms"`
}

// Percentiles of a set of durations in milliseconds.
type Percentiles struct {
	N   int   `json:"n"`
	P50 int64 `json:"p50"`
	P99 int64 `json:"p99"`
	Max int64 `json:"max"`
}

// percentiles uses the nearest-rank method.
func percentiles(ms []int64) Percentiles {
	if len(ms) == 0 {
		return Percentiles{}
	}
	s := append([]int64(nil), ms...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	rank := func(p float64) int64 {
		i := int(p*float64(len(s))+0.999999) - 1
		if i < 0 {
			i = 0
		}
		if i >= len(s) {
			i = len(s) - 1
		}
		return s[i]
	}
	return Percentiles{N: len(s), P50: rank(0.50), P99: rank(0.99), Max: s[len(s)-1]}
}

// countOps counts a history file's ops by kind and outcome. A torn last
// line (a load killed mid-write) ends the count with an error.
func countOps(path string) (map[history.Kind]map[history.Outcome]int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[history.Kind]map[history.Outcome]int{}
	rd := history.NewReader(f)
	for {
		op, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		if out[op.Op] == nil {
			out[op.Op] = map[history.Outcome]int{}
		}
		out[op.Op][op.Outcome]++
	}
}

// readCheckReport reads the checker's JSON report into v.
func readCheckReport(path string, v *CheckVerdict) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var r struct {
		OK         bool                    `json:"ok"`
		Invariants []check.Invariant       `json:"invariants"`
		Resolved   map[history.Outcome]int `json:"resolved"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return fmt.Errorf("chaos: check report %s: %w", path, err)
	}
	v.OK, v.Invariants, v.Resolved = r.OK, r.Invariants, r.Resolved
	return nil
}

// finish fills the derived fields: violations, recovery percentiles, notes
// and the verdict.
func (rep *Report) finish() {
	rep.Violations = 0
	for _, inv := range rep.Check.Invariants {
		rep.Violations += inv.Violations
	}
	var rec []int64
	pauses := 0
	faultsOK := true
	for _, f := range rep.Faults {
		if f.Error != "" {
			faultsOK = false
			rep.Notes = append(rep.Notes, fmt.Sprintf("fault #%d (%s %s): %s", f.Index, f.Kind, f.Target, f.Error))
		}
		if len(f.Probed) > 0 && !f.Recovered {
			rep.Notes = append(rep.Notes, fmt.Sprintf("fault #%d (%s %s): entities did not answer again in time", f.Index, f.Kind, f.Target))
		}
		if f.Node >= 0 && len(f.Probed) > 0 && f.Recovered {
			rec = append(rec, f.RecoveryMS)
		}
		if f.Kind == KindPause && f.Error == "" {
			pauses++
		}
	}
	rep.Recovery = percentiles(rec)
	if pauses > 0 && rep.FencedWrites == 0 {
		rep.Notes = append(rep.Notes, "pauses happened but no write was rejected by fencing: no stale write reached the store this run")
	}
	for _, f := range rep.Faults {
		if f.Kind == KindPause && f.Error == "" && f.FencedWrites == 0 && rep.FencedWrites > 0 {
			rep.Notes = append(rep.Notes, fmt.Sprintf("pause #%d of %s: no write rejected by fencing in its window", f.Index, f.Target))
		}
	}
	if rep.Sagas.SettledMS < 0 && rep.Sagas.Unknown > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("%d transfers left unknown were still not final long after the load: %v", len(rep.Sagas.Pending), rep.Sagas.Pending))
	}
	if len(rep.UnservedShards) > 0 {
		note := fmt.Sprintf("%d shards were served by no node after the heal: %v", len(rep.UnservedShards), rep.UnservedShards)
		if len(rep.UnservedLocks) > 0 {
			note += " (" + strings.Join(rep.UnservedLocks, "; ") + ")"
		}
		rep.Notes = append(rep.Notes, note)
	}
	if len(rep.Unavailable) > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("%d accounts did not answer after the heal: %v", len(rep.Unavailable), rep.Unavailable))
	}
	rep.OK = rep.Check.OK && rep.Check.Error == "" && rep.Violations == 0 && faultsOK
}

// Summary is a short human-readable account of the report.
func (rep *Report) Summary() string {
	var b strings.Builder
	verdict := "PASS"
	if !rep.OK {
		verdict = "FAIL"
	}
	fmt.Fprintf(&b, "bank chaos %s: seed %d, %s, %d nodes, %d etcd members, store %s\n", verdict, rep.Seed,
		rep.Duration, rep.Nodes, rep.EtcdMembers, rep.Store)
	for _, f := range rep.Faults {
		status := fmt.Sprintf("recovered in %d ms", f.RecoveryMS)
		if !f.Recovered {
			status = "NOT recovered"
		}
		if f.Error != "" {
			status = "error: " + f.Error
		}
		fmt.Fprintf(&b, "  #%-2d %-9s %-16s +%5.1fs for %5.1fs  %s, %d fenced writes\n", f.Index, f.Kind, f.Target,
			f.At.Seconds(), f.End.Sub(f.Start).Seconds(), status, f.FencedWrites)
	}
	kinds := make([]string, 0, len(rep.Ops))
	for k := range rep.Ops {
		kinds = append(kinds, string(k))
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		m := rep.Ops[history.Kind(k)]
		fmt.Fprintf(&b, "  ops %-8s ok %d, rejected %d, unknown %d\n", k, m[history.OK], m[history.Rejected], m[history.Unknown])
	}
	fmt.Fprintf(&b, "  %v\n", rep.Sagas)
	checkVerdict := "pass"
	if !rep.Check.OK {
		checkVerdict = "FAIL"
	}
	if rep.Check.Error != "" {
		checkVerdict = "error: " + rep.Check.Error
	}
	fmt.Fprintf(&b, "  check %s, violations %d, fenced writes %d, recovery p50 %d ms p99 %d ms (n=%d)\n",
		checkVerdict, rep.Violations, rep.FencedWrites, rep.Recovery.P50, rep.Recovery.P99, rep.Recovery.N)
	for _, inv := range rep.Check.Invariants {
		fmt.Fprintf(&b, "    %-13s %s\n", inv.Name, inv.Status)
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(&b, "  note: %s\n", n)
	}
	fmt.Fprintf(&b, "  run directory %s\n", rep.Dir)
	return b.String()
}

// write writes the report as indented JSON.
func (rep *Report) write(path string) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
