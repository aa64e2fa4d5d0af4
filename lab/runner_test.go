package lab_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/lab"
	"github.com/ordo-actors/ordo/lab/labtest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func shortWorkload(seed uint64) lab.Workload {
	w := lab.DefaultWorkload()
	w.Accounts = 8
	w.Duration = 200 * time.Millisecond
	w.Concurrency = 4
	w.Seed = seed
	return w
}

func TestRunCorrectApproachPasses(t *testing.T) {
	for _, zipf := range []float64{0, 0.8, 1.5} {
		w := shortWorkload(7)
		w.Zipf = zipf
		w.IdleSample = 20 * time.Millisecond
		r, err := lab.Run(context.Background(), labtest.NewMemory(labtest.Config{}), w)
		if err != nil {
			t.Fatal(err)
		}
		if !r.Passed() || r.OK == 0 || r.Unknown != 0 || r.Aborted != 0 {
			t.Fatalf("zipf %v seed %d: correct approach did not pass: %+v", zipf, w.Seed, r)
		}
		if r.P50 <= 0 || r.P99 < r.P50 || r.Throughput <= 0 {
			t.Fatalf("zipf %v: bad latency or throughput: %+v", zipf, r)
		}
		checkCPU(t, r)
	}
}

// checkCPU requires the machine's CPU time to be measured on Linux (the
// workers keep a core busy, so it is positive) and reported as unavailable
// elsewhere.
func checkCPU(t *testing.T, r lab.Result) {
	t.Helper()
	if runtime.GOOS != "linux" {
		if r.CPUError == "" || r.CPUSeconds != 0 {
			t.Fatalf("CPU time off Linux: %v s, error %q", r.CPUSeconds, r.CPUError)
		}
		return
	}
	if r.CPUError != "" || r.CPUSeconds <= 0 {
		t.Fatalf("CPU time not measured: %v s, error %q", r.CPUSeconds, r.CPUError)
	}
	if want := r.CPUSeconds * 1000 / float64(r.OK); r.CPUPer1000 != want {
		t.Fatalf("CPU-s per 1000 transfers = %v, want %v", r.CPUPer1000, want)
	}
	if r.IdleBusy < 0 || r.IdleBusy > 1 || (r.Workload.IdleSample == 0 && r.IdleBusy != 0) {
		t.Fatalf("idle busy share %v with idle sample %v", r.IdleBusy, r.Workload.IdleSample)
	}
	// This process ran the workers and the in-process approach: it used
	// CPU, and no more than the machine's busy time (which /proc/stat
	// counts in ticks: a little slack for their rounding).
	if r.ProcessCPUError != "" || r.ProcessCPUSeconds <= 0 || r.ProcessCPUSeconds > r.CPUSeconds+0.05 {
		t.Fatalf("process CPU time %v s (error %q) with machine CPU time %v s", r.ProcessCPUSeconds, r.ProcessCPUError, r.CPUSeconds)
	}
	if want := r.ProcessCPUSeconds * 1000 / float64(r.OK); r.ProcessCPUPer1000 != want {
		t.Fatalf("process CPU-s per 1000 transfers = %v, want %v", r.ProcessCPUPer1000, want)
	}
}

func TestRunCatchesFaults(t *testing.T) {
	for _, tc := range []struct {
		fault     labtest.Fault
		conserved bool
	}{
		{labtest.LoseCredit, false},
		{labtest.ApplyTwice, true},
		{labtest.AckNotApplied, true},
	} {
		w := shortWorkload(11)
		r, err := lab.Run(context.Background(), labtest.NewMemory(labtest.Config{Fault: tc.fault, Every: 5}), w)
		if err != nil {
			t.Fatal(err)
		}
		if r.OK < 5 {
			t.Fatalf("fault %d: only %d transfers", tc.fault, r.OK)
		}
		if r.Passed() || r.ExactlyOnce() || r.AccountsOff == 0 {
			t.Fatalf("fault %d (seed %d) not caught: %+v", tc.fault, w.Seed, r)
		}
		if r.Conserved() != tc.conserved {
			t.Fatalf("fault %d: conserved = %v, want %v (Δ %d)", tc.fault, r.Conserved(), tc.conserved, r.MoneyDelta())
		}
		if tc.fault == labtest.LoseCredit && (r.MoneyDelta() >= 0 || r.Missing <= 0) {
			t.Fatalf("lost credits not reported as missing money: %+v", r)
		}
	}
}

func TestRunStalls(t *testing.T) {
	w := shortWorkload(3)
	w.StallProbability = 0.5
	w.StallDuration = 5 * time.Millisecond
	r, err := lab.Run(context.Background(), labtest.NewMemory(labtest.Config{}), w)
	if err != nil {
		t.Fatal(err)
	}
	if r.Stalls == 0 || !r.Passed() {
		t.Fatalf("seed %d: %+v", w.Seed, r)
	}
}

func TestWorkloadValidate(t *testing.T) {
	for name, mod := range map[string]func(*lab.Workload){
		"accounts":    func(w *lab.Workload) { w.Accounts = 1 },
		"duration":    func(w *lab.Workload) { w.Duration = 0 },
		"concurrency": func(w *lab.Workload) { w.Concurrency = 0 },
		"zipf":        func(w *lab.Workload) { w.Zipf = -1 },
		"amount":      func(w *lab.Workload) { w.MaxAmount = 0 },
		"stall-prob":  func(w *lab.Workload) { w.StallProbability = 2 },
		"stall":       func(w *lab.Workload) { w.StallProbability, w.StallDuration = 0.1, 0 },
		"idle-sample": func(w *lab.Workload) { w.IdleSample = -time.Second },
	} {
		w := lab.DefaultWorkload()
		mod(&w)
		if err := w.Validate(); err == nil {
			t.Errorf("%s: invalid workload accepted", name)
		}
	}
	if err := lab.DefaultWorkload().Validate(); err != nil {
		t.Fatal(err)
	}
}

func memoryBuilder(name string, cfg labtest.Config) lab.Builder {
	return lab.Builder{Name: name, New: func(context.Context, lab.Settings) (lab.Approach, error) {
		return labtest.NewMemory(cfg), nil
	}}
}

func TestMainWritesReport(t *testing.T) {
	out := t.TempDir()
	var stdout bytes.Buffer
	err := lab.Main(context.Background(), []string{
		"--approaches", "mem", "--duration", "100ms", "--accounts", "4", "--seed", "42",
		"--out", out, "--check",
	}, &stdout, memoryBuilder("mem", labtest.Config{}))
	if err != nil {
		t.Fatalf("%v\n%s", err, stdout.String())
	}
	if !strings.Contains(stdout.String(), "seed 42") {
		t.Fatalf("seed not printed:\n%s", stdout.String())
	}
	for _, f := range []string{"results.md", "results.json", "chart.png"} {
		if st, err := os.Stat(filepath.Join(out, f)); err != nil || st.Size() == 0 {
			t.Fatalf("%s: %v", f, err)
		}
	}
	md, err := os.ReadFile(filepath.Join(out, "results.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(md), "| mem |") || !strings.Contains(string(md), "cores") {
		t.Fatalf("report lacks the row or the machine:\n%s", md)
	}
}

// runMemPair runs lab.Main with args on two in-memory approaches, mem
// and base (compared as mem:base), with --check, and returns its report
// as results.json and results.md hold it.
func runMemPair(t *testing.T, args ...string) (lab.Report, string) {
	t.Helper()
	out := t.TempDir()
	var stdout bytes.Buffer
	args = append([]string{"--approaches", "mem,base", "--duration", "100ms", "--accounts", "4",
		"--compare", "mem:base", "--out", out, "--check"}, args...)
	err := lab.Main(context.Background(), args, &stdout, memoryBuilder("mem", labtest.Config{}), memoryBuilder("base", labtest.Config{}))
	if err != nil {
		t.Fatalf("%v\n%s", err, stdout.String())
	}
	js, err := os.ReadFile(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep lab.Report
	if err := json.Unmarshal(js, &rep); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(out, "results.md"))
	if err != nil {
		t.Fatal(err)
	}
	return rep, string(md)
}

// --cpuprofile and --memprofile write profiles pprof reads (gzipped
// protobuf).
func TestMainProfiles(t *testing.T) {
	dir := t.TempDir()
	cpu, mem := filepath.Join(dir, "cpu.pprof"), filepath.Join(dir, "mem.pprof")
	runMemPair(t, "--idle-sample", "0", "--cpuprofile", cpu, "--memprofile", mem)
	for _, f := range []string{cpu, mem} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
			t.Fatalf("%s is not a gzipped profile (%d bytes)", f, len(b))
		}
	}
}

func TestMainSeveralConcurrencies(t *testing.T) {
	rep, text := runMemPair(t, "--concurrency", "2,5", "--idle-sample", "20ms")
	var got []string
	for _, r := range rep.Results {
		got = append(got, fmt.Sprintf("%s@%d", r.Name, r.Workload.Concurrency))
	}
	if want := []string{"mem@2", "base@2", "mem@5", "base@5"}; !slices.Equal(got, want) {
		t.Fatalf("results %v, want %v", got, want)
	}
	if !slices.Equal(rep.Concurrencies, []int{2, 5}) {
		t.Fatalf("concurrencies %v", rep.Concurrencies)
	}
	i2, i5 := strings.Index(text, "## Concurrency 2"), strings.Index(text, "## Concurrency 5")
	if i2 < 0 || i5 < i2 {
		t.Fatalf("no section per concurrency, in order:\n%s", text)
	}
	if !strings.Contains(text, "| idle busy |") || !strings.Contains(text, "during the 20ms before each run") {
		t.Fatalf("report lacks the idle busy share:\n%s", text)
	}
	for _, part := range []string{text[i2:i5], text[i5:]} {
		if strings.Count(part, "| mem |") != 1 || strings.Count(part, "| base |") != 1 || !strings.Contains(part, "| mem ÷ base |") {
			t.Fatalf("section lacks a row or the comparison:\n%s", part)
		}
	}
	if strings.Contains(text, "ordo") {
		t.Fatalf("comparisons of approaches that did not run are shown:\n%s", text)
	}
}

// With --rounds, every approach runs once per round in an order turned by
// one each round, and the report labels each run with its round.
func TestMainRounds(t *testing.T) {
	rep, md := runMemPair(t, "--rounds", "3", "--idle-sample", "0")
	var got []string
	for _, r := range rep.Results {
		got = append(got, fmt.Sprintf("%s#%d", r.Name, r.Round))
	}
	if want := []string{"mem#1", "base#1", "base#2", "mem#2", "mem#3", "base#3"}; !slices.Equal(got, want) || rep.Rounds != 3 {
		t.Fatalf("results %v (rounds %d), want %v", got, rep.Rounds, want)
	}
	for _, want := range []string{"| mem #2 |", "| base #3 |", "| mem ÷ base | 3 | **", "- rounds: 3;"} {
		if !strings.Contains(md, want) {
			t.Fatalf("report lacks %q:\n%s", want, md)
		}
	}
}

// A comparison over rounds shows each round's ratio, taken within the
// round, and their median.
func TestMarkdownRatiosWithinRounds(t *testing.T) {
	w := lab.DefaultWorkload()
	rep := lab.Report{Workload: w, Concurrencies: []int{w.Concurrency}, Rounds: 3,
		Comparisons: []lab.Comparison{{Name: "a", Baseline: "b"}}}
	// a's throughput against b's: 1×, 3×, 2× in rounds 1 to 3, though b
	// itself drifts from round to round.
	for n, v := range [][2]float64{{100, 100}, {600, 200}, {100, 50}} {
		for i, name := range []string{"a", "b"} {
			rep.Results = append(rep.Results, lab.Result{Name: name, Workload: w, Round: n + 1, Throughput: v[i],
				P99: time.Duration(v[i]) * time.Millisecond, CPUPer1000: v[i] / 100})
		}
	}
	var b strings.Builder
	if err := lab.WriteMarkdown(&b, rep); err != nil {
		t.Fatal(err)
	}
	want := "| a ÷ b | 3 | **2.00×** (1.00×, 3.00×, 2.00×) | **2.00×** (1.00×, 3.00×, 2.00×) | **2.00×** (1.00×, 3.00×, 2.00×) |"
	if !strings.Contains(b.String(), want) {
		t.Fatalf("report lacks %q:\n%s", want, b.String())
	}
}

func TestMainCheckFails(t *testing.T) {
	var stdout bytes.Buffer
	err := lab.Main(context.Background(), []string{
		"--approaches", "lossy", "--duration", "100ms", "--accounts", "4", "--out", t.TempDir(), "--check",
	}, &stdout, memoryBuilder("lossy", labtest.Config{Fault: labtest.LoseCredit, Every: 2}))
	if err == nil || !strings.Contains(err.Error(), "lossy") {
		t.Fatalf("check passed a lossy approach: %v\n%s", err, stdout.String())
	}
}

func TestMainBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--approaches", "nope"},
		{"--approaches", ","},
		{"--accounts", "1"},
		{"--duration", "soon"},
		{"--stall-prob", "1.5"},
		{"--zipf", "-2"},
		{"--ttl", "1ms"},
		{"extra"},
		{"--no-such-flag"},
		{"--concurrency", "0"},
		{"--concurrency", "abc"},
		{"--concurrency", "32,"},
		{"--concurrency", ",32"},
		{"--concurrency", "32,-1"},
		{"--concurrency", "32,32"},
		{"--concurrency", ""},
		{"--compare", "ordo"},
		{"--compare", "ordo:ordo"},
		{"--idle-sample", "-1s"},
		{"--rounds", "0"},
		{"--rounds", "many"},
	} {
		var stdout bytes.Buffer
		err := lab.Main(context.Background(), args, &stdout)
		var ue *lab.UsageError
		if !errors.As(err, &ue) {
			t.Errorf("%q: %v, want a usage error", args, err)
		}
	}
	var stdout bytes.Buffer
	if err := lab.Main(context.Background(), []string{"-h"}, &stdout); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
}

// walMemory is the in-memory approach as if it kept its data in
// PostgreSQL: its WAL position advances by perTransfer bytes with every
// transfer, and reading it fails once failAt reads were made (0: never).
// Checkpoint counts checkpoints and the WAL reads made before the last,
// and fails with checkpointErr when set.
type walMemory struct {
	*labtest.Memory
	perTransfer   uint64
	failAt        int
	pos           atomic.Uint64
	reads         atomic.Int64
	checkpoints   atomic.Int64
	readsBefore   atomic.Int64
	checkpointErr error
}

func (m *walMemory) Checkpoint(context.Context) error {
	m.checkpoints.Add(1)
	m.readsBefore.Store(m.reads.Load())
	return m.checkpointErr
}

func (m *walMemory) Transfer(ctx context.Context, from, to int, amount int64) error {
	err := m.Memory.Transfer(ctx, from, to, amount)
	if err == nil {
		m.pos.Add(m.perTransfer)
	}
	return err
}

func (m *walMemory) WALPosition(context.Context) (uint64, bool, error) {
	if n := m.reads.Add(1); m.failAt > 0 && n >= int64(m.failAt) {
		return 0, true, errors.New("server gone")
	}
	return 1<<40 + m.pos.Load(), true, nil
}

// Run reports the WAL an approach's server wrote over the measured
// window, per acknowledged transfer; a failed read is reported, not
// taken for zero.
func TestRunMeasuresWAL(t *testing.T) {
	a := &walMemory{Memory: labtest.NewMemory(labtest.Config{}), perTransfer: 300}
	r, err := lab.Run(context.Background(), a, shortWorkload(11))
	if err != nil {
		t.Fatal(err)
	}
	if r.OK == 0 || r.WALError != "" || r.WALBytes != int64(r.OK)*300 || r.WALPerTransfer != 300 {
		t.Fatalf("OK %d: WAL %d bytes, %v per transfer, error %q; want %d, 300", r.OK, r.WALBytes, r.WALPerTransfer, r.WALError, r.OK*300)
	}
	if a.reads.Load() != 2 {
		t.Fatalf("%d WAL reads, want 2 (before and after the window)", a.reads.Load())
	}
	if a.checkpoints.Load() != 1 || a.readsBefore.Load() != 0 || r.CheckpointError != "" {
		t.Fatalf("%d checkpoints, the last after %d WAL reads, error %q; want 1, before the window",
			a.checkpoints.Load(), a.readsBefore.Load(), r.CheckpointError)
	}

	// A checkpoint the server refuses is reported, and the run goes on.
	refused := &walMemory{Memory: labtest.NewMemory(labtest.Config{}), perTransfer: 300,
		checkpointErr: errors.New("must be superuser or have privileges of pg_checkpoint")}
	r, err = lab.Run(context.Background(), refused, shortWorkload(11))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(r.CheckpointError, "pg_checkpoint") || !r.Passed() || r.WALPerTransfer != 300 {
		t.Fatalf("refused checkpoint: error %q, passed %v, WAL %v per transfer", r.CheckpointError, r.Passed(), r.WALPerTransfer)
	}
	var md bytes.Buffer
	rep := lab.Report{Workload: r.Workload, Concurrencies: []int{r.Workload.Concurrency}, Rounds: 1, Results: []lab.Result{r}}
	if err := lab.WriteMarkdown(&md, rep); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md.String(), "run without a checkpoint before it") {
		t.Fatalf("the report does not say the run had no checkpoint:\n%s", md.String())
	}

	failing := &walMemory{Memory: labtest.NewMemory(labtest.Config{}), perTransfer: 300, failAt: 2}
	r, err = lab.Run(context.Background(), failing, shortWorkload(11))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(r.WALError, "server gone") || r.WALBytes != 0 || r.WALPerTransfer != 0 || !r.Passed() {
		t.Fatalf("failed read: WAL %d bytes, %v per transfer, error %q, passed %v", r.WALBytes, r.WALPerTransfer, r.WALError, r.Passed())
	}

	// An approach that keeps nothing in PostgreSQL reports none.
	r, err = lab.Run(context.Background(), labtest.NewMemory(labtest.Config{}), shortWorkload(11))
	if err != nil {
		t.Fatal(err)
	}
	if r.WALBytes != 0 || r.WALPerTransfer != 0 || r.WALError != "" {
		t.Fatalf("no WAL reader: WAL %d bytes, %v per transfer, error %q", r.WALBytes, r.WALPerTransfer, r.WALError)
	}
}

// The report shows WAL per transfer where it was measured, "–" where the
// approach keeps no data in PostgreSQL, and "n/a" with the reason where
// reading it failed.
func TestMarkdownWAL(t *testing.T) {
	w := shortWorkload(1)
	w.Concurrency = 4
	rep := lab.Report{Workload: w, Concurrencies: []int{4}, Rounds: 1, Results: []lab.Result{
		{Name: "pg", Workload: w, OK: 10, WALBytes: 12345, WALPerTransfer: 1234.5},
		{Name: "kv", Workload: w, OK: 10},
		{Name: "gone", Workload: w, OK: 10, WALError: "reading the WAL position: server gone"},
	}}
	var b bytes.Buffer
	if err := lab.WriteMarkdown(&b, rep); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	for _, want := range []string{"| WAL/transfer |", " | 1234 B | ", "| kv | 10 |", "- gone, WAL n/a: `reading the WAL position: server gone`"} {
		if !strings.Contains(md, want) {
			t.Fatalf("report lacks %q:\n%s", want, md)
		}
	}
	row := func(name string) []string {
		for _, l := range strings.Split(md, "\n") {
			if strings.HasPrefix(l, "| "+name+" |") {
				return strings.Split(l, " | ")
			}
		}
		t.Fatalf("no row for %s:\n%s", name, md)
		return nil
	}
	// Columns: approach ... CPU-s/1k (index 9), process CPU-s/1k (10),
	// WAL/transfer (11).
	if c := row("pg")[11]; c != "1234 B" {
		t.Fatalf("pg WAL cell %q", c)
	}
	if c := row("kv")[11]; c != "–" {
		t.Fatalf("kv WAL cell %q", c)
	}
	if c := row("gone")[11]; c != "n/a" {
		t.Fatalf("gone WAL cell %q", c)
	}
}

// workMemory counts three writes per acknowledged transfer, and setup
// work that the run must not count.
type workMemory struct {
	*labtest.Memory
	writes, setup atomic.Uint64
	renames       bool        // name the count differently once a transfer is made
	rename        atomic.Bool // named differently from now on
}

func (m *workMemory) Setup(ctx context.Context, accounts int, initial int64) error {
	m.setup.Add(uint64(accounts))
	return m.Memory.Setup(ctx, accounts, initial)
}

func (m *workMemory) Transfer(ctx context.Context, from, to int, amount int64) error {
	err := m.Memory.Transfer(ctx, from, to, amount)
	if err == nil {
		m.writes.Add(3)
		m.rename.Store(m.renames)
	}
	return err
}

func (m *workMemory) WorkCounts() []lab.Count {
	name := "writes"
	if m.rename.Load() {
		name = "other writes"
	}
	return []lab.Count{{Name: "setup", N: m.setup.Load()}, {Name: name, N: m.writes.Load()}}
}

// Run reports an approach's own counts of its work over the measured
// window, per acknowledged transfer, and the report shows them; counts
// that do not match from before to after are reported, not used.
func TestRunCountsWork(t *testing.T) {
	a := &workMemory{Memory: labtest.NewMemory(labtest.Config{})}
	r, err := lab.Run(context.Background(), a, shortWorkload(11))
	if err != nil {
		t.Fatal(err)
	}
	want := []lab.Count{{Name: "setup", N: 0, PerTransfer: 0}, {Name: "writes", N: uint64(r.OK) * 3, PerTransfer: 3}}
	if r.OK == 0 || r.WorkError != "" || !slices.Equal(r.Work, want) {
		t.Fatalf("OK %d: work %+v, error %q; want %+v", r.OK, r.Work, r.WorkError, want)
	}
	var md bytes.Buffer
	rep := lab.Report{Workload: r.Workload, Concurrencies: []int{r.Workload.Concurrency}, Rounds: 1, Results: []lab.Result{r}}
	if err := lab.WriteMarkdown(&md, rep); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md.String(), "| approach | setup | writes |") || !strings.Contains(md.String(), "| "+r.Name+" | 0.00 | 3.00 |") {
		t.Fatalf("the report has no table of work per transfer:\n%s", md.String())
	}

	// Counts renamed during the run are not compared.
	renamed := &workMemory{Memory: labtest.NewMemory(labtest.Config{}), renames: true}
	r, err = lab.Run(context.Background(), renamed, shortWorkload(11))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(r.WorkError, `"writes" before the run and "other writes" after`) || r.Work != nil || !r.Passed() {
		t.Fatalf("renamed counts: work %+v, error %q, passed %v", r.Work, r.WorkError, r.Passed())
	}
	md.Reset()
	rep.Results = []lab.Result{r}
	if err := lab.WriteMarkdown(&md, rep); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md.String(), "work counts n/a") {
		t.Fatalf("the report does not say the work counts failed:\n%s", md.String())
	}
}
