package dashboard

import (
	"context"
	"time"

	"github.com/ordo-actors/ordo/actors"
)

// Source is what a Hub reads from its node. Package cluster implements it
// over a Node. Implementations are safe for concurrent use and may be
// called before the node has started or after it stopped (Local.Up is
// then false and the views are empty).
type Source interface {
	// Local returns the node's own state now. It is cheap: the hub calls
	// it several times per Interval.
	Local() Local
	// Detail returns what costs more to find out about the node: the hub
	// calls it once per Interval while a page is attached, and once per
	// report to a peer.
	Detail() Detail
	// Counters returns the node's cumulative counters now.
	Counters() Counters
	// View returns the cluster as the node sees it now: the registrations
	// and shard owners of its etcd routing table, and gossip.
	View() View
	// Subscribe returns a channel that receives a value (coalesced) after
	// each change of the routing table, and a function that ends the
	// subscription. The channel never receives before the node has started.
	Subscribe() (<-chan struct{}, func())
	// LeaseTTL returns the remaining time to live etcd reports for lease;
	// negative when the lease has expired or was revoked.
	LeaseTTL(ctx context.Context, lease int64) (time.Duration, error)
	// ActiveIn returns the entities active on the node in shard.
	ActiveIn(shard uint32) []actors.Ref
	// IsActive reports whether ref is active on the node.
	IsActive(ref actors.Ref) bool
	// Runtime describes ref's in-memory state on the node
	// (actors.Host.Runtime).
	Runtime(ctx context.Context, ref actors.Ref) (actors.Runtime, error)
	// Record reads ref's durable record (actors.Host.LoadRecord).
	Record(ctx context.Context, ref actors.Ref) (actors.Record, error)
}

// Local is a node's own state.
type Local struct {
	// ID is the node ID.
	ID string
	// Up is true once the node has started, until it stops.
	Up bool
	// Prefix is the cluster's etcd prefix; Shards its shard count.
	Prefix string
	Shards uint32
	// Lease is the node's etcd lease (0 without a session), LeaseValid
	// whether its validity deadline, Deadline, has not passed.
	Lease      int64
	LeaseValid bool
	Deadline   time.Time
	// AdminAddr is the admin endpoint's address ("" when the node has none
	// of its own).
	AdminAddr string
	// Kinds names the entity kinds the node hosts.
	Kinds []string
}

// Detail is what costs more to find out about a node.
type Detail struct {
	// NotReady says why the node is not ready ("" when ready).
	NotReady string
	// ActivePerShard counts the node's active entities per shard it serves.
	ActivePerShard map[uint32]int
}

// View is the cluster as one node sees it.
type View struct {
	// Nodes are the registrations in etcd (P/nodes/).
	Nodes []Registration
	// Gossip are the members gossip knows of, the dead included.
	Gossip []GossipMember
	// Owners maps each owned shard to its owner (P/shards/).
	Owners map[uint32]Owner
}

// Registration is one node's entry in etcd.
type Registration struct {
	ID         string
	RemoteAddr string
	GossipAddr string
	Lease      int64
	Kinds      []string
}

// Gossip states of a GossipMember.
const (
	GossipAlive   = "alive"
	GossipSuspect = "suspect"
	GossipDead    = "dead" // declared dead, or left
)

// GossipMember is one member as gossip sees it.
type GossipMember struct {
	ID string
	// State is GossipAlive, GossipSuspect or GossipDead.
	State string
	// AdminAddr is the admin endpoint the member gossips ("" when none or
	// unknown).
	AdminAddr string
}

// Owner is the holder of a shard's placement lock.
type Owner struct {
	Node  string
	Epoch int64
}

// Counters are a node's cumulative counters (see package cluster's
// Prometheus metrics of the same meaning).
type Counters struct {
	// Calls counts calls made through the node, by kind and outcome
	// ("ok" or an error code), as callers see them; Latency is their
	// latency by kind.
	Calls   map[string]map[string]uint64
	Latency map[string]Histogram
	// Served counts calls the node answered for other processes, by kind
	// and outcome.
	Served map[string]map[string]uint64
	// Retries counts call attempts retried.
	Retries uint64
	// Handoffs counts shards released gracefully; Failovers the leases of
	// dead nodes this node revoked.
	Handoffs, Failovers uint64
	// Saves counts store Save calls, Writes the entity writes they carried
	// (before coalescing), Fenced the records storage rejected by fencing,
	// Failed those whose Save failed otherwise.
	Saves, Writes, Fenced, Failed uint64
	// Activations and Passivations count entity lifecycles; Active is the
	// number of entities active now.
	Activations, Passivations uint64
	Active                    int
}

// Histogram is a cumulative histogram: Counts[i] observations were at
// most Bounds[i] (seconds), Count in all.
type Histogram struct {
	Bounds []float64
	Counts []uint64
	Count  uint64
}
