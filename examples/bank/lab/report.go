package lab

import (
	"bufio"
	"fmt"
	"image/color"
	"io"
	"maps"
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
	for _, name := range slices.Sorted(maps.Keys(failures)) {
		fmt.Fprintf(b, "\n- %s did not run: `%v`", name, failures[name])
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

// WriteChart writes a PNG with three bar charts side by side, one bar per
// result: acknowledged transfers per second, accounts off (exactly-once
// violations) and money missing + extra.
func WriteChart(path string, results []Result) error {
	names := make([]string, len(results))
	tput := make(plotter.Values, len(results))
	off := make(plotter.Values, len(results))
	money := make(plotter.Values, len(results))
	for i, r := range results {
		names[i] = r.Name
		tput[i] = r.Throughput
		off[i] = float64(r.AccountsOff)
		money[i] = float64(r.Missing + r.Extra)
	}
	var plots []*plot.Plot
	for _, c := range []struct {
		title, ylabel string
		v             plotter.Values
		col           color.RGBA
	}{
		{"throughput", "acknowledged transfers/s", tput, color.RGBA{R: 60, G: 110, B: 180, A: 255}},
		{"exactly-once violations", "accounts off", off, color.RGBA{R: 200, G: 60, B: 50, A: 255}},
		{"money lost or created", "missing + extra", money, color.RGBA{R: 230, G: 150, B: 30, A: 255}},
	} {
		p := plot.New()
		p.Title.Text = c.title
		p.Y.Label.Text = c.ylabel
		p.Y.Min = 0
		bars, err := plotter.NewBarChart(c.v, vg.Points(16))
		if err != nil {
			return err
		}
		bars.Color = c.col
		p.Add(bars)
		p.NominalX(names...)
		p.X.Tick.Label.Rotation = 0.5
		p.X.Tick.Label.XAlign = draw.XRight
		plots = append(plots, p)
	}

	img := vgimg.New(vg.Points(1200), vg.Points(400))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: 3, PadX: vg.Points(10), PadTop: vg.Points(5), PadBottom: vg.Points(5), PadLeft: vg.Points(5), PadRight: vg.Points(5)}
	canvases := plot.Align([][]*plot.Plot{plots}, tiles, dc)
	for i, p := range plots {
		p.Draw(canvases[0][i])
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
