package cluster

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/ordo-actors/ordo/placement"
)

// ErrNotReady is matched (errors.Is) by the error Readiness returns while
// the node is not ready.
var ErrNotReady = errors.New("cluster: node not ready")

// Readiness returns nil when the node is ready, and otherwise an error
// matching ErrNotReady that says, in a few words, the first condition not
// met. A node is ready when all of these hold:
//
//  1. Start has returned nil, and neither Shutdown nor a crash (see
//     Faults) has begun.
//  2. Its placement lease is valid: it holds an etcd session whose local
//     validity deadline has not passed (the condition under which its
//     replies may leave at all).
//  3. It is registered: the routing table shows its entry in etcd, bound
//     to that lease.
//  4. It serves every shard it holds: for each shard lock placement
//     holds, the entity host owns the shard at the lock's epoch, and the
//     routing table shows the node as its owner at that epoch; and the
//     routing table shows no shard owned by the node that placement does
//     not hold.
//  5. It has taken its share: no shard is free (without an owner in the
//     routing table) whose desired owner, by rendezvous hashing over the
//     live nodes, is this node. Shards of its share that another node
//     still holds (a handoff under way) do not count: they are served.
//
// Readiness does not depend on the other nodes being ready. It changes
// without notice (a lease can lapse at any time); a caller that must act
// only while the node is ready re-checks. Safe for concurrent use, at any
// time (before Start, during Shutdown).
func (n *Node) Readiness() error {
	switch {
	case n.stopped.Load():
		return notReady("stopped")
	case n.leaving.Load():
		return notReady("shutting down")
	case !n.up.Load():
		return notReady("starting")
	}
	if !n.place.Valid() {
		return notReady("lease not valid")
	}
	lease := int64(n.place.Lease())
	table := n.place.Table()
	if info, ok := table.Node(n.cfg.NodeID); !ok || info.Lease != lease {
		return notReady(fmt.Sprintf("not registered under lease %x", lease))
	}
	held := n.place.Owned()
	served := n.host.Owned()
	snap, _ := table.Snapshot()
	for _, s := range sortedShards(held) {
		epoch := held[s]
		if e, ok := served[s]; !ok || e != epoch {
			return notReady(fmt.Sprintf("shard %d held at epoch %d, not served", s, epoch))
		}
		if o := snap[s]; o.NodeID != n.cfg.NodeID || o.Epoch != epoch {
			return notReady(fmt.Sprintf("shard %d held at epoch %d, not yet in the routing table", s, epoch))
		}
	}
	live := n.liveIDs()
	for s := uint32(0); s < n.cfg.Placement.Shards; s++ {
		o, taken := snap[s]
		switch {
		case taken && o.NodeID == n.cfg.NodeID && held[s] != o.Epoch:
			return notReady(fmt.Sprintf("shard %d owned in the routing table at epoch %d, not held", s, o.Epoch))
		case !taken && placement.Desired(s, live) == n.cfg.NodeID:
			return notReady(fmt.Sprintf("shard %d of its share not acquired", s))
		}
	}
	return nil
}

// Ready reports whether the node is ready (Readiness returns nil).
func (n *Node) Ready() bool { return n.Readiness() == nil }

// Healthy reports whether the node is up: it has not stopped (Shutdown or
// a crash done, or Start failed). Unlike Readiness it depends on nothing
// outside the process, so that a liveness check does not restart every
// node when etcd is unreachable; it stays true while Shutdown drains.
func (n *Node) Healthy() bool { return !n.stopped.Load() }

// WaitReady waits until the node is ready (see Readiness). It fails
// with ctx's error, and the last reason the node was not ready, when ctx
// ends first, and with an error matching ErrClosed once the node stops or
// begins to (it will not be ready again). It re-checks on every change of
// the routing table and at least every readyPoll, since some conditions
// (the lease deadline, the host's shards) change without a notification.
// Safe for concurrent use; it may be called before Start returns.
func (n *Node) WaitReady(ctx context.Context) error {
	var changed <-chan struct{}
	tick := time.NewTicker(readyPoll)
	defer tick.Stop()
	for {
		err := n.Readiness()
		if err == nil {
			return nil
		}
		if n.leaving.Load() || n.stopped.Load() {
			return fmt.Errorf("cluster: node %s will not be ready: %w", n.cfg.NodeID, ErrClosed)
		}
		if changed == nil && n.up.Load() {
			ch, unsubscribe := n.place.Table().Subscribe()
			defer unsubscribe()
			changed = ch
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster: waiting for node %s to be ready: %w (last: %v)", n.cfg.NodeID, ctx.Err(), err)
		case <-changed:
		case <-tick.C:
		}
	}
}

// readyPoll bounds how long WaitReady takes to notice a change that comes
// without a notification.
const readyPoll = 20 * time.Millisecond

func notReady(reason string) error { return fmt.Errorf("%w: %s", ErrNotReady, reason) }

// liveIDs returns the live node IDs, sorted: this node and the nodes
// registered in etcd whose matching gossip member is alive. It is the set
// liveLoop gives placement to compute desired ownership over.
func (n *Node) liveIDs() []string {
	return n.members.view(n.cfg.NodeID, n.place.Table().Nodes()).live
}

func sortedShards(m map[uint32]int64) []uint32 {
	out := make([]uint32, 0, len(m))
	for s := range m {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}
