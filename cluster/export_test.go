package cluster

import (
	"github.com/ordo-actors/ordo/actors"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// HostOf returns n's entity host, for this package's tests that reach
// past placement (submit to a paused node, drop a shard): it exists only
// while testing, so that Node exports nothing for tests alone.
func HostOf(n *Node) *actors.Host { return n.host }

// OneWayCounts returns n's counts of one-way messages sent and dropped
// (ordo_one_way_sent_total, ordo_one_way_dropped_total).
func OneWayCounts(n *Node) (sent, dropped float64) {
	return readCounter(n.metrics.oneWaySent), readCounter(n.metrics.oneWayDropped)
}

func readCounter(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}
