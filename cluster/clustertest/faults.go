package clustertest

import (
	"sync"
	"sync/atomic"

	"github.com/ordo-actors/ordo/cluster"
)

// Faults is the fault seam (cluster.Faults) NodeConfig gives each node:
// it pauses, partitions and crashes the node as a stopped, cut-off or
// killed process would be, without stopping the test's process. A node
// restarted under the same ID gets a new one (Cluster.Faults). The zero
// Faults, for a node built without NodeConfig, is ready to use and cuts
// no gossip. Safe for concurrent use.
type Faults struct {
	partition *partition // the cluster's gossip partition (Cluster.Isolate)

	entities   hold // the entities are paused
	keepalives hold // keepalives are suspended

	mu      sync.Mutex
	crashed atomic.Pointer[chan struct{}] // made on first use; closed by Kill
	killed  bool
}

var _ cluster.Faults = (*Faults)(nil)

func newFaults(p *partition) *Faults { return &Faults{partition: p} }

// Pause freezes the node as SIGSTOP would, as far as ordo is concerned:
// its entities stop taking messages (one in progress finishes), its lease
// keepalives stop, it opens no new session, and its reaction to losing
// the lease waits. Pausing a paused node does nothing.
func (f *Faults) Pause() {
	f.entities.hold()
	f.keepalives.hold()
}

// ResumeEntities lets the paused node's entities run again while the rest
// of it stays paused: what they write under an epoch that expired
// meanwhile reaches the store, and is fenced, before placement notices
// the lost lease.
func (f *Faults) ResumeEntities() { f.entities.release() }

// Resume ends a Pause: the entities run first (as ResumeEntities), then
// placement.
func (f *Faults) Resume() {
	f.entities.release()
	f.keepalives.release()
}

// Kill crashes the node: it stops as a killed process would (see
// cluster.Faults), soon after Kill returns; Cluster.Kill also waits for
// that. Killing it again does nothing.
func (f *Faults) Kill() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.killed {
		f.killed = true
		close(f.crashedLocked())
	}
}

// Paused implements cluster.Faults.
func (f *Faults) Paused() <-chan struct{} { return f.entities.held() }

// KeepalivesSuspended implements cluster.Faults.
func (f *Faults) KeepalivesSuspended() <-chan struct{} { return f.keepalives.held() }

// Crashed implements cluster.Faults. The node's entities ask it before
// each message: it takes no lock once the channel is made.
func (f *Faults) Crashed() <-chan struct{} {
	if ch := f.crashed.Load(); ch != nil {
		return *ch
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.crashedLocked()
}

// crashedLocked returns f.crashed, made on first use. f.mu is held.
func (f *Faults) crashedLocked() chan struct{} {
	if ch := f.crashed.Load(); ch != nil {
		return *ch
	}
	ch := make(chan struct{})
	f.crashed.Store(&ch)
	return ch
}

// Cut implements cluster.Faults: gossip is cut between the nodes
// Cluster.Isolate isolated and the others.
func (f *Faults) Cut(from, to string) bool { return f.partition != nil && f.partition.cut(from, to) }

// hold is one part of a node held still: while held, a channel that
// release closes. held, asked before every message, takes no lock.
type hold struct {
	mu sync.Mutex                    // serialises hold and release
	ch atomic.Pointer[chan struct{}] // nil while not held
}

func (h *hold) hold() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ch.Load() == nil {
		ch := make(chan struct{})
		h.ch.Store(&ch)
	}
}

func (h *hold) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ch := h.ch.Load(); ch != nil {
		close(*ch)
		h.ch.Store(nil)
	}
}

// held returns nil while not held, else a channel closed on release.
func (h *hold) held() <-chan struct{} {
	if ch := h.ch.Load(); ch != nil {
		return *ch
	}
	return nil
}

// partition is the gossip partition of a cluster's nodes.
type partition struct {
	mu       sync.Mutex
	isolated map[string]bool // gossip addresses cut off from the others
}

func (p *partition) isolate(addrs []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.isolated = make(map[string]bool, len(addrs))
	for _, a := range addrs {
		p.isolated[a] = true
	}
}

func (p *partition) cut(from, to string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.isolated) > 0 && p.isolated[from] != p.isolated[to]
}
