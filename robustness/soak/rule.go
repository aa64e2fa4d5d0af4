package soak

import (
	"fmt"
	"math"
	"sort"
)

// Point is one reading of a series.
type Point struct {
	// At is when it was read, in seconds since the load started.
	At float64 `json:"at_s"`
	// V is the value read.
	V float64 `json:"v"`
	// Inc is the incarnation of the process read (per-process series; 0
	// for the cluster's). A restarted process starts its counters afresh.
	Inc int `json:"inc,omitempty"`
}

// Rule is the bounded-growth test of one series.
type Rule struct {
	// From and To bound the judged window, in seconds since the load
	// started: the last Window of the load.
	From, To float64
	// Slack extends the window's end for readings taken a moment after
	// it (the sample round at the end of the load), in seconds.
	Slack float64
	// Settle is how long after a process (re)start its readings are left
	// out (warm-up), in seconds.
	Settle float64
	// Rel is the growth allowed over the window as a fraction of the
	// series' median in it; Floor the growth always allowed, in the
	// series' unit. A series fails when its growth exceeds both.
	Rel, Floor float64
	// MinPoints is the fewest usable readings (and MinSpan the shortest
	// time, in seconds, between the first and last of one incarnation)
	// for a verdict.
	MinPoints int
	MinSpan   float64
}

// Fit is the verdict of a Rule on one series.
type Fit struct {
	// Judged is false when too few readings were usable (Why says so).
	Judged bool `json:"judged"`
	// Points is the number of readings used.
	Points int `json:"points"`
	// SlopePerMin is the Theil–Sen slope, in the series' unit per minute.
	SlopePerMin float64 `json:"slope_per_min"`
	// Growth is the slope over the whole window; Level the median reading
	// in it; Limit the growth allowed (max(Rel × Level, Floor)).
	Growth float64 `json:"growth"`
	Level  float64 `json:"level"`
	Limit  float64 `json:"limit"`
	// OK is true when the series was not judged or did not grow past
	// Limit.
	OK  bool   `json:"ok"`
	Why string `json:"why,omitempty"`
}

// Judge fits the slope of pts over the rule's window and compares the
// growth it implies with the rule's limit. starts gives the start of each
// incarnation, in seconds since the load started (missing: before the
// load).
//
// The slope is the Theil–Sen estimator taken within incarnations: the
// median of the slopes between every two readings of the same incarnation
// in the window, leaving out readings within Settle of the incarnation's
// start. The median ignores the spikes of a fault and the sawtooth of a
// garbage-collected heap where a least-squares line would follow them,
// and pairing readings only within an incarnation keeps a restart's drop
// to zero (and the climb after it) out of the fit.
func Judge(pts []Point, starts map[int]float64, r Rule) Fit {
	byInc := map[int][]Point{}
	var vals []float64
	for _, p := range pts {
		if p.At < r.From || p.At > r.To+r.Slack || math.IsNaN(p.V) {
			continue
		}
		if s, ok := starts[p.Inc]; ok && p.At < s+r.Settle {
			continue
		}
		byInc[p.Inc] = append(byInc[p.Inc], p)
		vals = append(vals, p.V)
	}
	var slopes []float64
	span := 0.0
	for _, ps := range byInc {
		sort.Slice(ps, func(i, j int) bool { return ps[i].At < ps[j].At })
		span = max(span, ps[len(ps)-1].At-ps[0].At)
		for i := range ps {
			for j := i + 1; j < len(ps); j++ {
				if dt := ps[j].At - ps[i].At; dt > 0 {
					slopes = append(slopes, (ps[j].V-ps[i].V)/dt)
				}
			}
		}
	}
	f := Fit{Points: len(vals), OK: true}
	if len(vals) < r.MinPoints || span < r.MinSpan || len(slopes) == 0 {
		f.Why = fmt.Sprintf("%d usable readings over %.0f s in the window (want %d over %.0f s)", len(vals), span,
			r.MinPoints, r.MinSpan)
		return f
	}
	f.Judged = true
	slope := median(slopes)
	f.SlopePerMin = slope * 60
	f.Growth = slope * (r.To - r.From)
	f.Level = median(vals)
	f.Limit = max(r.Rel*math.Abs(f.Level), r.Floor)
	if f.Growth > f.Limit {
		f.OK = false
		f.Why = fmt.Sprintf("grows %s over the window (%s/min), more than %s", num(f.Growth), num(f.SlopePerMin), num(f.Limit))
	}
	return f
}

// median returns the median of v (the mean of the two middle values for
// an even count); v is reordered.
func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	sort.Float64s(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

// num formats a value compactly: 12, 0.25, 15.3k, 2.3M.
func num(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 1e6:
		return fmt.Sprintf("%.1fM", v/1e6)
	case a >= 10_000:
		return fmt.Sprintf("%.1fk", v/1000)
	case a >= 100 || v == math.Trunc(v):
		return fmt.Sprintf("%.0f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}
