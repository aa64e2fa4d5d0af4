package soak

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// window is the rule of a 30-minute run judged over its last 10 minutes,
// read every minute.
func window() Rule {
	return Rule{From: 1200, To: 1800, Settle: 60, Rel: 0.2, Floor: 10, MinPoints: 4, MinSpan: 200}
}

// series reads f every step seconds over [0, end].
func series(end, step float64, f func(t float64) float64) []Point {
	var out []Point
	for t := 0.0; t <= end; t += step {
		out = append(out, Point{At: t, V: f(t), Inc: 1})
	}
	return out
}

func TestJudgeFlatNoisySeriesPasses(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pts := series(1800, 60, func(float64) float64 { return 1000 + rng.NormFloat64()*40 })
	f := Judge(pts, nil, window())
	if !f.Judged || !f.OK {
		t.Fatalf("flat series: %+v", f)
	}
	if f.Points != 11 {
		t.Fatalf("used %d readings, want the 11 of the window", f.Points)
	}
	if math.Abs(f.Level-1000) > 50 {
		t.Fatalf("level %v, want about 1000", f.Level)
	}
}

func TestJudgeSteadyGrowthFails(t *testing.T) {
	// 60 per minute: 600 over the window, against a limit of 20% of its
	// median, 2,500.
	pts := series(1800, 60, func(t float64) float64 { return 1000 + t })
	f := Judge(pts, nil, window())
	if !f.Judged || f.OK {
		t.Fatalf("growing series passed: %+v", f)
	}
	if math.Abs(f.SlopePerMin-60) > 1e-9 || math.Abs(f.Growth-600) > 1e-6 || f.Limit != 500 {
		t.Fatalf("slope %v/min, growth %v, limit %v; want 60/min, 600, 500", f.SlopePerMin, f.Growth, f.Limit)
	}
	if !strings.Contains(f.Why, "grows") {
		t.Fatalf("why %q", f.Why)
	}
}

func TestJudgeGrowthUnderEitherBoundPasses(t *testing.T) {
	// 15% of the level: under Rel.
	pts := series(1800, 60, func(t float64) float64 { return 1000 + (t-1200)*150/600 })
	if f := Judge(pts, nil, window()); !f.OK {
		t.Fatalf("growth under 20%% failed: %+v", f)
	}
	// A small series growing by half, but only 5 in absolute terms: under
	// Floor.
	pts = series(1800, 60, func(t float64) float64 { return 10 + (t-1200)*5/600 })
	if f := Judge(pts, nil, window()); !f.OK {
		t.Fatalf("growth under the floor failed: %+v", f)
	}
}

// A garbage-collected heap: a sawtooth whose peaks do not rise passes; the
// same sawtooth on a rising base fails, wherever the teeth fall.
func TestJudgeSawtooth(t *testing.T) {
	tooth := func(t float64) float64 { return 200 * math.Mod(t, 150) / 150 }
	for _, phase := range []float64{0, 40, 90} {
		flat := series(1800, 60, func(t float64) float64 { return 1000 + tooth(t+phase) })
		if f := Judge(flat, nil, window()); !f.Judged || !f.OK {
			t.Fatalf("phase %v: flat sawtooth failed: %+v", phase, f)
		}
		rising := series(1800, 60, func(t float64) float64 { return 1000 + t + tooth(t+phase) })
		if f := Judge(rising, nil, window()); f.OK {
			t.Fatalf("phase %v: rising sawtooth passed: %+v", phase, f)
		}
	}
}

// A fault's spike, even in the last readings of the window, does not pass
// for growth.
func TestJudgeIgnoresSpikes(t *testing.T) {
	pts := series(1800, 60, func(t float64) float64 {
		if t == 1740 || t == 1800 {
			return 3000
		}
		return 1000
	})
	if f := Judge(pts, nil, window()); !f.OK {
		t.Fatalf("a spike at the end failed the series: %+v", f)
	}
}

// A leak that steps up at every fault (goroutines left behind by each
// kill, say) is growth.
func TestJudgeStaircaseFails(t *testing.T) {
	pts := series(1800, 60, func(t float64) float64 { return 1000 + 150*math.Floor(t/180) })
	if f := Judge(pts, nil, window()); f.OK {
		t.Fatalf("staircase passed: %+v", f)
	}
}

// A process restarted in the window starts from zero and warms up: only
// readings of one incarnation are paired, and the warm-up is left out.
func TestJudgeRestartedProcess(t *testing.T) {
	var pts []Point
	for t := 0.0; t <= 1800; t += 30 {
		switch {
		case t < 1400:
			pts = append(pts, Point{At: t, V: 1000, Inc: 1})
		case t < 1430:
		case t < 1500: // warm-up after the restart at 1430
			pts = append(pts, Point{At: t, V: 200 + (t-1430)*10, Inc: 2})
		default:
			pts = append(pts, Point{At: t, V: 1000, Inc: 2})
		}
	}
	r := window()
	f := Judge(pts, map[int]float64{2: 1430}, r)
	if !f.Judged || !f.OK {
		t.Fatalf("restarted process failed: %+v", f)
	}
	if f.Points != 7+11 {
		t.Fatalf("used %d readings, want 7 of the first incarnation and 11 after the settle", f.Points)
	}
	// Without the settle the warm-up is used, and outvoted.
	r.Settle = 0
	if f := Judge(pts, map[int]float64{2: 1430}, r); !f.OK || f.Points != 7+2+11 {
		t.Fatalf("warm-up readings: %+v", f)
	}
}

// A reading taken a moment after the window's end (the round at the end
// of the load) counts, with Slack.
func TestJudgeSlack(t *testing.T) {
	pts := series(1800, 60, func(t float64) float64 { return 1000 + t })
	pts[len(pts)-1].At += 0.3
	r := window()
	if f := Judge(pts, nil, r); f.Points != 10 {
		t.Fatalf("without slack: %d readings, want 10", f.Points)
	}
	r.Slack = 1
	if f := Judge(pts, nil, r); f.Points != 11 {
		t.Fatalf("with slack: %d readings, want 11", f.Points)
	}
}

func TestJudgeTooFewReadings(t *testing.T) {
	pts := []Point{{At: 1300, V: 1, Inc: 1}, {At: 1400, V: 900, Inc: 1}, {At: 1500, V: 5000, Inc: 1}}
	f := Judge(pts, nil, window())
	if f.Judged || !f.OK || !strings.Contains(f.Why, "3 usable readings") {
		t.Fatalf("too few readings: %+v", f)
	}
	// Enough readings, but spread over incarnations too short to fit.
	pts = []Point{{At: 1300, V: 1, Inc: 1}, {At: 1400, V: 2, Inc: 1}, {At: 1500, V: 3, Inc: 2}, {At: 1600, V: 4, Inc: 2}}
	if f := Judge(pts, nil, window()); f.Judged {
		t.Fatalf("short incarnations judged: %+v", f)
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{{[]float64{3, 1, 2}, 2}, {[]float64{4, 1, 3, 2}, 2.5}, {[]float64{7}, 7}} {
		if got := median(c.in); got != c.want {
			t.Errorf("median %v = %v, want %v", c.in, got, c.want)
		}
	}
	if !math.IsNaN(median(nil)) {
		t.Error("median of nothing is a number")
	}
}
