package cluster

import (
	"context"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/placement"
)

// Faults is a node's fault seam (Config.Faults): the faults a test
// harness injects into a node running in its process, to make it behave
// as a paused, partitioned or crashed process would. Nil in production:
// no faults, at the cost of a nil check on each path it is consulted on.
// cluster/clustertest implements it (clustertest.Faults) for the nodes it
// builds.
//
// Each part is consulted by the layer that declares it: Paused
// (actors.Faults) by the node's entities before each message,
// KeepalivesSuspended and Crashed (placement.Faults) by its placement
// agent, and Cut by its gossip transport on each packet and connection
// it sends. The node itself also waits to react to a lost lease while
// KeepalivesSuspended says so (a paused process notices nothing), and on
// Crashed it stops as a killed process would: its entities run no further
// message, placement stops without releasing a shard or revoking the
// lease (which is left to expire, or a peer revokes it), gossip stops
// without a leave, the transport closes without draining, and replies
// not yet sent are lost; what is durable stays. Shutdown of a crashed
// node waits for that and returns nil.
//
// Implementations must be safe for concurrent use and must not block.
type Faults interface {
	// Paused returns nil while the node's entities may run, or a channel
	// closed when they may run again (actors.Faults). A node paused as a
	// whole pauses its entities and suspends its keepalives; resuming its
	// entities first lets their writes under an expired epoch reach the
	// store (and be fenced) before placement notices the lost lease.
	actors.Faults
	// KeepalivesSuspended returns nil while the node may talk to etcd
	// about its lease, or a channel closed when it may again; Crashed
	// returns a channel closed when the node is to crash
	// (placement.Faults).
	placement.Faults
	// Cut reports whether gossip from the node at gossip address from to
	// the one at to is cut: each node asks it of its outgoing traffic
	// (its own advertised gossip address as from), and drops a cut packet
	// or fails a cut connection.
	Cut(from, to string) bool
}

// crashedForever is the channel entityGate hands the entities of a
// crashed node: never closed, so they wait until the host stops.
var crashedForever = make(chan struct{})

// entityGate is the host's fault seam (actors.HostDeps.Faults) of a node
// with Config.Faults: the entities wait while the faults pause them and,
// once the node crashed, until the host stops.
type entityGate struct{ f Faults }

func (g entityGate) Paused() <-chan struct{} {
	select {
	case <-g.f.Crashed():
		return crashedForever
	default:
		return g.f.Paused()
	}
}

// waitFaults waits while Config.Faults suspends the node's keepalives: a
// paused process reacts to nothing. A crash, Shutdown or the crash's
// teardown ends the wait.
func (n *Node) waitFaults() {
	if n.cfg.Faults == nil {
		return
	}
	if ch := n.cfg.Faults.KeepalivesSuspended(); ch != nil {
		select {
		case <-ch:
		case <-n.cfg.Faults.Crashed():
		case <-n.quit:
		}
	}
}

// crashed reports whether Config.Faults has crashed the node.
func (n *Node) crashed() bool {
	if n.cfg.Faults == nil {
		return false
	}
	select {
	case <-n.cfg.Faults.Crashed():
		return true
	default:
		return false
	}
}

// watchCrash crashes the node when crashed is closed, unless ctx (the
// node's run) ends first.
func (n *Node) watchCrash(ctx context.Context, crashed <-chan struct{}) {
	select {
	case <-crashed:
		n.crash(ctx)
	case <-ctx.Done():
	}
}

// crash stops the node as a killed process would (see Faults): no drain,
// no lease revocation, no gossip leave. ctx goes to placement's Shutdown,
// which after a crash sends nothing to etcd.
func (n *Node) crash(ctx context.Context) {
	n.stopOnce.Do(func() {
		n.leaving.Store(true)
		close(n.quit)
		// The entities already run no further message (entityGate), and
		// placement stops itself on the crash too: Shutdown waits for
		// that, and neither drains nor revokes.
		if n.place != nil {
			_ = n.place.Shutdown(ctx)
		}
		if n.members != nil {
			n.members.kill()
		}
		if n.tr != nil {
			n.tr.close(true) // teardown's second close is a no-op
		}
		if n.host != nil {
			n.host.Close() // stops without draining
		}
		n.teardown(true)
	})
}
