package soak

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/ordo-actors/ordo/robustness/chaos"
)

// Report is soak.json: every series, the faults, the client latency per
// interval, the drain of the pending Forgets, the chaos run's report (the
// check's verdict) and the soak's verdict.
type Report struct {
	// OK is the verdict: see Rule.
	OK bool `json:"ok"`
	// Rule states the pass rule.
	Rule string `json:"rule"`
	// Failures says why the run failed; Notes what weakens its evidence.
	Failures []string `json:"failures,omitempty"`
	Notes    []string `json:"notes,omitempty"`

	Seed          uint64 `json:"seed"`
	Store         string `json:"store"`
	Duration      string `json:"duration"`
	FaultInterval string `json:"fault_interval"`
	SampleEvery   string `json:"sample_every"`
	IdleTimeout   string `json:"idle_timeout"`
	// LoadStart is when the load started; every time in the report is in
	// seconds since then.
	LoadStart time.Time `json:"load_start"`
	// LoadEndS is when the load process exited.
	LoadEndS float64 `json:"load_end_s"`
	// WindowS is the judged window: the end of the load's duration less
	// the window, and that end.
	WindowS [2]float64 `json:"window_s"`
	// SettleS is the warm-up left out after each process start.
	SettleS float64 `json:"settle_s"`

	Series []Series `json:"series"`
	// Lifetimes gives, for each process, the start of each incarnation.
	Lifetimes map[string]map[int]float64 `json:"lifetimes"`
	Faults    []Fault                    `json:"faults"`
	Latency   []Bucket                   `json:"latency"`
	Drain     Drain                      `json:"drain"`
	// Chaos is the chaos run's own report (check verdict, faults'
	// recovery, fenced writes).
	Chaos *chaos.Report `json:"chaos"`
	// Dir is the run directory.
	Dir string `json:"dir"`
}

// Series is one series of one process (or of the cluster).
type Series struct {
	Name    string `json:"name"`
	Process string `json:"process"`
	// Unit is "bytes" or "" (a count).
	Unit   string  `json:"unit,omitempty"`
	Points []Point `json:"points"`
	// Fit is the verdict of the bounded-growth rule, for judged series.
	Fit *Fit `json:"fit,omitempty"`
	// Unjudged says why the series is shown but not judged.
	Unjudged string `json:"unjudged,omitempty"`
	// Member is true for an etcd member's series (false: a node's or the
	// cluster's).
	Member bool `json:"member,omitempty"`
}

// Fault is one injected fault.
type Fault struct {
	Index      int     `json:"index"`
	Kind       string  `json:"kind"`
	Target     string  `json:"target"`
	AtS        float64 `json:"at_s"`
	EndS       float64 `json:"end_s"`
	Recovered  bool    `json:"recovered"`
	RecoveryMS int64   `json:"recovery_ms"`
	Error      string  `json:"error,omitempty"`
}

// spec is how a series is shown and judged.
type spec struct {
	name, title string
	// panel is the name of the series whose chart panel it is drawn in
	// ("": its own).
	panel string
	bytes bool
	// floor is the growth over the window always allowed.
	floor float64
	// memory is true for the memory series, judged only when the window
	// starts after Config.MemoryFilled.
	memory bool
	// unjudged says why the series of a process (the cluster, an etcd
	// member or a node) in a cluster with store is not judged, "" when it
	// is.
	unjudged func(process string, member bool, store string) string
}

func judged(string, bool, string) string { return "" }

// byDesign is the reason the series that follow the store's transfer
// records are not judged.
const byDesign = "grows with the transfer records, which the bank keeps (one per transfer ever submitted, never deleted)"

// keeps is the reason a node's resident memory is not judged. A node
// collects garbage at 5× its live heap (the bank's GOGC 400), and the Go
// runtime returns freed pages to the system over minutes: its RSS follows
// the highest heap goal since it started, a ratchet that one moment's
// burst of garbage (a fault's failover, a handoff) raises by five times
// the burst. In a 2-minute soak (seed 88235) a node's RSS grew 39 MiB
// while its live heap grew 4 MiB. A leak grows the live heap, or the
// goroutines whose stacks RSS also counts, and both are judged.
const keeps = "follows the highest heap goal since the node started (5× the live heap at GOGC 400; freed pages go back " +
	"over minutes): its live heap is judged"

// moves is the reason per-node entity counts are not judged.
const moves = "moves between nodes with the shards: the cluster's "

// seriesActiveExcess is derived from the nodes' active entities: their
// sum less the accounts and the transfers submitted within the last
// passivation delay (see build).
const seriesActiveExcess = "active_entities_excess"

// seriesDedupExcess is derived from the nodes' dedup entries: their sum
// less the active entities (see build).
const seriesDedupExcess = "dedup_entries_excess"

// sweepFactor is the mean passivation delay in idle timeouts: the host
// sweeps its entities every quarter of the idle timeout, so an entity
// stops between one and 1.25 idle timeouts after its last message.
const sweepFactor = 1.125

var specs = []spec{
	{seriesRSS, "resident memory (MiB)", "", true, 32 << 20, true, func(_ string, member bool, store string) string {
		switch {
		case !member:
			return keeps
		case store == "etcd":
			return "etcd member with the etcd store: " + byDesign
		}
		return ""
	}},
	{seriesHeapLive, "Go live heap (MiB)", "", true, 8 << 20, true, judged},
	{seriesGoroutines, "goroutines", "", false, 50, false, judged},
	{seriesFDs, "open file descriptors", "", false, 16, false, judged},
	{seriesActive, "active entities", "", false, 0, false, func(p string, _ bool, _ string) string {
		if p == clusterWide {
			return "follows the load (one entity per recent transfer): its excess is judged"
		}
		return moves + "excess is judged"
	}},
	{seriesActiveExcess, "active entities", seriesActive, false, 200, false, judged},
	{seriesDedup, "dedup entries in memory", "", false, 0, false, func(p string, _ bool, _ string) string {
		if p == clusterWide {
			return "follows the load (one entry per transfer entity, a full window per account): its excess over the active entities is judged"
		}
		return moves + "excess over the active entities is judged"
	}},
	{seriesDedupExcess, "dedup entries in memory", seriesDedup, false, 2000, false, judged},
	{seriesPending, "pending Forgets (transfer IDs held by accounts)", "", false, 50, false, judged},
	{seriesEtcdKeys, "etcd keys (transfer records and journals excepted)", "", false, 50, false, judged},
	{seriesTransfers, "transfer records in the store", "", false, 0, false, func(string, bool, string) string { return byDesign }},
	{seriesEtcdDB, "etcd database file (MiB)", "", true, 32 << 20, false, func(_ string, _ bool, store string) string {
		if store == "etcd" {
			return "with the etcd store it " + byDesign
		}
		return ""
	}},
}

func specOf(name string) spec {
	for _, s := range specs {
		if s.name == name {
			return s
		}
	}
	return spec{name: name, title: name, unjudged: func(string, bool, string) string { return "no rule" }}
}

// ruleText states the pass rule of cfg.
func ruleText(cfg Config) string {
	return fmt.Sprintf("A soak passes when bank check passes (no violation, every fault injected and healed), when "+
		"within %v after the check the accounts hold no transfer ID (every Forget applied), and when no judged "+
		"series grows in the judged window, the last %v of the load: for each series and process, the Theil-Sen "+
		"slope (the median of the slopes between every two readings of the same process lifetime, leaving out "+
		"the first %v after each start) times the window's length must not exceed both %.0f%% of the series' "+
		"median in the window and the series' floor. Judged: each node's Go live heap (floor 8 MiB: what the last "+
		"garbage collection found in use; its RSS, up to 5 times that and slow to shrink, is shown), goroutines (50) and "+
		"open descriptors (16); each etcd member's descriptors, and with the postgres store its RSS and database "+
		"file (32 MiB); the cluster's dedup entries in memory beyond one per active entity (2000: each transfer entity holds "+
		"one entry, each account a window that the load fills within seconds, so this excess is the accounts' windows and "+
		"is flat however the load moves), pending Forgets (50) and etcd keys other "+
		"than transfer records and the accounts' journals (50); the memory series only when the window starts %v or more "+
		"into the load, as the memory fills until then; and the cluster's active entities in excess of the accounts and of the "+
		"transfers submitted within the last %.3g idle timeouts (each transfer is an entity that passivates "+
		"that long after its last message), whose growth may not exceed %.0f%% of the active entities nor 200 "+
		"unless it ends within that limit (entities a fault took coming back). "+
		"Entity counts are judged for the cluster, not per node, as shards move between nodes with the faults. "+
		"Series that follow the transfer records and the accounts' events, which the bank keeps by design, are "+
		"shown but not judged; so "+
		"is the client latency.",
		cfg.Drain, cfg.Window, cfg.Settle, cfg.Rel*100, cfg.MemoryFilled, sweepFactor, cfg.Rel*100)
}

// build judges the samples of s, the chaos report crep and the history's
// latency buckets lat and transfer submissions calls (seconds since the
// load started, sorted) into a Report.
func build(cfg Config, crep *chaos.Report, s *sampler, lat []Bucket, calls []float64) *Report {
	s.mu.Lock()
	defer s.mu.Unlock()
	end := cfg.Chaos.Duration.Seconds()
	rep := &Report{Rule: ruleText(cfg), Seed: cfg.Chaos.Seed, Store: cfg.Chaos.Store,
		Duration: cfg.Chaos.Duration.String(), FaultInterval: cfg.Chaos.Interval.String(),
		SampleEvery: cfg.SampleEvery.String(), IdleTimeout: cfg.IdleTimeout.String(), LoadStart: s.start,
		LoadEndS: s.loadEnd, WindowS: [2]float64{end - cfg.Window.Seconds(), end}, SettleS: cfg.Settle.Seconds(),
		Lifetimes: s.starts, Latency: lat, Chaos: crep, Dir: crep.Dir}
	if s.drained != nil {
		rep.Drain = *s.drained
	} else {
		rep.Drain = Drain{Pending: -1}
	}
	for _, f := range crep.Faults {
		rep.Faults = append(rep.Faults, Fault{Index: f.Index, Kind: string(f.Kind), Target: f.Target,
			AtS: f.Start.Sub(s.start).Seconds(), EndS: f.End.Sub(s.start).Seconds(), Recovered: f.Recovered,
			RecoveryMS: f.RecoveryMS, Error: f.Error})
	}

	points := maps.Clone(s.points)
	var nodes []string
	for p, member := range s.members {
		if !member {
			nodes = append(nodes, p)
		}
	}
	for _, name := range []string{seriesActive, seriesDedup} {
		if total := sumOver(points, name, nodes); len(total) > 0 {
			points[seriesKey{name, clusterWide}] = total
		}
	}
	// The active entities beyond the accounts and the transfers begun
	// within the last sweepFactor idle timeouts.
	recent := func(at float64) int {
		lo := sort.SearchFloat64s(calls, at-sweepFactor*cfg.IdleTimeout.Seconds())
		return sort.SearchFloat64s(calls, at) - lo
	}
	var excess []Point
	for _, p := range points[seriesKey{seriesActive, clusterWide}] {
		excess = append(excess, Point{At: p.At, V: p.V - float64(cfg.Chaos.Accounts+recent(p.At))})
	}
	if len(excess) > 0 && len(calls) > 0 {
		points[seriesKey{seriesActiveExcess, clusterWide}] = excess
	}
	// The dedup entries beyond one per active entity, from the readings
	// that counted both (one status each).
	activeAt := map[float64]float64{}
	for _, p := range points[seriesKey{seriesActive, clusterWide}] {
		activeAt[p.At] = p.V
	}
	var dedupExcess []Point
	for _, p := range points[seriesKey{seriesDedup, clusterWide}] {
		if a, ok := activeAt[p.At]; ok {
			dedupExcess = append(dedupExcess, Point{At: p.At, V: p.V - a})
		}
	}
	if len(dedupExcess) > 0 {
		points[seriesKey{seriesDedupExcess, clusterWide}] = dedupExcess
	}

	keys := slices.Collect(maps.Keys(points))
	order := map[string]int{}
	for i, sp := range specs {
		order[sp.name] = i
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].name != keys[j].name {
			return order[keys[i].name] < order[keys[j].name]
		}
		return keys[i].process < keys[j].process
	})
	rule := Rule{From: rep.WindowS[0], To: rep.WindowS[1], Slack: 1, Settle: cfg.Settle.Seconds(), Rel: cfg.Rel,
		MinPoints: 3, MinSpan: cfg.Window.Seconds() / 4}
	for _, k := range keys {
		sp := specOf(k.name)
		ser := Series{Name: k.name, Process: k.process, Points: points[k], Member: s.members[k.process]}
		if sp.bytes {
			ser.Unit = "bytes"
		}
		why := sp.unjudged(k.process, s.members[k.process], cfg.Chaos.Store)
		if why == "" && sp.memory && rep.WindowS[0] < cfg.MemoryFilled.Seconds() {
			why = fmt.Sprintf("the window starts %.0f s into the load, before the memory has filled (for about %v): "+
				"memory is judged in soaks of %v or more", rep.WindowS[0], cfg.MemoryFilled, 2*cfg.MemoryFilled)
		}
		if why != "" {
			ser.Unjudged = why
			rep.Series = append(rep.Series, ser)
			continue
		}
		r := rule
		r.Floor = sp.floor
		if k.name == seriesActiveExcess {
			// Its own level is near zero: the limit is a share of the
			// active entities.
			var in []float64
			for _, p := range points[seriesKey{seriesActive, clusterWide}] {
				if p.At >= r.From && p.At <= r.To+r.Slack {
					in = append(in, p.V)
				}
			}
			if len(in) > 0 {
				r.Floor = max(r.Floor, cfg.Rel*median(in))
			}
			r.Rel = 0
		}
		fit := Judge(ser.Points, s.starts[k.process], r)
		if k.name == seriesActiveExcess && fit.Judged && !fit.OK {
			// An excess that rises but ends within its limit is the
			// cluster getting back the entities a fault took (shards that
			// moved and were re-activated), not entities kept too long.
			if last, ok := lastIn(ser.Points, r.From, r.To+r.Slack); ok && last <= fit.Limit {
				fit.OK = true
				rep.Notes = append(rep.Notes, fmt.Sprintf("%s of %s rises %.0f over the window but ends at %.0f, within its limit %.0f: a recovery, not a leak",
					k.name, k.process, fit.Growth, last, fit.Limit))
			}
		}
		ser.Fit = &fit
		switch {
		case !fit.Judged:
			rep.Notes = append(rep.Notes, fmt.Sprintf("%s of %s not judged: %s", k.name, k.process, fit.Why))
		case !fit.OK:
			rep.Failures = append(rep.Failures, fmt.Sprintf("%s of %s %s", k.name, k.process, fit.Why))
		}
		rep.Series = append(rep.Series, ser)
	}
	switch {
	case rep.Drain.Pending < 0:
		rep.Failures = append(rep.Failures, "the pending Forgets could not be read after the check")
	case rep.Drain.Pending > 0:
		rep.Failures = append(rep.Failures, fmt.Sprintf("%d transfer IDs still held by accounts %.0f s after the load "+
			"(Forgets never applied): %s", rep.Drain.Pending, rep.Drain.AtS-end, strings.Join(rep.Drain.Leftover, ", ")))
	}
	if !crep.OK {
		rep.Failures = append(rep.Failures, fmt.Sprintf("the chaos run failed: check ok=%v, %d violations, notes: %s",
			crep.Check.OK, crep.Violations, strings.Join(crep.Notes, "; ")))
	} else {
		rep.Notes = append(rep.Notes, crep.Notes...)
	}
	if len(rep.Faults) == 0 {
		rep.Notes = append(rep.Notes, "no fault was injected")
	}
	rep.OK = len(rep.Failures) == 0
	return rep
}

// sumOver sums series name over the processes procs, at every sample
// round that read all of them.
func sumOver(points map[seriesKey][]Point, name string, procs []string) []Point {
	sum := map[float64]float64{}
	n := map[float64]int{}
	for _, p := range procs {
		for _, pt := range points[seriesKey{name, p}] {
			sum[pt.At] += pt.V
			n[pt.At]++
		}
	}
	var out []Point
	for at, v := range sum {
		if n[at] == len(procs) {
			out = append(out, Point{At: at, V: v})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].At < out[j].At })
	return out
}

// value formats v of a series in its unit.
func value(v float64, bytes bool) string {
	if bytes {
		return fmt.Sprintf("%.1f MiB", v/(1<<20))
	}
	return num(v)
}

// Summary is a short human-readable account of the report.
func (rep *Report) Summary() string {
	var b strings.Builder
	verdict := "PASS"
	if !rep.OK {
		verdict = "FAIL"
	}
	fmt.Fprintf(&b, "bank soak %s: store %s, %s, seed %d, %d faults, samples every %s, window %.0f-%.0f s\n",
		verdict, rep.Store, rep.Duration, rep.Seed, len(rep.Faults), rep.SampleEvery, rep.WindowS[0], rep.WindowS[1])
	for _, s := range rep.Series {
		if s.Fit == nil || !s.Fit.Judged {
			continue
		}
		sp := specOf(s.Name)
		mark := "ok"
		if !s.Fit.OK {
			mark = "GROWS"
		}
		fmt.Fprintf(&b, "  %-16s %-7s level %-10s growth %-10s limit %-10s %s\n", s.Name, s.Process,
			value(s.Fit.Level, sp.bytes), value(s.Fit.Growth, sp.bytes), value(s.Fit.Limit, sp.bytes), mark)
	}
	fmt.Fprintf(&b, "  pending Forgets after the check: %d\n", rep.Drain.Pending)
	if p50, p99, ok := rep.latencySpan(); ok {
		fmt.Fprintf(&b, "  client latency per %s: p50 %s ms, p99 %s ms\n", rep.SampleEvery, p50, p99)
	}
	if rep.Chaos != nil {
		fmt.Fprintf(&b, "  check ok=%v, violations %d\n", rep.Chaos.Check.OK, rep.Chaos.Violations)
	}
	for _, f := range rep.Failures {
		fmt.Fprintf(&b, "  FAIL: %s\n", f)
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(&b, "  note: %s\n", n)
	}
	fmt.Fprintf(&b, "  report %s/soak.json, chart %s/soak.png\n", rep.Dir, rep.Dir)
	return b.String()
}

// latencySpan gives the range of the per-interval p50 and p99 over the
// intervals within the load, as "lo-hi".
func (rep *Report) latencySpan() (p50, p99 string, ok bool) {
	lo50, hi50, lo99, hi99 := math.Inf(1), 0.0, math.Inf(1), 0.0
	for _, b := range rep.Latency {
		if b.Answered == 0 {
			continue
		}
		lo50, hi50 = min(lo50, b.P50MS), max(hi50, b.P50MS)
		lo99, hi99 = min(lo99, b.P99MS), max(hi99, b.P99MS)
		ok = true
	}
	return fmt.Sprintf("%.1f-%.1f", lo50, hi50), fmt.Sprintf("%.0f-%.0f", lo99, hi99), ok
}

// Markdown is soak.md: the verdict, the rule, the judged series, the
// faults and the latency.
func (rep *Report) Markdown() string {
	var b strings.Builder
	verdict := "PASS"
	if !rep.OK {
		verdict = "FAIL"
	}
	fmt.Fprintf(&b, "# bank soak: %s\n\n", verdict)
	fmt.Fprintf(&b, "Store %s, load %s (seed %d), a fault every %s, a sample every %s, idle entities passivated after %s. "+
		"Judged window: %.0f–%.0f s.\n\n", rep.Store, rep.Duration, rep.Seed, rep.FaultInterval, rep.SampleEvery,
		rep.IdleTimeout, rep.WindowS[0], rep.WindowS[1])
	fmt.Fprintf(&b, "**Rule.** %s\n\n", rep.Rule)
	for _, f := range rep.Failures {
		fmt.Fprintf(&b, "- **FAIL**: %s\n", f)
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(&b, "- note: %s\n", n)
	}
	if len(rep.Failures)+len(rep.Notes) > 0 {
		b.WriteString("\n")
	}
	b.WriteString("![series](soak.png)\n\n")
	b.WriteString("| series | process | first | median in window | growth over window | limit | verdict |\n|---|---|---|---|---|---|---|\n")
	for _, s := range rep.Series {
		sp := specOf(s.Name)
		first := "-"
		if len(s.Points) > 0 {
			first = value(s.Points[0].V, sp.bytes)
		}
		switch {
		case s.Fit == nil:
			last := "-"
			if len(s.Points) > 0 {
				last = value(s.Points[len(s.Points)-1].V, sp.bytes)
			}
			fmt.Fprintf(&b, "| %s | %s | %s | last %s | | | not judged: %s |\n", s.Name, s.Process, first, last, s.Unjudged)
		case !s.Fit.Judged:
			fmt.Fprintf(&b, "| %s | %s | %s | | | | not judged: %s |\n", s.Name, s.Process, first, s.Fit.Why)
		default:
			mark := "ok"
			if !s.Fit.OK {
				mark = "**grows**"
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s |\n", s.Name, s.Process, first,
				value(s.Fit.Level, sp.bytes), value(s.Fit.Growth, sp.bytes), value(s.Fit.Limit, sp.bytes), mark)
		}
	}
	fmt.Fprintf(&b, "\nPending Forgets %.0f s after the load: %d.\n\n", rep.Drain.AtS-rep.WindowS[1], rep.Drain.Pending)
	b.WriteString("| fault | kind | target | at (s) | held (s) | recovery (ms) |\n|---|---|---|---|---|---|\n")
	for _, f := range rep.Faults {
		rec := fmt.Sprint(f.RecoveryMS)
		if !f.Recovered {
			rec = "not recovered"
		}
		if f.Error != "" {
			rec = "error: " + f.Error
		}
		fmt.Fprintf(&b, "| #%d | %s | %s | %.0f | %.1f | %s |\n", f.Index, f.Kind, f.Target, f.AtS, f.EndS-f.AtS, rec)
	}
	fmt.Fprintf(&b, "\n| interval (s) | answered ops/s | unknown | p50 (ms) | p99 (ms) |\n|---|---|---|---|---|\n")
	for _, l := range rep.Latency {
		fmt.Fprintf(&b, "| %.0f–%.0f | %.0f | %d | %.1f | %.0f |\n", l.FromS, l.ToS, l.OpsPerS, l.Unknown, l.P50MS, l.P99MS)
	}
	if rep.Chaos != nil {
		fmt.Fprintf(&b, "\nbank check: ok=%v, %d violations (report %s).\n", rep.Chaos.Check.OK, rep.Chaos.Violations,
			rep.Chaos.Check.Report)
	}
	return b.String()
}

// write writes v as indented JSON to path.
func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// lastIn returns the last reading of points at or after from and at or
// before to.
func lastIn(points []Point, from, to float64) (float64, bool) {
	for i := len(points) - 1; i >= 0; i-- {
		if p := points[i]; p.At >= from && p.At <= to {
			return p.V, true
		}
	}
	return 0, false
}
