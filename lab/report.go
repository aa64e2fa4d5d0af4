package lab

import (
	"bufio"
	"cmp"
	"fmt"
	"image/color"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Machine describes where the lab ran.
type Machine struct {
	CPU       string
	Cores     int
	GoVersion string
	OS, Arch  string
	Time      time.Time
}

// ThisMachine reads the CPU model from /proc/cpuinfo where there is one.
func ThisMachine() Machine {
	m := Machine{
		CPU:       "unknown",
		Cores:     runtime.NumCPU(),
		GoVersion: runtime.Version(),
		OS:        runtime.GOOS,
		Arch:      runtime.GOARCH,
		Time:      time.Now().UTC(),
	}
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return m
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			m.CPU = strings.TrimSpace(v)
			break
		}
	}
	return m
}

// Report is what one run of the lab measured, as results.json holds it.
type Report struct {
	Machine Machine
	// Workload is the workload of every result; each result's own
	// Workload carries the concurrency it ran at.
	Workload Workload
	// Concurrencies are the concurrencies run, in order.
	Concurrencies []int
	// Rounds is how many times each approach ran at each concurrency
	// (0 or 1: once). In each round every approach runs once, the order
	// turned by one from the round before, so that the ratio of two
	// approaches can be taken within a round, between runs minutes apart
	// at most, and a drift of the machine over the whole bench cancels.
	Rounds int `json:",omitempty"`
	// TTL is the lock TTL.
	TTL time.Duration
	// Results are the runs that completed, by concurrency, then approach.
	Results []Result
	// Failures are the runs that could not be made or checked.
	Failures []Failure
	// Comparisons are the pairs whose ratios the Markdown shows.
	Comparisons []Comparison
}

// Failure is one approach that did not run at one concurrency.
type Failure struct {
	Name        string
	Concurrency int
	Round       int `json:",omitempty"`
	Error       string
}

// Comparison names an approach and the baseline it is compared with.
type Comparison struct {
	Name, Baseline string
}

// find returns the result of the named approach at concurrency c: with
// several rounds, the one of median throughput (the lower of the middle
// two for an even count).
func (rep Report) find(name string, c int) (Result, bool) {
	var rs []Result
	for _, r := range rep.Results {
		if r.Name == name && r.Workload.Concurrency == c {
			rs = append(rs, r)
		}
	}
	if len(rs) == 0 {
		return Result{}, false
	}
	slices.SortStableFunc(rs, func(x, y Result) int { return cmp.Compare(x.Throughput, y.Throughput) })
	return rs[(len(rs)-1)/2], true
}

// inRound returns the result of the named approach at concurrency c in
// round n.
func (rep Report) inRound(name string, c, n int) (Result, bool) {
	for _, r := range rep.Results {
		if r.Name == name && r.Workload.Concurrency == c && r.Round == n {
			return r, true
		}
	}
	return Result{}, false
}

// WriteMarkdown writes the settings, the machine and, per concurrency, a
// table with one row per result and the ratios of the comparisons whose
// two approaches both ran.
func WriteMarkdown(w io.Writer, rep Report) error {
	b := &strings.Builder{}
	m, wl := rep.Machine, rep.Workload
	conc := make([]string, len(rep.Concurrencies))
	for i, c := range rep.Concurrencies {
		conc[i] = fmt.Sprint(c)
	}
	fmt.Fprintf(b, "# Lock lab\n\n")
	fmt.Fprintf(b, "- machine: %s, %d cores, %s %s/%s, %s\n", m.CPU, m.Cores, m.GoVersion, m.OS, m.Arch, m.Time.Format(time.RFC3339))
	fmt.Fprintf(b, "- workload: %d accounts × %d, %v per approach, concurrency %s, zipf %v, amounts 1..%d, seed %d\n",
		wl.Accounts, wl.InitialBalance, wl.Duration, strings.Join(conc, ", "), wl.Zipf, wl.MaxAmount, wl.Seed)
	if rep.Rounds > 1 {
		fmt.Fprintf(b, "- rounds: %d; in each, every approach runs once, in an order turned by one from the round before (row *name #n*: round n)\n", rep.Rounds)
	}
	if wl.StallProbability > 0 {
		fmt.Fprintf(b, "- pauses: probability %v per transfer, %v each, lock TTL %v\n", wl.StallProbability, wl.StallDuration, rep.TTL)
	} else {
		fmt.Fprintf(b, "- pauses: off, lock TTL %v\n", rep.TTL)
	}
	fmt.Fprintf(b, "- CPU-s/1k: busy CPU-seconds of the whole machine (every process: the servers too), from /proc/stat (user+nice+system+irq+softirq+steal, USER_HZ taken as 100) over each run's measured window, per 1,000 acknowledged transfers\n")
	fmt.Fprintf(b, "- process CPU-s/1k: the part of CPU-s/1k this process used (getrusage): the clients, and what an approach runs in-process (nodes with their store clients, an embedded etcd); the rest of CPU-s/1k is the servers' (PostgreSQL, Redis, etcd, ZooKeeper) and anything else's\n")
	if wl.IdleSample > 0 {
		fmt.Fprintf(b, "- idle busy: share of the machine's CPU busy during the %v before each run, the approach set up and idle; well above 0%% means something else kept the machine busy, and CPU-s/1k counts it too\n", wl.IdleSample)
	}

	for _, c := range rep.Concurrencies {
		fmt.Fprintf(b, "\n## Concurrency %d\n\n", c)
		fmt.Fprintf(b, "| approach | ok | rejected | aborted | unknown | pauses | ok/s | p50 | p99 | CPU-s/1k | process CPU-s/1k | WAL/transfer | idle busy | conserved | money Δ | accounts off | missing | extra | check |\n")
		fmt.Fprintf(b, "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|:-:|--:|--:|--:|--:|:-:|\n")
		var ran []Result
		for _, r := range rep.Results {
			if r.Workload.Concurrency != c {
				continue
			}
			ran = append(ran, r)
			check := "pass"
			if !r.Passed() {
				check = "**FAIL**"
			}
			if r.Unknown > 0 && !r.ExactlyOnce() {
				check += " (unknowns)"
			}
			fmt.Fprintf(b, "| %s | %d | %d | %d | %d | %d | %.0f | %v | %v | %s | %s | %s | %s | %s | %+d | %d | %d | %d | %s |\n",
				rep.label(r), r.OK, r.Rejected, r.Aborted, r.Unknown, r.Stalls, r.Throughput,
				roundLatency(r.P50), roundLatency(r.P99), cpuPer1000(r), processCPUPer1000(r), walPerTransfer(r), idleBusy(r),
				yesNo(r.Conserved()), r.MoneyDelta(), r.AccountsOff, r.Missing, r.Extra, check)
		}
		writeComparisons(b, rep, c)
		writeWork(b, rep, ran)
		var notes []string
		for _, r := range ran {
			if r.FirstError != "" {
				notes = append(notes, fmt.Sprintf("- %s, first failed transfer: `%s`", rep.label(r), r.FirstError))
			}
			if r.CPUError != "" {
				notes = append(notes, fmt.Sprintf("- %s, CPU time n/a: `%s`", rep.label(r), r.CPUError))
			}
			if r.WALError != "" {
				notes = append(notes, fmt.Sprintf("- %s, WAL n/a: `%s`", rep.label(r), r.WALError))
			}
			if r.WorkError != "" {
				notes = append(notes, fmt.Sprintf("- %s, work counts n/a: `%s`", rep.label(r), r.WorkError))
			}
			if r.CheckpointError != "" {
				notes = append(notes, fmt.Sprintf("- %s, run without a checkpoint before it: `%s`", rep.label(r), r.CheckpointError))
			}
		}
		fails := slices.Clone(rep.Failures)
		slices.SortFunc(fails, func(x, y Failure) int { return strings.Compare(x.Name, y.Name) })
		for _, f := range fails {
			if f.Concurrency == c {
				notes = append(notes, fmt.Sprintf("- %s did not run: `%s`", rep.label(Result{Name: f.Name, Round: f.Round}), f.Error))
			}
		}
		if len(notes) > 0 {
			fmt.Fprintf(b, "\n%s\n", strings.Join(notes, "\n"))
		}
	}
	fmt.Fprintf(b, "\nColumns: *aborted* failed with no effect; *unknown* failed with an unknown outcome; *CPU-s/1k* machine CPU-seconds per 1,000 acknowledged transfers, *process CPU-s/1k* the part this process used; *WAL/transfer* bytes of write-ahead log the PostgreSQL server wrote per acknowledged transfer (pg_current_wal_lsn before and after the run, every client of the server counted; – for approaches that keep no data in PostgreSQL); *money Δ* final total − initial total; *accounts off* accounts whose balance ≠ initial + acknowledged credits − acknowledged debits, *missing*/*extra* the sums of those differences. Ratios are approach ÷ baseline: above 1 means more transfers/s, a longer p99, more CPU per transfer.\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// writeWork writes, for the results that count their own work
// (WorkCounter), each count per acknowledged transfer.
func writeWork(b *strings.Builder, rep Report, ran []Result) {
	var names []string
	for _, r := range ran {
		for _, c := range r.Work {
			if !slices.Contains(names, c.Name) {
				names = append(names, c.Name)
			}
		}
	}
	if len(names) == 0 {
		return
	}
	fmt.Fprintf(b, "\nWork per acknowledged transfer, as the approach counts it:\n\n| approach | %s |\n|---|%s\n",
		strings.Join(names, " | "), strings.Repeat("--:|", len(names)))
	for _, r := range ran {
		if len(r.Work) == 0 {
			continue
		}
		cells := make([]string, len(names))
		for i, name := range names {
			cells[i] = "–"
			for _, c := range r.Work {
				if c.Name == name {
					cells[i] = fmt.Sprintf("%.2f", c.PerTransfer)
				}
			}
		}
		fmt.Fprintf(b, "| %s | %s |\n", rep.label(r), strings.Join(cells, " | "))
	}
}

// label names a result in the tables: its approach, and its round when
// there were several.
func (rep Report) label(r Result) string {
	if rep.Rounds > 1 {
		return fmt.Sprintf("%s #%d", r.Name, r.Round)
	}
	return r.Name
}

// writeComparisons writes the ratio table of the comparisons that ran at
// concurrency c, if any.
func writeComparisons(b *strings.Builder, rep Report, c int) {
	if rep.Rounds > 1 {
		writeRoundComparisons(b, rep, c)
		return
	}
	header := false
	for _, cmp := range rep.Comparisons {
		r, ok1 := rep.find(cmp.Name, c)
		base, ok2 := rep.find(cmp.Baseline, c)
		if !ok1 || !ok2 {
			continue
		}
		if !header {
			fmt.Fprintf(b, "\n| approach ÷ baseline | ok/s | p99 | CPU-s/1k |\n|---|--:|--:|--:|\n")
			header = true
		}
		cpu := "n/a"
		if r.CPUError == "" && base.CPUError == "" {
			cpu = fmt.Sprintf("%s (%.3f ÷ %.3f)", ratio(r.CPUPer1000, base.CPUPer1000), r.CPUPer1000, base.CPUPer1000)
		}
		fmt.Fprintf(b, "| %s ÷ %s | %s (%.0f ÷ %.0f) | %s (%v ÷ %v) | %s |\n", cmp.Name, cmp.Baseline,
			ratio(r.Throughput, base.Throughput), r.Throughput, base.Throughput,
			ratio(r.P99.Seconds(), base.P99.Seconds()), roundLatency(r.P99), roundLatency(base.P99), cpu)
	}
}

// writeRoundComparisons writes, for each comparison, the ratios taken
// within each round in which both approaches ran, and their median.
func writeRoundComparisons(b *strings.Builder, rep Report, c int) {
	header := false
	for _, cmp := range rep.Comparisons {
		var tput, p99, cpu []float64
		cpuAll := true
		for n := 1; n <= rep.Rounds; n++ {
			r, ok1 := rep.inRound(cmp.Name, c, n)
			base, ok2 := rep.inRound(cmp.Baseline, c, n)
			if !ok1 || !ok2 || base.Throughput == 0 || base.P99 == 0 {
				continue
			}
			tput = append(tput, r.Throughput/base.Throughput)
			p99 = append(p99, r.P99.Seconds()/base.P99.Seconds())
			if r.CPUError == "" && base.CPUError == "" && base.CPUPer1000 > 0 {
				cpu = append(cpu, r.CPUPer1000/base.CPUPer1000)
			} else {
				cpuAll = false
			}
		}
		if len(tput) == 0 {
			continue
		}
		if !header {
			fmt.Fprintf(b, "\n| approach ÷ baseline, within each round | rounds | ok/s | p99 | CPU-s/1k |\n|---|--:|--:|--:|--:|\n")
			header = true
		}
		cpuCell := "n/a"
		if cpuAll {
			cpuCell = ratios(cpu)
		}
		fmt.Fprintf(b, "| %s ÷ %s | %d | %s | %s | %s |\n", cmp.Name, cmp.Baseline, len(tput), ratios(tput), ratios(p99), cpuCell)
	}
	if header {
		fmt.Fprintf(b, "\nEach ratio is taken within one round; the bold figure is their median (the mean of the middle two for an even count), then the rounds' ratios in round order.\n")
	}
}

// ratios formats per-round ratios: their median, then each.
func ratios(v []float64) string {
	each := make([]string, len(v))
	for i, x := range v {
		each[i] = fmt.Sprintf("%.2f×", x)
	}
	return fmt.Sprintf("**%.2f×** (%s)", median(v), strings.Join(each, ", "))
}

// median returns the median of v (not empty), leaving v as it is.
func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// ratio formats x ÷ y, or "–" when y is 0.
func ratio(x, y float64) string {
	if y == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", x/y)
}

func roundLatency(d time.Duration) time.Duration { return d.Round(10 * time.Microsecond) }

// walPerTransfer formats the WAL bytes per transfer: "–" for an approach
// that keeps no data in PostgreSQL, "n/a" when they could not be read.
func walPerTransfer(r Result) string {
	switch {
	case r.WALError != "":
		return "n/a"
	case r.WALBytes == 0 && r.WALPerTransfer == 0:
		return "–"
	}
	return fmt.Sprintf("%.0f B", r.WALPerTransfer)
}

func cpuPer1000(r Result) string {
	if r.CPUError != "" {
		return "n/a"
	}
	return fmt.Sprintf("%.3f", r.CPUPer1000)
}

func processCPUPer1000(r Result) string {
	if r.ProcessCPUError != "" {
		return "n/a"
	}
	return fmt.Sprintf("%.3f", r.ProcessCPUPer1000)
}

func idleBusy(r Result) string {
	if r.CPUError != "" || r.Workload.IdleSample == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.0f%%", 100*r.IdleBusy)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "**no**"
}

// concurrencyColors are the bar colours of the chart's concurrencies, in
// order; further concurrencies reuse them.
var concurrencyColors = []color.RGBA{
	{R: 60, G: 110, B: 180, A: 255},
	{R: 230, G: 150, B: 30, A: 255},
	{R: 80, G: 160, B: 80, A: 255},
	{R: 150, G: 80, B: 170, A: 255},
	{R: 200, G: 60, B: 50, A: 255},
}

// WriteChart writes a PNG with four bar charts, one group of bars per
// approach and one bar per concurrency in each group: acknowledged
// transfers per second, machine CPU-seconds per 1,000 transfers, accounts
// off (exactly-once violations) and money missing + extra.
func WriteChart(path string, rep Report) error {
	var names []string
	for _, r := range rep.Results {
		if !slices.Contains(names, r.Name) {
			names = append(names, r.Name)
		}
	}
	// With several rounds, a bar shows the round of median throughput, and
	// a violation bar the worst round.
	// Each bar is labelled with its value: a panel of zeros (no
	// violation) then reads as such, not as missing bars.
	panels := []struct {
		title, ylabel string
		value         func(Result) float64
		worst         bool   // the worst round's value (violations)
		format        string // of the bars' labels
	}{
		{"throughput", "acknowledged transfers/s", func(r Result) float64 { return r.Throughput }, false, "%.0f"},
		{"machine CPU per transfer", "CPU-seconds per 1,000 transfers", func(r Result) float64 { return r.CPUPer1000 }, false, "%.2f"},
		{"exactly-once violations", "accounts off", func(r Result) float64 { return float64(r.AccountsOff) }, true, "%.0f"},
		{"money lost or created", "missing + extra", func(r Result) float64 { return float64(r.Missing + r.Extra) }, true, "%.0f"},
	}
	n := len(rep.Concurrencies)
	width := vg.Points(min(48, 96/float64(max(n, 1))))
	var plots []*plot.Plot
	for _, pn := range panels {
		p := plot.New()
		p.Title.Text = pn.title
		p.Y.Label.Text = pn.ylabel
		top := 0.0
		for i, c := range rep.Concurrencies {
			v := make(plotter.Values, len(names))
			for j, name := range names {
				if r, ok := rep.find(name, c); ok {
					v[j] = pn.value(r)
				}
				if pn.worst {
					for _, r := range rep.Results {
						if r.Name == name && r.Workload.Concurrency == c {
							v[j] = max(v[j], pn.value(r))
						}
					}
				}
				top = max(top, v[j])
			}
			bars, err := plotter.NewBarChart(v, width)
			if err != nil {
				return err
			}
			bars.Color = concurrencyColors[i%len(concurrencyColors)]
			bars.LineStyle.Width = 0
			bars.Offset = width * vg.Length(2*i-n+1) / 2
			p.Add(bars)
			p.Legend.Add(fmt.Sprintf("concurrency %d", c), bars)
			vals := plotter.XYLabels{XYs: make(plotter.XYs, len(v)), Labels: make([]string, len(v))}
			for j := range v {
				vals.XYs[j] = plotter.XY{X: float64(j), Y: v[j]}
				vals.Labels[j] = fmt.Sprintf(pn.format, v[j])
			}
			labels, err := plotter.NewLabels(vals)
			if err != nil {
				return err
			}
			for k := range labels.TextStyle {
				labels.TextStyle[k].XAlign = draw.XCenter
				labels.TextStyle[k].Font.Size = vg.Points(8)
			}
			labels.Offset = vg.Point{X: bars.Offset, Y: vg.Points(2)}
			p.Add(labels)
		}
		p.Legend.Top = true
		// Headroom above the tallest bar for its label and the legend; a
		// panel of zeros (no violation) still shows 0 at the bottom.
		p.Y.Min, p.Y.Max = 0, max(1, top*1.3)
		if pn.worst && top <= 4 {
			// Counts: whole ticks only.
			var ticks plot.ConstantTicks
			for k := 0.0; k <= p.Y.Max; k++ {
				ticks = append(ticks, plot.Tick{Value: k, Label: fmt.Sprintf("%.0f", k)})
			}
			p.Y.Tick.Marker = ticks
		}
		p.X.Min, p.X.Max = -0.6, float64(len(names))-0.4
		p.NominalX(names...)
		p.X.Tick.Label.Rotation = 0.5
		p.X.Tick.Label.XAlign = draw.XRight
		plots = append(plots, p)
	}

	img := vgimg.New(vg.Points(1200), vg.Points(800))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 2, Cols: 2, PadX: vg.Points(20), PadY: vg.Points(20), PadTop: vg.Points(5), PadBottom: vg.Points(5), PadLeft: vg.Points(5), PadRight: vg.Points(5)}
	canvases := plot.Align([][]*plot.Plot{plots[:2], plots[2:]}, tiles, dc)
	for i, p := range plots {
		p.Draw(canvases[i/2][i%2])
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
