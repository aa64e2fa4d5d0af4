package placement

// Faults is the fault seam an Agent consults (Config.Faults): faults a
// test harness injects to make the node look paused to etcd or to crash
// it, without stopping the process. Nil in production: no faults, at the
// cost of a nil check per keepalive. Implementations must be safe for
// concurrent use and must not block.
type Faults interface {
	// KeepalivesSuspended returns nil while the agent may talk to etcd
	// about its lease, or, while the process is to look paused to etcd, a
	// channel that is closed when that ends. Meanwhile the session sends
	// no keepalive, the agent opens no new session and does not revoke
	// an ended session's lease; it opens a new session as soon as the
	// channel closes.
	KeepalivesSuspended() <-chan struct{}

	// Crashed returns a channel that is closed when the process is to
	// crash (nil: never); it returns the same channel on every call. From
	// then on the agent stops as a crashed process would: its goroutines
	// end and its keepalives stop, but no shard is released, no
	// ShardRunner callback runs and the lease is not revoked, so the lease
	// expires in etcd (or a peer revokes it) and other nodes take the
	// shards over. Shutdown then waits for that stop and returns nil.
	Crashed() <-chan struct{}
}

// never is a channel that is never closed: what suspended returns once
// the agent crashed.
var never = make(chan struct{})

// suspended returns nil while the agent may talk to etcd about its lease,
// or a channel closed when it may again (Faults.KeepalivesSuspended; never
// after a crash).
func (n *Agent) suspended() <-chan struct{} {
	switch {
	case n.crashing.Load():
		return never
	case n.cfg.Faults != nil:
		return n.cfg.Faults.KeepalivesSuspended()
	}
	return nil
}

// crashed reports whether Config.Faults has crashed the agent.
func (n *Agent) crashed() bool {
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

// watchCrash stops the agent as a crash would when crashed is closed,
// unless it stops first.
func (n *Agent) watchCrash(crashed <-chan struct{}) {
	select {
	case <-crashed:
		n.shutdownOnce.Do(func() { n.shutdownErr = n.stop(n.life, crash) })
	case <-n.life.Done():
	}
}
