package soak

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Colours of the processes (nodes, then etcd members) and of the faults.
var (
	processColors = map[string]color.RGBA{
		"n1": {0x1f, 0x77, 0xb4, 0xff}, "n2": {0xff, 0x7f, 0x0e, 0xff}, "n3": {0x2c, 0xa0, 0x2c, 0xff},
		"n4": {0xd6, 0x27, 0x28, 0xff}, "n5": {0x94, 0x67, 0xbd, 0xff},
		"e1": {0x8c, 0x56, 0x4b, 0xff}, "e2": {0xe3, 0x77, 0xc2, 0xff}, "e3": {0x7f, 0x7f, 0x7f, 0xff},
		"e4": {0xbc, 0xbd, 0x22, 0xff}, "e5": {0x17, 0xbe, 0xcf, 0xff},
		clusterWide: {0x33, 0x33, 0x33, 0xff},
	}
	faultColors = map[string]color.RGBA{
		"kill": {0xe0, 0x00, 0x00, 0xff}, "pause": {0xb0, 0x00, 0xd0, 0xff}, "partition": {0xc8, 0xa0, 0x00, 0xff},
		"etcd": {0x00, 0x00, 0x00, 0xff}, "postgres": {0x00, 0xa8, 0xc8, 0xff},
	}
	windowColor = color.RGBA{0xee, 0xee, 0xee, 0xff}
)

func colorOf(process string) color.RGBA {
	if c, ok := processColors[process]; ok {
		return c
	}
	return color.RGBA{0, 0, 0, 0xff}
}

// panel is one chart of the image: its lines, drawn over the judged
// window and the faults.
type panel struct {
	title string
	lines []line
	log   bool
}

// line is one process's series (one segment per incarnation, so a
// restart leaves a gap) or a latency percentile.
type line struct {
	label    string
	color    color.RGBA
	dashed   bool
	segments []plotter.XYs
}

// panels builds the chart's panels from the report, minutes on X.
func (rep *Report) panels() []panel {
	var out []panel
	for _, sp := range specs {
		if sp.panel != "" {
			continue
		}
		var ss []Series
		for _, s := range rep.Series {
			if s.Name == sp.name || specOf(s.Name).panel == sp.name {
				ss = append(ss, s)
			}
		}
		if len(ss) == 0 {
			continue
		}
		for _, group := range splitMembers(sp, ss) {
			out = append(out, panelOf(sp, group.title, group.series))
		}
	}
	return append(out, rep.clientPanels()...)
}

type seriesGroup struct {
	title  string
	series []Series
}

// splitMembers puts the nodes' and the etcd members' series of a byte
// quantity in panels of their own when both are present: on one axis the
// members' gigabytes would flatten the nodes' megabytes.
func splitMembers(sp spec, ss []Series) []seriesGroup {
	var nodes, members []Series
	for _, s := range ss {
		if s.Member {
			members = append(members, s)
		} else {
			nodes = append(nodes, s)
		}
	}
	if !sp.bytes || len(nodes) == 0 || len(members) == 0 {
		return []seriesGroup{{sp.title, ss}}
	}
	return []seriesGroup{{sp.title + ", nodes", nodes}, {sp.title + ", etcd members", members}}
}

// panelOf draws the series ss of spec sp.
func panelOf(sp spec, title string, ss []Series) panel {
	p := panel{title: title}
	for _, s := range ss {
		l := line{label: s.Process, color: colorOf(s.Process), dashed: !(s.Fit != nil && s.Fit.Judged)}
		switch {
		case s.Name == seriesActiveExcess || s.Name == seriesDedupExcess:
			l.label, l.color = "excess", color.RGBA{0, 0, 0, 0xff}
		case s.Process == clusterWide && len(ss) > 1:
			l.label, l.color = "total", color.RGBA{0x99, 0x99, 0x99, 0xff}
		}
		if s.Fit != nil && s.Fit.Judged && !s.Fit.OK {
			l.label += " GROWS"
		}
		var seg plotter.XYs
		inc := -1
		for _, pt := range s.Points {
			if pt.Inc != inc && len(seg) > 0 {
				l.segments = append(l.segments, seg)
				seg = nil
			}
			inc = pt.Inc
			v := pt.V
			if sp.bytes {
				v /= 1 << 20
			}
			seg = append(seg, plotter.XY{X: pt.At / 60, Y: v})
		}
		if len(seg) > 0 {
			l.segments = append(l.segments, seg)
		}
		p.lines = append(p.lines, l)
	}
	return p
}

// clientPanels draws the clients' latency and throughput.
func (rep *Report) clientPanels() []panel {
	var out []panel
	lat := panel{title: fmt.Sprintf("client latency per %s (ms, log)", rep.SampleEvery), log: true}
	thr := panel{title: fmt.Sprintf("answered ops/s and unknown outcomes per %s", rep.SampleEvery)}
	p50 := line{label: "p50", color: color.RGBA{0x1f, 0x77, 0xb4, 0xff}}
	p99 := line{label: "p99", color: color.RGBA{0xd6, 0x27, 0x28, 0xff}}
	ops := line{label: "ops/s", color: color.RGBA{0x2c, 0xa0, 0x2c, 0xff}}
	unk := line{label: "unknown", color: color.RGBA{0xd6, 0x27, 0x28, 0xff}, dashed: true}
	var s50, s99, sops, sunk plotter.XYs
	for _, b := range rep.Latency {
		mid := (b.FromS + b.ToS) / 2 / 60
		if b.Answered > 0 {
			s50 = append(s50, plotter.XY{X: mid, Y: max(b.P50MS, 0.01)})
			s99 = append(s99, plotter.XY{X: mid, Y: max(b.P99MS, 0.01)})
		}
		sops = append(sops, plotter.XY{X: mid, Y: b.OpsPerS})
		sunk = append(sunk, plotter.XY{X: mid, Y: float64(b.Unknown)})
	}
	if len(s50) > 0 {
		p50.segments, p99.segments = []plotter.XYs{s50}, []plotter.XYs{s99}
		lat.lines = []line{p50, p99}
		out = append(out, lat)
	}
	if len(sops) > 0 {
		ops.segments, unk.segments = []plotter.XYs{sops}, []plotter.XYs{sunk}
		thr.lines = []line{ops, unk}
		out = append(out, thr)
	}
	return out
}

// WriteChart draws soak.png: one panel per series (one line per process,
// dashed when not judged, broken at restarts), the client latency and
// throughput, the judged window shaded and each fault a vertical line in
// its kind's colour.
func (rep *Report) WriteChart(path string) error {
	panels := rep.panels()
	const cols = 3
	rows := (len(panels) + 1 + cols - 1) / cols // one tile for the legend
	xmax := 0.0
	for _, p := range panels {
		for _, l := range p.lines {
			for _, seg := range l.segments {
				for _, xy := range seg {
					xmax = max(xmax, xy.X)
				}
			}
		}
	}
	xmax = max(xmax, rep.WindowS[1]/60)
	var plots []*plot.Plot
	for _, pn := range panels {
		p, err := rep.drawPanel(pn, xmax)
		if err != nil {
			return err
		}
		plots = append(plots, p)
	}
	plots = append(plots, rep.legendPlot())
	for len(plots) < rows*cols {
		p := plot.New()
		p.HideAxes()
		plots = append(plots, p)
	}
	grid := make([][]*plot.Plot, rows)
	for r := range grid {
		grid[r] = plots[r*cols : (r+1)*cols]
	}
	const tile = 330
	const head = 48
	img := vgimg.New(vg.Points(cols*tile*1.4), vg.Points(float64(rows)*tile+head))
	dc := draw.New(img)
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	title := draw.Canvas{Canvas: dc, Rectangle: dc.Rectangle}
	title.Min.Y = title.Max.Y - vg.Points(head)
	verdict := "PASS"
	if !rep.OK {
		verdict = "FAIL"
	}
	style := plot.New().Title.TextStyle
	style.Font.Size = vg.Points(16)
	style.XAlign = draw.XCenter
	title.FillText(style, vg.Point{X: (title.Min.X + title.Max.X) / 2, Y: title.Min.Y + vg.Points(20)},
		fmt.Sprintf("bank soak %s — store %s, %s, seed %d, %d faults; x: minutes since the load started",
			verdict, rep.Store, rep.Duration, rep.Seed, len(rep.Faults)))
	body := draw.Canvas{Canvas: dc, Rectangle: dc.Rectangle}
	body.Max.Y -= vg.Points(head)
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Points(24), PadY: vg.Points(18), PadTop: vg.Points(4),
		PadBottom: vg.Points(6), PadLeft: vg.Points(6), PadRight: vg.Points(12)}
	canvases := plot.Align(grid, tiles, body)
	for r := range grid {
		for c, p := range grid[r] {
			p.Draw(canvases[r][c])
		}
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

func (rep *Report) drawPanel(pn panel, xmax float64) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = pn.title
	p.Title.TextStyle.Font.Size = vg.Points(11)
	p.X.Min, p.X.Max = 0, xmax
	ymin, ymax := math.Inf(1), 0.0
	for _, l := range pn.lines {
		for _, seg := range l.segments {
			for _, xy := range seg {
				ymin, ymax = min(ymin, xy.Y), max(ymax, xy.Y)
			}
		}
	}
	if pn.log {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
		p.Y.Min, p.Y.Max = max(math.Pow(10, math.Floor(math.Log10(max(ymin, 0.01)))), 0.01), math.Max(ymax*2, 1)
	} else {
		p.Y.Min, p.Y.Max = math.Min(ymin*1.15, 0), math.Max(ymax*1.15, 1)
	}
	// The judged window, shaded, under everything.
	win, err := plotter.NewPolygon(plotter.XYs{{X: rep.WindowS[0] / 60, Y: p.Y.Min}, {X: rep.WindowS[1] / 60, Y: p.Y.Min},
		{X: rep.WindowS[1] / 60, Y: p.Y.Max}, {X: rep.WindowS[0] / 60, Y: p.Y.Max}})
	if err != nil {
		return nil, err
	}
	win.Color = windowColor
	win.LineStyle.Width = 0
	p.Add(win)
	for _, f := range rep.Faults {
		x := f.AtS / 60
		v, err := plotter.NewLine(plotter.XYs{{X: x, Y: p.Y.Min}, {X: x, Y: p.Y.Max}})
		if err != nil {
			return nil, err
		}
		v.Color = faultColors[f.Kind]
		v.Width = vg.Points(1)
		v.Dashes = []vg.Length{vg.Points(3), vg.Points(2)}
		p.Add(v)
	}
	names := make([]string, 0, len(pn.lines))
	for _, l := range pn.lines {
		names = append(names, l.label)
	}
	sort.Strings(names)
	for _, l := range pn.lines {
		for i, seg := range l.segments {
			ln, err := plotter.NewLine(seg)
			if err != nil {
				return nil, err
			}
			ln.Color = l.color
			ln.Width = vg.Points(1.3)
			if l.dashed {
				ln.Dashes = []vg.Length{vg.Points(4), vg.Points(2)}
			}
			p.Add(ln)
			if i == 0 {
				p.Legend.Add(l.label, ln)
			}
		}
	}
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.TextStyle.Font.Size = vg.Points(8)
	p.Legend.ThumbnailWidth = vg.Points(12)
	p.Legend.Padding = vg.Points(1)
	return p, nil
}

// legendPlot is the tile that names the faults' colours and the verdict.
func (rep *Report) legendPlot() *plot.Plot {
	p := plot.New()
	p.HideAxes()
	p.Title.Text = "legend"
	p.Title.TextStyle.Font.Size = vg.Points(11)
	seen := map[string]bool{}
	for _, f := range rep.Faults {
		if seen[f.Kind] {
			continue
		}
		seen[f.Kind] = true
		ln, _ := plotter.NewLine(plotter.XYs{{X: 0, Y: 0}, {X: 1, Y: 0}})
		ln.Color = faultColors[f.Kind]
		ln.Dashes = []vg.Length{vg.Points(3), vg.Points(2)}
		p.Legend.Add("fault: "+f.Kind, ln)
	}
	win, _ := plotter.NewPolygon(plotter.XYs{{X: 0, Y: 0}, {X: 1, Y: 0}, {X: 1, Y: 1}})
	win.Color = windowColor
	win.LineStyle.Width = 0
	p.Legend.Add(fmt.Sprintf("judged window (%.0f-%.0f min)", rep.WindowS[0]/60, rep.WindowS[1]/60), win)
	dash, _ := plotter.NewLine(plotter.XYs{{X: 0, Y: 0}, {X: 1, Y: 0}})
	dash.Dashes = []vg.Length{vg.Points(4), vg.Points(2)}
	p.Legend.Add("dashed: shown, not judged", dash)
	solid, _ := plotter.NewLine(plotter.XYs{{X: 0, Y: 0}, {X: 1, Y: 0}})
	p.Legend.Add("solid: judged; a gap is a restart", solid)
	p.Legend.Add(fmt.Sprintf("pending Forgets after the check: %d", rep.Drain.Pending))
	if rep.Chaos != nil {
		p.Legend.Add(fmt.Sprintf("bank check ok=%v, %d violations", rep.Chaos.Check.OK, rep.Chaos.Violations))
	}
	for i, f := range rep.Failures {
		if i == 3 {
			p.Legend.Add(fmt.Sprintf("… %d more failures in soak.md", len(rep.Failures)-3))
			break
		}
		p.Legend.Add("FAIL: " + shorten(f, 60))
	}
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.TextStyle.Font.Size = vg.Points(10)
	return p
}

// shorten cuts s to n runes.
func shorten(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
