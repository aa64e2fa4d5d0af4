package lab

import (
	"bufio"
	"fmt"
	"image/color"
	"io"
	"os"
	"runtime"
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

// WriteMarkdown writes the settings, the machine and one table row per
// result.
func WriteMarkdown(w io.Writer, m Machine, wl Workload, ttl time.Duration, results []Result, failures map[string]error) error {
	b := &strings.Builder{}
	fmt.Fprintf(b, "# Lock lab\n\n")
	fmt.Fprintf(b, "- machine: %s, %d cores, %s %s/%s, %s\n", m.CPU, m.Cores, m.GoVersion, m.OS, m.Arch, m.Time.Format(time.RFC3339))
	fmt.Fprintf(b, "- workload: %d accounts × %d, %v per approach, concurrency %d, zipf %v, amounts 1..%d, seed %d\n",
		wl.Accounts, wl.InitialBalance, wl.Duration, wl.Concurrency, wl.Zipf, wl.MaxAmount, wl.Seed)
	if wl.StallProbability > 0 {
		fmt.Fprintf(b, "- pauses: probability %v per transfer, %v each, lock TTL %v\n", wl.StallProbability, wl.StallDuration, ttl)
	} else {
		fmt.Fprintf(b, "- pauses: off, lock TTL %v\n", ttl)
	}
	fmt.Fprintf(b, "\n| approach | ok | rejected | aborted | unknown | pauses | ok/s | p50 | p99 | conserved | money Δ | accounts off | missing | extra | check |\n")
	fmt.Fprintf(b, "|---|--:|--:|--:|--:|--:|--:|--:|--:|:-:|--:|--:|--:|--:|:-:|\n")
	for _, r := range results {
		check := "pass"
		if !r.Passed() {
			check = "**FAIL**"
		}
		if r.Unknown > 0 && !r.ExactlyOnce() {
			check += " (unknowns)"
		}
		fmt.Fprintf(b, "| %s | %d | %d | %d | %d | %d | %.0f | %v | %v | %s | %+d | %d | %d | %d | %s |\n",
			r.Name, r.OK, r.Rejected, r.Aborted, r.Unknown, r.Stalls, r.Throughput,
			r.P50.Round(10*time.Microsecond), r.P99.Round(10*time.Microsecond),
			yesNo(r.Conserved()), r.MoneyDelta(), r.AccountsOff, r.Missing, r.Extra, check)
	}
	for _, r := range results {
		if r.FirstError != "" {
			fmt.Fprintf(b, "\n- %s, first failed transfer: `%s`", r.Name, r.FirstError)
		}
	}
	for name, err := range failures {
		fmt.Fprintf(b, "\n- %s did not run: `%v`", name, err)
	}
	fmt.Fprintf(b, "\n\nColumns: *aborted* failed with no effect; *unknown* failed with an unknown outcome; *money Δ* final total − initial total; *accounts off* accounts whose balance ≠ initial + acknowledged credits − acknowledged debits, *missing*/*extra* the sums of those differences.\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "**no**"
}

// WriteChart writes a PNG with two bar charts side by side: acknowledged
// transfers per second, and violations (accounts off plus |money Δ| > 0
// counted as the accounts off; the bar shows accounts off).
func WriteChart(path string, results []Result) error {
	names := make([]string, len(results))
	tput := make(plotter.Values, len(results))
	viol := make(plotter.Values, len(results))
	lost := make(plotter.Values, len(results))
	for i, r := range results {
		names[i] = r.Name
		tput[i] = r.Throughput
		viol[i] = float64(r.AccountsOff)
		lost[i] = float64(r.Missing + r.Extra)
	}
	p1 := plot.New()
	p1.Title.Text = "acknowledged transfers/s"
	p1.Y.Label.Text = "transfers/s"
	b1, err := plotter.NewBarChart(tput, vg.Points(18))
	if err != nil {
		return err
	}
	b1.Color = color.RGBA{R: 60, G: 110, B: 180, A: 255}
	p1.Add(b1)
	p1.NominalX(names...)

	p2 := plot.New()
	p2.Title.Text = "exactly-once violations"
	p2.Y.Label.Text = "count / money"
	w := vg.Points(12)
	b2, err := plotter.NewBarChart(viol, w)
	if err != nil {
		return err
	}
	b2.Color = color.RGBA{R: 200, G: 60, B: 50, A: 255}
	b2.Offset = -w / 2
	b3, err := plotter.NewBarChart(lost, w)
	if err != nil {
		return err
	}
	b3.Color = color.RGBA{R: 240, G: 170, B: 40, A: 255}
	b3.Offset = w / 2
	p2.Add(b2, b3)
	p2.Legend.Add("accounts off", b2)
	p2.Legend.Add("money missing + extra", b3)
	p2.Legend.Top = true
	p2.NominalX(names...)
	for _, p := range []*plot.Plot{p1, p2} {
		p.X.Tick.Label.Rotation = 0.5
		p.X.Tick.Label.XAlign = draw.XRight
	}

	img := vgimg.New(vg.Points(1000), vg.Points(400))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Points(10), PadTop: vg.Points(5), PadBottom: vg.Points(5), PadLeft: vg.Points(5), PadRight: vg.Points(5)}
	canvases := plot.Align([][]*plot.Plot{{p1, p2}}, tiles, dc)
	p1.Draw(canvases[0][0])
	p2.Draw(canvases[0][1])
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
