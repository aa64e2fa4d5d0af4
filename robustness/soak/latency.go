package soak

import (
	"errors"
	"io"
	"os"
	"sort"
	"time"

	"github.com/ordo-actors/ordo/robustness/history"
)

// Bucket is the load's latency over one interval, as its clients saw it.
type Bucket struct {
	// FromS and ToS bound the interval, in seconds since the load started;
	// an op counts in the interval it returned in.
	FromS float64 `json:"from_s"`
	ToS   float64 `json:"to_s"`
	// Answered counts the ops that got an answer (ok or rejected);
	// Unknown those the client gave up on.
	Answered int `json:"answered"`
	Unknown  int `json:"unknown"`
	// OpsPerS is Answered per second.
	OpsPerS float64 `json:"ops_per_s"`
	// P50MS and P99MS are percentiles (nearest rank) of the answered ops'
	// latency, call to return, in milliseconds.
	P50MS float64 `json:"p50_ms"`
	P99MS float64 `json:"p99_ms"`
}

// latencies reads a history and splits it into buckets of width every
// from start: the client-side latency per interval. It also returns when
// each transfer was submitted, in seconds since start, sorted. A malformed
// line (the torn last line of a load killed mid-write) ends the history:
// what was read so far is returned with its error.
func latencies(r io.Reader, start time.Time, every time.Duration) ([]Bucket, []float64, error) {
	var lat [][]float64 // ms, by bucket
	var unknown []int
	var calls []float64
	rd := history.NewReader(r)
	var err error
	for {
		var op history.Op
		if op, err = rd.Next(); err != nil {
			break
		}
		if op.Op == history.OpTransfer {
			calls = append(calls, float64(op.Call-start.UnixNano())/1e9)
		}
		i := int(time.Duration(op.Ret-start.UnixNano()) / every)
		if i < 0 {
			continue
		}
		for len(lat) <= i {
			lat, unknown = append(lat, nil), append(unknown, 0)
		}
		if op.Outcome == history.Unknown {
			unknown[i]++
			continue
		}
		lat[i] = append(lat[i], float64(op.Ret-op.Call)/1e6)
	}
	if errors.Is(err, io.EOF) {
		err = nil
	}
	out := make([]Bucket, len(lat))
	w := every.Seconds()
	for i, l := range lat {
		b := Bucket{FromS: float64(i) * w, ToS: float64(i+1) * w, Answered: len(l), Unknown: unknown[i],
			OpsPerS: float64(len(l)) / w}
		if len(l) > 0 {
			sort.Float64s(l)
			b.P50MS, b.P99MS = rank(l, 0.50), rank(l, 0.99)
		}
		out[i] = b
	}
	sort.Float64s(calls)
	return out, calls, err
}

// rank is the nearest-rank percentile p of sorted s.
func rank(s []float64, p float64) float64 {
	i := int(p*float64(len(s))+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// readLatencies is latencies of the history file at path.
func readLatencies(path string, start time.Time, every time.Duration) ([]Bucket, []float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	return latencies(f, start, every)
}
