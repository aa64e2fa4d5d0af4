package soak

import (
	"encoding/json"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/robustness/chaos"
	"github.com/ordo-actors/ordo/robustness/history"
)

// fakeRun fills a sampler as a 4-minute soak of two nodes and an etcd
// member would, read every 10 s, with node n2 killed at 130 s, under a
// load whose transfer rate climbs from 50/s to 150/s; grow adds that much
// per second to n1's goroutines, leak as many entities that never
// passivate. It returns the transfers' submission times too.
func fakeRun(t *testing.T, grow, leak float64, pending int) (Config, *chaos.Report, *sampler, []float64) {
	t.Helper()
	cfg := DefaultConfig(4 * time.Minute)
	cfg.Scale(0, 10*time.Second)
	s := testSampler()
	start := s.start
	s.starts = map[string]map[int]float64{"n1": {1: -5}, "n2": {1: -5, 2: 132}, "e1": {1: -10}}
	s.members = map[string]bool{"n1": false, "n2": false, "e1": true}
	var calls []float64
	for at := 0.0; at < 240; at += 1 / (50 + at*100/240) {
		calls = append(calls, at)
	}
	active := func(at float64) float64 {
		lo, hi := sort.SearchFloat64s(calls, at-sweepFactor*15), sort.SearchFloat64s(calls, at)
		return float64(cfg.Chaos.Accounts+hi-lo) + leak*at
	}
	// Every active entity holds one dedup entry; each account holds a
	// full window of 128.
	dedup := func(at float64) float64 { return active(at) + float64(cfg.Chaos.Accounts)*127 }
	for at := 0.0; at <= 240; at += 10 {
		s.record(seriesGoroutines, "n1", at, 100+grow*at+float64(int(at)%30)/10, 1)
		s.record(seriesRSS, "n1", at, 80<<20+float64(int(at)%40)*(1<<20), 1)
		s.record(seriesHeapLive, "n1", at, 20<<20+float64(int(at)%30)*(1<<18), 1)
		share := 0.5
		if at >= 130 && at <= 132 {
			share = 1 // n2 is down: n1 has its shards
		} else {
			inc := 1
			if at > 132 {
				inc = 2
			}
			s.record(seriesGoroutines, "n2", at, 90, inc)
			s.record(seriesRSS, "n2", at, 70<<20, inc)
			s.record(seriesHeapLive, "n2", at, 18<<20, inc)
			s.record(seriesActive, "n2", at, active(at)/2, inc)
			s.record(seriesDedup, "n2", at, dedup(at)/2, inc)
		}
		s.record(seriesActive, "n1", at, active(at)*share, 1)
		s.record(seriesDedup, "n1", at, dedup(at)*share, 1)
		s.record(seriesRSS, "e1", at, 100<<20+at*(1<<20), 1) // the etcd store's member: not judged
		s.record(seriesPending, clusterWide, at, 8, 0)
		s.record(seriesTransfers, clusterWide, at, at*100, 0)
	}
	s.loadEnd = 241
	s.drained = &Drain{Pending: pending, AtS: 260}
	if pending > 0 {
		s.drained.Leftover = []string{"acct-000001: credit t-1"}
	}
	crep := &chaos.Report{OK: true, Dir: t.TempDir(), LoadStart: start, Check: chaos.CheckVerdict{OK: true},
		Faults: []chaos.FaultReport{{Fault: chaos.Fault{Index: 0, Kind: chaos.KindKill, Node: 1},
			Target: "n2", Start: start.Add(130 * time.Second), End: start.Add(132 * time.Second), Recovered: true}}}
	return cfg, crep, s, calls
}

func TestBuildPasses(t *testing.T) {
	cfg, crep, s, calls := fakeRun(t, 0, 0, 0)
	rep := build(cfg, crep, s, nil, calls)
	if !rep.OK {
		t.Fatalf("a flat run failed: %v", rep.Failures)
	}
	if rep.WindowS != [2]float64{120, 240} {
		t.Fatalf("window %v, want the last 2 minutes", rep.WindowS)
	}
	judged, unjudged := 0, 0
	for _, ser := range rep.Series {
		switch {
		case ser.Fit != nil && ser.Fit.Judged:
			judged++
		case ser.Unjudged != "":
			unjudged++
		default:
			t.Errorf("%s of %s: neither judged nor explained: %+v", ser.Name, ser.Process, ser.Fit)
		}
	}
	// The goroutines of n1 and n2, pending, the excess of active entities
	// and the excess of dedup entries over them; not the nodes' live heap
	// (the window starts 2 minutes in, before the memory has filled), nor
	// their RSS, the member's RSS nor the transfer records (they follow
	// the kept records), nor the entities and dedup entries per node, nor
	// the totals of active entities and dedup entries.
	if judged != 5 || unjudged != 12 {
		t.Fatalf("%d judged, %d not judged; want 5 and 12", judged, unjudged)
	}
	for _, ser := range rep.Series {
		if ser.Name == seriesHeapLive && !strings.Contains(ser.Unjudged, "before the memory has filled") {
			t.Fatalf("the live heap of %s: %q", ser.Process, ser.Unjudged)
		}
	}
	// With the memory filled before the window, the live heaps are judged.
	cfg.MemoryFilled = time.Minute
	if rep = build(cfg, crep, s, nil, calls); !rep.OK {
		t.Fatalf("a flat run failed: %v", rep.Failures)
	}
	judged = 0
	for _, ser := range rep.Series {
		if ser.Fit != nil && ser.Fit.Judged {
			judged++
		}
	}
	if judged != 7 {
		t.Fatalf("%d judged with the memory filled, want 7", judged)
	}
	// The active entities grew with the load, well past 20%; their
	// excess, and the dedup entries' excess over them, stayed flat.
	for _, ser := range rep.Series {
		if ser.Name == seriesActive && ser.Process == clusterWide {
			f := Judge(ser.Points, nil, Rule{From: 120, To: 240, Rel: 0.2, Floor: 200, MinPoints: 3})
			if f.OK {
				t.Fatalf("the total of active entities did not grow: %+v", f)
			}
		}
		if (ser.Name == seriesActiveExcess || ser.Name == seriesDedupExcess) && (ser.Fit.Growth > 20 || ser.Fit.Growth < -20) {
			t.Fatalf("%s %+v", ser.Name, ser.Fit)
		}
		if ser.Name == seriesDedup && ser.Process == clusterWide && len(ser.Points) != 24 {
			t.Fatalf("dedup total of %d rounds, want the 24 that read both nodes", len(ser.Points))
		}
	}
	if len(rep.Faults) != 1 || rep.Faults[0].AtS != 130 || rep.Faults[0].Kind != "kill" {
		t.Fatalf("faults %+v", rep.Faults)
	}
	if !strings.Contains(rep.Summary(), "bank soak PASS") || !strings.Contains(rep.Markdown(), "Theil-Sen") {
		t.Fatal("summary or markdown without verdict or rule")
	}
}

func TestBuildFailsOnGrowthAndLeftovers(t *testing.T) {
	cfg, crep, s, calls := fakeRun(t, 0.5, 0, 0) // 60 goroutines over the window
	rep := build(cfg, crep, s, nil, calls)
	if rep.OK || len(rep.Failures) != 1 || !strings.Contains(rep.Failures[0], "goroutines of n1 grows") {
		t.Fatalf("growing goroutines: ok=%v %v", rep.OK, rep.Failures)
	}

	// Six entities a second that never passivate: 720 over the window,
	// more than 200 and than 20% of the active entities (about 3,300).
	cfg, crep, s, calls = fakeRun(t, 0, 6, 0)
	rep = build(cfg, crep, s, nil, calls)
	if rep.OK || len(rep.Failures) != 1 || !strings.Contains(rep.Failures[0], "active_entities_excess of cluster grows") {
		t.Fatalf("entities never passivated: ok=%v %v", rep.OK, rep.Failures)
	}

	// Dedup windows that outgrow their bound: 40 entries a second on n1,
	// 4,800 over the window, more than 2,000 and than 20% of the excess
	// (about 19,000), with the entities as they were.
	cfg, crep, s, calls = fakeRun(t, 0, 0, 0)
	k := seriesKey{seriesDedup, "n1"}
	for i, p := range s.points[k] {
		s.points[k][i].V = p.V + 40*p.At
	}
	rep = build(cfg, crep, s, nil, calls)
	if rep.OK || len(rep.Failures) != 1 || !strings.Contains(rep.Failures[0], "dedup_entries_excess of cluster grows") {
		t.Fatalf("dedup windows outgrowing their bound: ok=%v %v", rep.OK, rep.Failures)
	}

	// A live heap that gains 100 KiB a second on n1, once the memory has
	// filled: 11.7 MiB over the window, more than 8 MiB and than 20% of
	// its level (about 24 MiB).
	cfg, crep, s, calls = fakeRun(t, 0, 0, 0)
	cfg.MemoryFilled = 2 * time.Minute
	k = seriesKey{seriesHeapLive, "n1"}
	for i, p := range s.points[k] {
		s.points[k][i].V = p.V + 100<<10*p.At
	}
	rep = build(cfg, crep, s, nil, calls)
	if rep.OK || len(rep.Failures) != 1 || !strings.Contains(rep.Failures[0], "heap_live_bytes of n1 grows") {
		t.Fatalf("a growing live heap: ok=%v %v", rep.OK, rep.Failures)
	}

	cfg, crep, s, calls = fakeRun(t, 0, 0, 1)
	rep = build(cfg, crep, s, nil, calls)
	if rep.OK || len(rep.Failures) != 1 || !strings.Contains(rep.Failures[0], "credit t-1") {
		t.Fatalf("a Forget never applied: ok=%v %v", rep.OK, rep.Failures)
	}

	cfg, crep, s, calls = fakeRun(t, 0, 0, 0)
	crep.OK, crep.Check.OK, crep.Violations = false, false, 2
	if rep = build(cfg, crep, s, nil, calls); rep.OK {
		t.Fatal("a failed check passed")
	}
}

// soak.json, soak.png and soak.md are written and read back.
func TestReportFiles(t *testing.T) {
	cfg, crep, s, calls := fakeRun(t, 0.5, 0, 1)
	lat := []Bucket{{FromS: 0, ToS: 10, Answered: 1500, OpsPerS: 150, P50MS: 40, P99MS: 120},
		{FromS: 10, ToS: 20, Answered: 1000, Unknown: 3, OpsPerS: 100, P50MS: 60, P99MS: 900}}
	rep := build(cfg, crep, s, lat, calls)
	dir := t.TempDir()
	if os.Getenv("SOAK_CHART") != "" {
		dir = os.Getenv("SOAK_CHART")
	}
	if err := writeJSON(filepath.Join(dir, "soak.json"), rep); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "soak.json"))
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.OK || len(back.Series) != len(rep.Series) || back.Lifetimes["n2"][2] != 132 || back.Rule == "" {
		t.Fatalf("read back: ok=%v, %d series, lifetimes %v", back.OK, len(back.Series), back.Lifetimes)
	}

	path := filepath.Join(dir, "soak.png")
	if err := rep.WriteChart(path); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() < 1000 || b.Dy() < 500 {
		t.Fatalf("chart of %v", b)
	}
	md := rep.Markdown()
	for _, want := range []string{"# bank soak: FAIL", "![series](soak.png)", "| goroutines | n1 |", "**grows**", "| #0 | kill | n2 |", "| 10–20 | 100 | 3 |"} {
		if !strings.Contains(md, want) {
			t.Errorf("soak.md lacks %q:\n%s", want, md)
		}
	}
}

func TestLatencies(t *testing.T) {
	start := time.Unix(1000, 0)
	at := func(s float64) int64 { return start.UnixNano() + int64(s*1e9) }
	var b strings.Builder
	w := history.NewWriter(&b)
	op := func(client int, call, ret float64, out history.Outcome) {
		o := history.Op{Client: client, Op: history.OpBalance, Account: history.AccountName(0), Call: at(call), Ret: at(ret),
			Outcome: out}
		if out == history.OK {
			o.Balance = 1
		} else {
			o.Error = "timeout"
		}
		if err := w.Append(o); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 100 { // 1..100 ms in the first interval
		op(0, 1, 1+float64(i+1)/1000, history.OK)
	}
	op(1, 12, 12.5, history.OK)
	op(2, 13, 18, history.Unknown)
	op(3, 31, 31.25, history.OK) // the third interval; the second has one op
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	got, calls, err := latencies(strings.NewReader(b.String()+`{"torn`), start, 10*time.Second)
	if err == nil {
		t.Fatal("a torn last line went unnoticed")
	}
	if len(calls) != 0 {
		t.Fatalf("transfer calls %v in a history of reads", calls)
	}
	if len(got) != 4 {
		t.Fatalf("%d buckets, want 4: %+v", len(got), got)
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-6 }
	if g := got[0]; g.Answered != 100 || !near(g.P50MS, 50) || !near(g.P99MS, 99) || !near(g.OpsPerS, 10) {
		t.Errorf("first interval %+v", g)
	}
	if g := got[1]; g.Answered != 1 || g.Unknown != 1 || !near(g.P50MS, 500) {
		t.Errorf("second interval %+v", g)
	}
	if g := got[2]; g.Answered != 0 || g.P50MS != 0 {
		t.Errorf("empty interval %+v", g)
	}
	if g := got[3]; g.FromS != 30 || g.ToS != 40 || !near(g.P99MS, 250) {
		t.Errorf("last interval %+v", g)
	}
}

func TestScale(t *testing.T) {
	for _, c := range []struct {
		d                                      time.Duration
		interval, sample, window, idle, settle time.Duration
	}{
		{30 * time.Minute, 3 * time.Minute, time.Minute, 10 * time.Minute, 15 * time.Second, 2 * time.Minute},
		{2 * time.Minute, 30 * time.Second, 10 * time.Second, time.Minute, 15 * time.Second, time.Minute},
		{4 * time.Minute, time.Minute, 20 * time.Second, 2 * time.Minute, 15 * time.Second, time.Minute},
	} {
		cfg := DefaultConfig(c.d)
		if cfg.Chaos.Interval != c.interval || cfg.SampleEvery != c.sample || cfg.Window != c.window ||
			cfg.IdleTimeout != c.idle || cfg.Settle != c.settle {
			t.Errorf("%v: interval %v, sample %v, window %v, idle %v, settle %v", c.d, cfg.Chaos.Interval,
				cfg.SampleEvery, cfg.Window, cfg.IdleTimeout, cfg.Settle)
		}
		// At least two faults, the last healed before the load ends.
		plan := chaos.Plan(1, chaos.PlanConfig{Duration: c.d, Kinds: cfg.Chaos.Kinds, Nodes: 3, EtcdMembers: 3,
			LeaseTTL: cfg.Chaos.LeaseTTL, Interval: cfg.Chaos.Interval, Warmup: cfg.Chaos.Warmup, Cooldown: cfg.Chaos.Cooldown})
		if len(plan) < 2 {
			t.Errorf("%v: %d faults planned", c.d, len(plan))
		}
	}
}

func TestParseFlags(t *testing.T) {
	cfg, err := ParseFlags([]string{"--duration", "2m", "--store", "postgres", "--seed", "42", "--fault-interval", "40s",
		"--pg-restart", "pg_ctlcluster 15 chaos restart"}, os.Stderr, "postgres://u:p@127.0.0.1:5441/postgres")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Chaos.Duration != 2*time.Minute || cfg.Chaos.Interval != 40*time.Second || cfg.SampleEvery != 10*time.Second ||
		cfg.Chaos.Seed != 42 || cfg.Chaos.PGURL == "" || cfg.Chaos.PGRestart[2] != "chaos" {
		t.Fatalf("parsed %+v", cfg)
	}
	if len(cfg.Chaos.Kinds) != 5 {
		t.Fatalf("kinds %v, want all five with the postgres store", cfg.Chaos.Kinds)
	}
	cc := cfg.chaosConfig(nil)
	args := strings.Join(cc.NodeArgs, " ")
	if args != "--idle-timeout 15s" || strings.Join(cc.EtcdArgs, " ") != "--auto-compaction-retention 1m0s --quota-backend-bytes 8589934592 --snapshot-count 10000" {
		t.Fatalf("node args %q, etcd args %q", args, cc.EtcdArgs)
	}
	cfg.Chaos.Bank = "/bin/true"
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]string{{"--faults", "postgres"}, {"--sample-every", "-1s"}, {"extra"}} {
		if _, err := ParseFlags(bad, os.Stderr, ""); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
	cfg, _ = ParseFlags([]string{"--duration", "90s"}, os.Stderr, "")
	cfg.Chaos.Bank = "/bin/true"
	if err := cfg.Validate(); err == nil {
		t.Error("a soak shorter than MinDuration accepted")
	}
	cfg, _ = ParseFlags([]string{"--duration", "2m", "--sample-every", "30s"}, os.Stderr, "")
	cfg.Chaos.Bank = "/bin/true"
	if err := cfg.Validate(); err == nil {
		t.Error("a window of two samples accepted")
	}
}

// Active entities that a fault took away (below what the load explains)
// and that come back within the window rise without being a leak: the
// excess ends within its limit.
func TestBuildExcessRecoveringFromAFault(t *testing.T) {
	cfg, crep, s, calls := fakeRun(t, 0, 0, 0)
	k := seriesKey{seriesActive, "n1"}
	for i, p := range s.points[k] {
		if p.At >= 120 {
			// 600 fewer than expected at 120 s, back to 100 fewer by 240 s.
			s.points[k][i].V -= 600 - 500*(p.At-120)/120
		}
	}
	rep := build(cfg, crep, s, nil, calls)
	if !rep.OK {
		t.Fatalf("a recovery failed the soak: %v", rep.Failures)
	}
	var excess *Series
	for i := range rep.Series {
		if rep.Series[i].Name == seriesActiveExcess {
			excess = &rep.Series[i]
		}
	}
	if excess == nil || excess.Fit == nil || excess.Fit.Growth <= excess.Fit.Limit {
		t.Fatalf("the excess does not rise past its limit: %+v", excess)
	}
	if !strings.Contains(strings.Join(rep.Notes, "\n"), "a recovery, not a leak") {
		t.Fatalf("no note on the recovery: %v", rep.Notes)
	}
}

// A byte series of nodes and etcd members is drawn in two panels, so that
// the members' gigabytes do not flatten the nodes' megabytes; counts stay
// in one.
func TestChartSplitsNodesFromMembers(t *testing.T) {
	rss, gor := specOf(seriesRSS), specOf(seriesGoroutines)
	ss := []Series{{Name: seriesRSS, Process: "n1"}, {Name: seriesRSS, Process: "e1", Member: true}, {Name: seriesRSS, Process: "n2"}}
	groups := splitMembers(rss, ss)
	if len(groups) != 2 || len(groups[0].series) != 2 || len(groups[1].series) != 1 || !groups[1].series[0].Member {
		t.Fatalf("groups %+v", groups)
	}
	if g := splitMembers(rss, ss[:1]); len(g) != 1 || g[0].title != rss.title {
		t.Fatalf("nodes only: %+v", g)
	}
	if g := splitMembers(gor, []Series{{Process: "n1"}, {Process: "e1", Member: true}}); len(g) != 1 {
		t.Fatalf("a count split: %+v", g)
	}
}

// The cluster's active entities and dedup entries of a 2-minute postgres
// soak (seed 70742) whose throughput rose by a quarter in the judged
// window after a node was killed at 76 s: the dedup total rose with the
// transfer entities, past the total's limit, while its excess over the
// active entities (the accounts' windows) stayed flat. The run passes.
func TestDedupFollowingTheLoadPasses(t *testing.T) {
	n3 := func(at float64) int { return 1 + b2i(at >= 78) }
	cfg, rep := buildNodes(t, map[string]map[int]float64{"n1": {1: -5}, "n2": {1: -5}, "n3": {1: -5, 2: 78}},
		[3]func(float64) int{nil, nil, n3}, []nodeReadings{
			{60, map[string][3]float64{seriesActive: {2471, 1870, 1227}, seriesDedup: {6922, 5430, 5944}}},
			{70, map[string][3]float64{seriesActive: {3340, 2720, 3397}, seriesDedup: {7793, 6279, 8110}}},
			{80, map[string][3]float64{seriesActive: {3322, 2308, 89}, seriesDedup: {11600, 5861, 978}}},
			{90, map[string][3]float64{seriesActive: {3040, 2237, 1333}, seriesDedup: {7745, 5798, 5790}}},
			{100, map[string][3]float64{seriesActive: {3418, 2626, 3117}, seriesDedup: {7869, 6187, 7827}}},
			{110, map[string][3]float64{seriesActive: {4358, 3342, 4335}, seriesDedup: {8800, 6894, 9033}}},
			{120, map[string][3]float64{seriesActive: {4352, 3508, 4463}, seriesDedup: {8796, 7060, 9161}}},
		}, nil)
	if !rep.OK {
		t.Fatalf("failed: %v", rep.Failures)
	}
	for _, ser := range rep.Series {
		switch {
		case ser.Name == seriesDedup && ser.Process == clusterWide:
			// The total, judged as a level, would have failed.
			f := Judge(ser.Points, nil, Rule{From: 60, To: 120, Slack: 1, Rel: cfg.Rel, Floor: 2000, MinPoints: 3, MinSpan: 15})
			if !f.Judged || f.OK {
				t.Fatalf("the dedup total judged as a level: %+v", f)
			}
		case ser.Name == seriesDedupExcess:
			if ser.Fit == nil || !ser.Fit.Judged || !ser.Fit.OK || ser.Fit.Growth > 100 || ser.Fit.Growth < -100 {
				t.Fatalf("dedup excess: %+v", ser.Fit)
			}
		}
	}
}

// The memory of the nodes of a 2-minute postgres soak (seed 88235: n1
// paused at 16 s, n2 killed at 45 s and partitioned at 75 s), in MiB, from
// 60 s on. n3's RSS rose 39 MiB, a ratchet of its heap goal (5× the live
// heap at GOGC 400), while its live heap rose 4 MiB: judged by its RSS the
// run failed, judged by its live heap it passes. A 2-minute soak judges
// neither, as the memory is still filling.
func TestRSSRatchetPasses(t *testing.T) {
	starts := map[string]map[int]float64{"n1": {1: -0.9}, "n2": {1: -0.8, 2: 47}, "n3": {1: -0.4}}
	n2 := func(float64) int { return 2 }
	const mib = 1 << 20
	mem := func(at float64, rss, heap [3]float64) nodeReadings {
		for i := range 3 {
			rss[i], heap[i] = rss[i]*mib, heap[i]*mib
		}
		return nodeReadings{at, map[string][3]float64{seriesRSS: rss, seriesHeapLive: heap}}
	}
	rows := []nodeReadings{
		mem(60, [3]float64{177.6, 97.9, 152.5}, [3]float64{23.3, 15.1, 22.6}),
		mem(70, [3]float64{177.7, 114.6, 156.7}, [3]float64{25.4, 18.7, 24.6}),
		mem(80, [3]float64{177.9, 130.6, 167.7}, [3]float64{25.4, 19.0, 24.6}),
		mem(90, [3]float64{179.5, 141.0, 171.4}, [3]float64{26.4, 17.5, 24.5}),
		mem(100, [3]float64{172.2, 141.1, 173.2}, [3]float64{23.3, 20.4, 23.4}),
		mem(110, [3]float64{172.2, 148.3, 173.5}, [3]float64{26.4, 20.8, 30.0}),
		mem(120, [3]float64{172.7, 150.9, 191.3}, [3]float64{27.4, 21.0, 26.9}),
		mem(120.2, [3]float64{172.7, 151.0, 191.3}, [3]float64{27.4, 21.0, 26.9}),
		mem(122.6, [3]float64{178.5, 151.3, 191.6}, [3]float64{26.5, 21.0, 26.9}),
	}
	// Judged as a longer soak would, after the memory filled.
	cfg, rep := buildNodes(t, starts, [3]func(float64) int{nil, n2, nil}, rows, func(c *Config) { c.MemoryFilled = 0 })
	if !rep.OK {
		t.Fatalf("failed: %v", rep.Failures)
	}
	rule := Rule{From: 60, To: 120, Slack: 1, Rel: cfg.Rel, Floor: 32 << 20, MinPoints: 3, MinSpan: 15}
	for _, ser := range rep.Series {
		if ser.Process != "n3" {
			continue
		}
		switch ser.Name {
		case seriesRSS:
			if ser.Unjudged == "" {
				t.Fatal("a node's RSS is judged")
			}
			// Judged as the etcd members' RSS is, it would have failed.
			if f := Judge(ser.Points, starts["n3"], rule); !f.Judged || f.OK {
				t.Fatalf("n3's RSS judged: %+v", f)
			}
		case seriesHeapLive:
			if f := ser.Fit; f == nil || !f.Judged || !f.OK || f.Growth > 6<<20 {
				t.Fatalf("n3's live heap: %+v", f)
			}
		}
	}
	_, rep = buildNodes(t, starts, [3]func(float64) int{nil, n2, nil}, rows, nil)
	for _, ser := range rep.Series {
		if (ser.Name == seriesHeapLive || ser.Name == seriesRSS) && (ser.Fit != nil || ser.Unjudged == "") {
			t.Fatalf("%s of %s judged in a 2-minute soak: %+v", ser.Name, ser.Process, ser.Fit)
		}
	}
}

// nodeReadings is one sample round of nodes n1, n2 and n3: each series'
// reading per node.
type nodeReadings struct {
	at   float64
	vals map[string][3]float64
}

// buildNodes judges the readings of a 2-minute soak of nodes n1, n2 and n3
// (incarnations starting at starts; inc[i], when set, gives node i's
// incarnation at a time, else 1) whose pending Forgets stayed at 100 and
// drained after the load, and whose check passed. tune, when set, changes
// the config first.
func buildNodes(t *testing.T, starts map[string]map[int]float64, inc [3]func(float64) int, rows []nodeReadings,
	tune func(*Config)) (Config, *Report) {
	t.Helper()
	cfg := DefaultConfig(2 * time.Minute)
	cfg.Scale(0, 10*time.Second)
	if tune != nil {
		tune(&cfg)
	}
	s := testSampler()
	s.starts = starts
	s.members = map[string]bool{"n1": false, "n2": false, "n3": false}
	for _, r := range rows {
		for i, n := range []string{"n1", "n2", "n3"} {
			in := 1
			if inc[i] != nil {
				in = inc[i](r.at)
			}
			for name, v := range r.vals {
				s.record(name, n, r.at, v[i], in)
			}
		}
		s.record(seriesPending, clusterWide, r.at, 100, 0)
	}
	s.loadEnd = 121
	s.drained = &Drain{AtS: 125}
	crep := &chaos.Report{OK: true, Dir: t.TempDir(), LoadStart: s.start, Check: chaos.CheckVerdict{OK: true}}
	return cfg, build(cfg, crep, s, nil, nil)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
