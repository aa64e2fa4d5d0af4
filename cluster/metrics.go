package cluster

import (
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/proto/ordopb"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are one node's (or client's) Prometheus collectors, registered
// on its own registry so that several nodes can share a process.
type metrics struct {
	reg     *prometheus.Registry
	calls   *prometheus.CounterVec   // by kind, outcome (caller side)
	latency *prometheus.HistogramVec // by kind (caller side)
	served  *prometheus.CounterVec   // by kind, outcome (owner side)
	retries prometheus.Counter
	// oneWaySent and oneWayDropped count entities' one-way messages
	// (actors.AtMostOnce) sent, and dropped before they left.
	oneWaySent, oneWayDropped prometheus.Counter
	handoffs                  prometheus.Counter
	failovers                 prometheus.Counter
	// failoverChecks counts the checks of a dead node's lease this node
	// made as its revoker.
	failoverChecks prometheus.Counter
	batch          prometheus.Histogram
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ordo_calls_total", Help: "Calls made through this process, by entity kind and outcome code.",
		}, []string{"kind", "outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "ordo_call_duration_seconds", Help: "Call latency seen by callers in this process, retries included, by kind.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18),
		}, []string{"kind"}),
		served: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ordo_served_total", Help: "Calls answered by this node's router, by kind and outcome code.",
		}, []string{"kind", "outcome"}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ordo_call_retries_total", Help: "Call attempts retried (not here, fenced, unavailable, unreachable).",
		}),
		oneWaySent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ordo_one_way_sent_total", Help: "Entities' one-way messages (AtMostOnce) sent: handed to the local host or queued to the owner.",
		}),
		oneWayDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ordo_one_way_dropped_total", Help: "Entities' one-way messages (AtMostOnce) dropped before they left (no owner, owner unreachable, sender not current).",
		}),
		handoffs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ordo_handoffs_total", Help: "Shards this node released gracefully.",
		}),
		failovers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ordo_failover_revocations_total", Help: "Leases of dead nodes this node revoked.",
		}),
		failoverChecks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ordo_failover_checks_total", Help: "Checks, by this node as the chosen revoker, of the lease of a node gossip declared dead (revoked when it shows a missed renewal).",
		}),
		batch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "ordo_batch_records", Help: "Records per store Save.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 11),
		}),
	}
	m.reg.MustRegister(m.calls, m.latency, m.served, m.retries, m.oneWaySent, m.oneWayDropped, m.handoffs, m.failovers, m.failoverChecks, m.batch,
		// The Go runtime's figures, with its memory classes and the live
		// heap (go_gc_heap_live_bytes), which tell memory in use from
		// memory the runtime keeps: a process's RSS alone does not. They
		// are the process's, shared by the nodes it runs.
		collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(collectors.MetricsGC, collectors.MetricsMemory)))
	return m
}

// registerHost exposes the host's counters.
func (m *metrics) registerHost(h *actors.Host) {
	counter := func(name, help string, f func(actors.HostStats) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help},
			func() float64 { return float64(f(h.Stats())) })
	}
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ordo_active_entities", Help: "Entities active on this node."},
			func() float64 { return float64(h.Stats().Active) }),
		counter("ordo_activations_total", "Entity activations.", func(s actors.HostStats) uint64 { return s.Activations }),
		counter("ordo_passivations_total", "Entity passivations.", func(s actors.HostStats) uint64 { return s.Passivations }),
		counter("ordo_store_saves_total", "Store Save calls.", func(s actors.HostStats) uint64 { return s.Batch.Saves }),
		counter("ordo_entity_writes_total", "Entity writes submitted.", func(s actors.HostStats) uint64 { return s.Batch.Writes }),
		counter("ordo_fenced_writes_total", "Records rejected by storage fencing.", func(s actors.HostStats) uint64 { return s.Batch.Fenced }),
		counter("ordo_failed_writes_total", "Records whose Save failed otherwise.", func(s actors.HostStats) uint64 { return s.Batch.Failed }),
		counter("ordo_too_large_writes_total", "Records the store refused as too large.", func(s actors.HostStats) uint64 { return s.Batch.TooLarge }),
		counter("ordo_overloaded_calls_total", "Calls refused because a mailbox was full or too many calls were in flight.",
			func(s actors.HostStats) uint64 { return s.Overloaded }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ordo_inflight_calls", Help: "Calls admitted by this node and not yet answered."},
			func() float64 { return float64(h.Stats().Inflight) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ordo_dedup_entries", Help: "Dedup entries (request IDs with their replies) held by the active entities."},
			func() float64 { return float64(h.Stats().DedupEntries) }),
	)
}

// registerTransport exposes what the transport sent to other processes.
func (m *metrics) registerTransport(t *transport) {
	counter := func(name, help string, f func(TransportStats) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help},
			func() float64 { return float64(f(t.stats())) })
	}
	m.reg.MustRegister(
		counter("ordo_transport_calls_sent_total", "Calls (requests and one-way messages) sent to other processes.",
			func(s TransportStats) uint64 { return s.Calls }),
		counter("ordo_transport_call_frames_sent_total", "Frames that carried them.",
			func(s TransportStats) uint64 { return s.CallFrames }),
		counter("ordo_transport_results_sent_total", "Results sent back to calling processes.",
			func(s TransportStats) uint64 { return s.Results }),
		counter("ordo_transport_result_frames_sent_total", "Frames that carried them.",
			func(s TransportStats) uint64 { return s.ResultFrames }),
	)
}

// lateFencer is a store that counts records it rejected by fencing after
// the Save carrying them had reported an unknown outcome
// (etcdstore.Store.LateFenced).
type lateFencer interface{ LateFenced() uint64 }

// registerStore exposes the store's own counters, if it has any.
func (m *metrics) registerStore(st any) {
	if lf, ok := st.(lateFencer); ok {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "ordo_store_late_fenced_writes_total",
			Help: "Records the store rejected by fencing after their Save had already reported an unknown outcome.",
		}, func() float64 { return float64(lf.LateFenced()) }))
	}
}

func outcome(e *ordopb.Error) string {
	if e == nil {
		return "ok"
	}
	return e.GetCode().String()
}

// observeBatch records the record count of one Save of the host's
// batcher (actors.HostConfig.OnBatch).
func (m *metrics) observeBatch(records int) { m.batch.Observe(float64(records)) }

func (m *metrics) observeCall(kind string, start time.Time, e *ordopb.Error) {
	m.calls.WithLabelValues(kind, outcome(e)).Inc()
	m.latency.WithLabelValues(kind).Observe(time.Since(start).Seconds())
}
