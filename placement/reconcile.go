package placement

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// The reconciler: one loop per node that compares the shards it owns with
// the shards it should own (desiredOwners over the live nodes) and the
// routing table, acquires the shards it should own, hands off (drains,
// then deletes the lock of) the ones another node should own, and drops
// the ones whose lock vanished.

func (n *Agent) loop(ctx context.Context) {
	defer close(n.loopDone)
	changes, unsub := n.table.Subscribe()
	defer unsub()
	resync := time.NewTicker(n.cfg.ResyncInterval)
	defer resync.Stop()
	backoff := n.cfg.RetryBackoff
	var retryAt time.Time
	var resumed <-chan struct{} // closed when suspended keepalives resume
	for {
		select {
		case <-ctx.Done():
			return
		case <-changes:
		case <-n.kick:
		case <-resync.C:
		case <-resumed:
		}
		resumed = nil
		n.mu.Lock()
		s := n.sess
		n.mu.Unlock()
		if s == nil {
			if resumed = n.suspended(); resumed != nil || time.Now().Before(retryAt) {
				continue
			}
			err := n.openSession(ctx, n.cfg.sessionRequestTimeout())
			if err != nil {
				n.log.Warn("placement: cannot open a new session", "err", err, "retry_in", backoff)
				retryAt = time.Now().Add(backoff)
				backoff = min(2*backoff, n.cfg.LeaseTTL)
				continue
			}
			backoff = n.cfg.RetryBackoff
		}
		n.reconcile(ctx)
	}
}

// reconcile compares owned shards and the routing table with the desired
// assignment: it acquires free shards this node should hold, hands off
// (rate-limited) shards another registered live node should hold, and
// drops shards whose lock vanished.
func (n *Agent) reconcile(ctx context.Context) {
	n.mu.Lock()
	s, sctx := n.sess, n.sessCtx
	desiredOf := n.desired
	n.mu.Unlock()
	if s == nil || !s.Valid() || ctx.Err() != nil {
		return
	}
	snap, rev := n.table.Snapshot()
	self := n.cfg.NodeID
	var acquire, handoff, vanished []uint32
	var mislaid map[uint32]int64 // shards of acquire the table shows locked under the session, with their epochs
	n.mu.Lock()
	for shard := uint32(0); shard < n.cfg.Shards; shard++ {
		desired := desiredOf[shard]
		o, taken := snap[shard]
		if epoch, mine := n.owned[shard]; mine {
			switch {
			case !taken && rev >= epoch, taken && o.Epoch > epoch:
				vanished = append(vanished, shard)
			case desired != self && n.registered(desired) && !n.releasing[shard]:
				handoff = append(handoff, shard)
			}
			continue
		}
		if n.acquiring[shard] || n.unlocking[shard] > 0 {
			continue
		}
		// A lock of this session that the node does not own is one whose
		// Acquire etcd applied but whose reply was lost (a timeout, a
		// leader change): nothing else takes or leaves a lock under the
		// session's lease unowned (an unlock runs under unlocking). Left
		// alone, the shard would stay locked and unserved while the
		// session lives: the node takes it back at its epoch if etcd
		// confirms it (the table may still show a lock an unlock just
		// deleted), and then hands it off like any other.
		if taken && o.NodeID == self && o.Lease == int64(s.ID()) {
			if mislaid == nil {
				mislaid = make(map[uint32]int64)
			}
			acquire = append(acquire, shard)
			mislaid[shard] = o.Epoch
			n.acquiring[shard] = true
			continue
		}
		if taken {
			continue
		}
		if desired == self || !n.registered(desired) {
			acquire = append(acquire, shard)
			n.acquiring[shard] = true
		}
	}
	n.mu.Unlock()

	for _, shard := range vanished {
		n.drop(s, shard)
	}
	for _, shard := range handoff {
		if !n.handoffs.Allow() {
			break
		}
		n.mu.Lock()
		epoch, mine := n.owned[shard]
		if n.sess != s || !mine {
			n.mu.Unlock()
			continue
		}
		n.releasing[shard] = true
		n.mu.Unlock()
		n.handoffWG.Add(1)
		go n.handoff(sctx, s, shard, epoch)
	}
	if len(acquire) > 0 {
		n.acquireAll(sctx, s, acquire, mislaid)
	}
}

// registered reports whether id has a registry entry. Called with n.mu held.
func (n *Agent) registered(id string) bool {
	_, ok := n.table.Node(id)
	return ok
}

// acquireAll acquires shards, each marked in n.acquiring, and takes back
// those of mislaid (locks of the session it does not own) at their epochs
// when etcd confirms them.
func (n *Agent) acquireAll(sctx context.Context, s *Session, shards []uint32, mislaid map[uint32]int64) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, n.cfg.AcquireConcurrency)
	var failMu sync.Mutex
	var failed []uint32 // acquisitions that failed other than as taken
	var firstErr error
	for _, shard := range shards {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			defer func() {
				n.mu.Lock()
				delete(n.acquiring, shard)
				n.mu.Unlock()
			}()
			if sctx.Err() != nil {
				return
			}
			rctx, cancel := context.WithTimeout(sctx, n.cfg.RequestTimeout)
			epoch, err := n.acquireOne(rctx, s, shard, mislaid)
			cancel()
			if err != nil {
				if !errors.Is(err, ErrShardTaken) && sctx.Err() == nil {
					failMu.Lock()
					failed = append(failed, shard)
					firstErr = cmp.Or(firstErr, err)
					failMu.Unlock()
				}
				return
			}
			n.adopt(s, shard, epoch)
		}()
	}
	wg.Wait()
	if len(failed) > 0 {
		// etcd may have applied some: the next Acquire of each learns so.
		slices.Sort(failed)
		n.log.Info("placement: acquisitions failed; trying again", "shards", failed, "err", firstErr)
	}
}

// acquireOne acquires shard under s, or, when it is one of mislaid, takes
// its lock back at its epoch if etcd still holds it under s (it never
// takes a free lock then: that one may have just been handed off).
func (n *Agent) acquireOne(ctx context.Context, s *Session, shard uint32, mislaid map[uint32]int64) (int64, error) {
	epoch, ok := mislaid[shard]
	if !ok {
		return Acquire(ctx, n.client, n.keys, shard, n.cfg.NodeID, s.ID())
	}
	held, err := heldAt(ctx, n.client, n.keys, shard, n.cfg.NodeID, s.ID(), epoch)
	if err == nil && !held {
		err = fmt.Errorf("%w: shard %d", ErrShardTaken, shard) // gone or changed: the table catches up
	}
	return epoch, err
}

// adopt records a freshly acquired lock and tells the host, unless the
// session ended meanwhile (the key then dies with the old lease, which
// revokeEnded revokes).
func (n *Agent) adopt(s *Session, shard uint32, epoch int64) {
	n.cbMu.Lock()
	defer n.cbMu.Unlock()
	n.mu.Lock()
	if n.sess != s || !s.Valid() {
		n.mu.Unlock()
		return
	}
	n.owned[shard] = epoch
	n.mu.Unlock()
	n.host.Acquired(shard, epoch)
}

// drop forgets one shard whose lock vanished from etcd.
func (n *Agent) drop(s *Session, shard uint32) {
	n.cbMu.Lock()
	defer n.cbMu.Unlock()
	n.mu.Lock()
	if n.sess != s {
		n.mu.Unlock()
		return
	}
	if _, ok := n.owned[shard]; !ok {
		n.mu.Unlock()
		return
	}
	delete(n.owned, shard)
	n.mu.Unlock()
	n.log.Warn("placement: shard lock vanished; dropping it", "shard", shard)
	n.host.Lost([]uint32{shard})
}

// handoff drains shard through the host, then deletes its lock.
func (n *Agent) handoff(sctx context.Context, s *Session, shard uint32, epoch int64) {
	defer n.handoffWG.Done()
	defer func() {
		n.mu.Lock()
		delete(n.releasing, shard)
		n.mu.Unlock()
		n.poke()
	}()
	if err := n.host.Release(sctx, shard, epoch); err != nil {
		if sctx.Err() == nil {
			n.log.Warn("placement: host could not release shard; keeping it", "shard", shard, "err", err)
		}
		return
	}
	n.mu.Lock()
	if n.sess != s || n.owned[shard] != epoch {
		n.mu.Unlock()
		return
	}
	delete(n.owned, shard)
	n.unlocking[shard]++
	n.mu.Unlock()
	n.unlock(sctx, shard, epoch)
}

// Relinquish gives shard up without calling the host, which has already
// dropped it (storage fenced one of its writes): the lock is released if
// it is still held at epoch, and the reconciler acquires the shard again
// later, under a new epoch, if this node is still its desired owner. Safe
// for concurrent use; it does not block.
func (n *Agent) Relinquish(shard uint32, epoch int64) {
	n.mu.Lock()
	if n.sess == nil || n.owned[shard] != epoch || n.sessCtx.Err() != nil {
		n.mu.Unlock()
		return
	}
	delete(n.owned, shard)
	n.unlocking[shard]++
	sctx := n.sessCtx
	n.handoffWG.Add(1)
	n.mu.Unlock()
	// The host logged why it gave the shard up; this only follows.
	n.log.Debug("placement: host gave up shard; releasing its lock", "shard", shard, "epoch", epoch)
	go func() {
		defer n.handoffWG.Done()
		defer n.poke()
		n.unlock(sctx, shard, epoch)
	}()
}

// unlock deletes the shard's lock if it is still held at epoch,
// retrying until it is gone or sctx ends. Its caller counted it in
// n.unlocking (with n.mu held, as it removed the shard from n.owned); it
// counts it out, so that the reconciler never takes the lock being
// deleted for one whose Acquire reply was lost.
func (n *Agent) unlock(sctx context.Context, shard uint32, epoch int64) {
	defer func() {
		n.mu.Lock()
		if n.unlocking[shard]--; n.unlocking[shard] <= 0 {
			delete(n.unlocking, shard)
		}
		n.mu.Unlock()
	}()
	backoff := n.cfg.RetryBackoff
	for {
		rctx, cancel := context.WithTimeout(sctx, n.cfg.RequestTimeout)
		err := Unlock(rctx, n.client, n.keys, shard, epoch)
		cancel()
		if err == nil || errors.Is(err, ErrNotOwner) || sctx.Err() != nil {
			return
		}
		select {
		case <-sctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, n.cfg.LeaseTTL)
	}
}
