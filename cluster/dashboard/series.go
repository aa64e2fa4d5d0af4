package dashboard

import (
	"math"
	"time"
)

// Sample is one interval of a node's counters, as rates and deltas.
type Sample struct {
	// Seq numbers the node's samples from 1; T is the end of the interval
	// (Unix milliseconds).
	Seq uint64 `json:"seq"`
	T   int64  `json:"t"`
	// Calls are the calls per second made through the node, by kind and
	// outcome; P50 and P99 their latency by kind, in milliseconds (absent
	// for a kind without calls in the interval).
	Calls map[string]map[string]float64 `json:"calls,omitempty"`
	P50   map[string]float64            `json:"p50,omitempty"`
	P99   map[string]float64            `json:"p99,omitempty"`
	// Served are the calls per second the node answered for other
	// processes, by kind and outcome.
	Served map[string]map[string]float64 `json:"served,omitempty"`
	// Retries are call attempts retried per second.
	Retries float64 `json:"retries"`
	// Active is the number of active entities at T.
	Active int `json:"active"`
	// Saves and Writes are store Saves and entity writes per second;
	// WritesPerSave their ratio over the interval (0 without Saves).
	Saves         float64 `json:"saves"`
	Writes        float64 `json:"writes"`
	WritesPerSave float64 `json:"writes_per_save"`
	// Fenced, Failed, Handoffs and Failovers are counts in the interval.
	Fenced    uint64 `json:"fenced"`
	Failed    uint64 `json:"failed"`
	Handoffs  uint64 `json:"handoffs"`
	Failovers uint64 `json:"failovers"`
}

// Totals are a node's cumulative counters as the page shows them.
type Totals struct {
	Calls        uint64 `json:"calls"`
	CallErrors   uint64 `json:"call_errors"`
	Served       uint64 `json:"served"`
	ServedErrors uint64 `json:"served_errors"`
	Retries      uint64 `json:"retries"`
	Saves        uint64 `json:"saves"`
	Writes       uint64 `json:"writes"`
	Fenced       uint64 `json:"fenced"`
	Failed       uint64 `json:"failed"`
	Handoffs     uint64 `json:"handoffs"`
	Failovers    uint64 `json:"failovers"`
	Activations  uint64 `json:"activations"`
	Passivations uint64 `json:"passivations"`
}

// outcomeOK is the outcome label of a successful call.
const outcomeOK = "ok"

func totals(c Counters) Totals {
	t := Totals{Retries: c.Retries, Saves: c.Saves, Writes: c.Writes, Fenced: c.Fenced, Failed: c.Failed,
		Handoffs: c.Handoffs, Failovers: c.Failovers, Activations: c.Activations, Passivations: c.Passivations}
	sum := func(m map[string]map[string]uint64) (all, errs uint64) {
		for _, byOutcome := range m {
			for o, n := range byOutcome {
				all += n
				if o != outcomeOK {
					errs += n
				}
			}
		}
		return all, errs
	}
	t.Calls, t.CallErrors = sum(c.Calls)
	t.Served, t.ServedErrors = sum(c.Served)
	return t
}

// derive turns two successive readings of the counters, dt apart, into a
// Sample (Seq and T left to the caller). A counter that went down (the
// node restarted its metrics) counts from zero.
func derive(prev, cur Counters, dt time.Duration) Sample {
	secs := dt.Seconds()
	if secs <= 0 {
		secs = 1
	}
	rate := func(a, b uint64) float64 { return round3(float64(delta(a, b)) / secs) }
	s := Sample{
		Calls:     rates(prev.Calls, cur.Calls, secs),
		Served:    rates(prev.Served, cur.Served, secs),
		Retries:   rate(prev.Retries, cur.Retries),
		Active:    cur.Active,
		Saves:     rate(prev.Saves, cur.Saves),
		Writes:    rate(prev.Writes, cur.Writes),
		Fenced:    delta(prev.Fenced, cur.Fenced),
		Failed:    delta(prev.Failed, cur.Failed),
		Handoffs:  delta(prev.Handoffs, cur.Handoffs),
		Failovers: delta(prev.Failovers, cur.Failovers),
	}
	if saves := delta(prev.Saves, cur.Saves); saves > 0 {
		s.WritesPerSave = round3(float64(delta(prev.Writes, cur.Writes)) / float64(saves))
	}
	for kind, h := range cur.Latency {
		p := prev.Latency[kind]
		if p50, ok := quantile(0.5, p, h); ok {
			if s.P50 == nil {
				s.P50, s.P99 = map[string]float64{}, map[string]float64{}
			}
			s.P50[kind] = round3(p50 * 1000)
			p99, _ := quantile(0.99, p, h)
			s.P99[kind] = round3(p99 * 1000)
		}
	}
	return s
}

func delta(a, b uint64) uint64 {
	if b < a {
		return b
	}
	return b - a
}

func rates(prev, cur map[string]map[string]uint64, secs float64) map[string]map[string]float64 {
	var out map[string]map[string]float64
	for kind, byOutcome := range cur {
		for o, n := range byOutcome {
			d := delta(prev[kind][o], n)
			if d == 0 {
				continue
			}
			if out == nil {
				out = map[string]map[string]float64{}
			}
			if out[kind] == nil {
				out[kind] = map[string]float64{}
			}
			out[kind][o] = round3(float64(d) / secs)
		}
	}
	return out
}

// quantile estimates the q-quantile of the observations cur has and prev
// had not, as Prometheus's histogram_quantile does: linear interpolation
// within the bucket the rank falls in (from 0 for the first bucket), the
// highest finite bound when it falls beyond. ok is false without
// observations, or when the buckets of prev and cur differ.
func quantile(q float64, prev, cur Histogram) (v float64, ok bool) {
	if len(prev.Counts) == 0 {
		prev = Histogram{Bounds: cur.Bounds, Counts: make([]uint64, len(cur.Counts))}
	}
	if len(prev.Counts) != len(cur.Counts) || len(cur.Bounds) != len(cur.Counts) || len(cur.Bounds) == 0 {
		return 0, false
	}
	total := delta(prev.Count, cur.Count)
	if total == 0 {
		return 0, false
	}
	rank := q * float64(total)
	var below float64 // observations in the buckets before i
	for i := range cur.Counts {
		in := float64(delta(prev.Counts[i], cur.Counts[i])) // cumulative up to bound i
		if in >= rank {
			lower := 0.0
			if i > 0 {
				lower = cur.Bounds[i-1]
			}
			if in == below {
				return cur.Bounds[i], true
			}
			return lower + (cur.Bounds[i]-lower)*(rank-below)/(in-below), true
		}
		below = in
	}
	return cur.Bounds[len(cur.Bounds)-1], true
}

func round3(x float64) float64 { return math.Round(x*1000) / 1000 }

// ring keeps the last cap values appended, each numbered from 1.
type ring[T any] struct {
	items []T
	seqs  []uint64
	start int // index of the oldest
	seq   uint64
	cap   int
}

func newRing[T any](capacity int) *ring[T] { return &ring[T]{cap: capacity} }

// add appends v and returns its number.
func (r *ring[T]) add(v T) uint64 {
	r.seq++
	if len(r.items) < r.cap {
		r.items = append(r.items, v)
		r.seqs = append(r.seqs, r.seq)
		return r.seq
	}
	r.items[r.start] = v
	r.seqs[r.start] = r.seq
	r.start = (r.start + 1) % r.cap
	return r.seq
}

// since returns, oldest first, the values numbered after seq.
func (r *ring[T]) since(seq uint64) []T {
	var out []T
	for i := range r.items {
		j := (r.start + i) % len(r.items)
		if r.seqs[j] > seq {
			out = append(out, r.items[j])
		}
	}
	return out
}

// last returns the number of the newest value (0 when empty).
func (r *ring[T]) last() uint64 { return r.seq }

// reset empties the ring and numbers from 1 again.
func (r *ring[T]) reset() { r.items, r.seqs, r.start, r.seq = nil, nil, 0, 0 }
