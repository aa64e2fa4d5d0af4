package placement

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Table is the routing table of one cluster: the owner of every shard and
// the info of every registered node, read from etcd and kept current by a
// watch. It needs no session, so a pure client can use it.
//
// The table opens its watch first, at etcd's current revision, and lists
// P/ once etcd has confirmed the watch: the list is at that revision or
// later, and the watch's events up to the list's revision, which the list
// already holds, are skipped, so no event is missed. A watch asked to
// start at an earlier revision would be "unsynced" in etcd, which catches
// such watches up only every 100 ms: a node whose table relisted just
// before its peers freed the shards it is to take over would learn of it
// up to 100 ms late, and calls to those shards would find no owner all
// that time. On compaction or any watch error the table watches and lists
// again. All methods are safe for concurrent use.
type Table struct {
	client *clientv3.Client
	keys   Keys
	log    *slog.Logger
	retry  time.Duration

	mu     sync.RWMutex
	rev    int64
	shards map[uint32]Owner
	nodes  map[string]NodeInfo
	subs   map[chan struct{}]struct{}
	notes  int64 // notifications sent (tests count them)
	// changed is closed, and replaced, at each change (Changed); it is
	// read without mu.
	changed atomic.Pointer[chan struct{}]

	startOnce sync.Once
	cancel    context.CancelFunc
	exited    chan struct{}
}

// NewTable returns a table of the cluster under prefix. logger may be nil
// (slog.Default()).
func NewTable(client *clientv3.Client, prefix string, logger *slog.Logger) (*Table, error) {
	keys, err := NewKeys(prefix)
	if err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.Default()
	}
	t := &Table{
		client: client,
		keys:   keys,
		log:    logger,
		retry:  100 * time.Millisecond,
		shards: map[uint32]Owner{},
		nodes:  map[string]NodeInfo{},
		subs:   map[chan struct{}]struct{}{},
		exited: make(chan struct{}),
	}
	ch := make(chan struct{})
	t.changed.Store(&ch)
	return t, nil
}

// Start opens the table's watch and lists the cluster's keys (returning
// the error if either fails), then keeps the table current in a goroutine
// until Close or until ctx ends. Calling Start twice fails with ErrStarted.
func (t *Table) Start(ctx context.Context) error {
	return t.start(ctx, ctx)
}

// start waits for the watch and lists under listCtx, and watches under
// runCtx.
func (t *Table) start(listCtx, runCtx context.Context) error {
	started := false
	t.startOnce.Do(func() { started = true })
	if !started {
		return ErrStarted
	}
	wctx, cancel := context.WithCancel(runCtx)
	w, err := t.resync(listCtx, wctx)
	if err != nil {
		cancel()
		t.cancel = func() {}
		close(t.exited)
		return err
	}
	t.cancel = cancel
	go t.run(wctx, w)
	return nil
}

// Close stops the watch and waits for its goroutine. Idempotent; the table
// keeps its last contents. Call it after Start has returned (or instead of
// Start), not concurrently with Start.
func (t *Table) Close() {
	t.startOnce.Do(func() { t.cancel = func() {}; close(t.exited) })
	t.cancel()
	<-t.exited
}

// Lookup returns the owner of shard, if any.
func (t *Table) Lookup(shard uint32) (Owner, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	o, ok := t.shards[shard]
	return o, ok
}

// Node returns the registry entry of a node, if it is registered.
func (t *Table) Node(id string) (NodeInfo, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	n, ok := t.nodes[id]
	return n, ok
}

// Nodes returns every registered node.
func (t *Table) Nodes() []NodeInfo {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make([]NodeInfo, 0, len(t.nodes))
	for _, n := range t.nodes {
		out = append(out, n)
	}
	return out
}

// Snapshot returns a copy of the shard owners and the etcd revision the
// table reflects.
func (t *Table) Snapshot() (map[uint32]Owner, int64) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make(map[uint32]Owner, len(t.shards))
	for k, v := range t.shards {
		out[k] = v
	}
	return out, t.rev
}

// Revision returns the etcd revision the table reflects.
func (t *Table) Revision() int64 {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.rev
}

// Subscribe returns a channel that receives a value (coalesced: capacity
// one) after each change of the table, and a function that cancels the
// subscription. Read the table again after each notification.
func (t *Table) Subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	t.mu.Lock()
	t.subs[ch] = struct{}{}
	t.mu.Unlock()
	return ch, func() {
		t.mu.Lock()
		delete(t.subs, ch)
		t.mu.Unlock()
	}
}

// Changed returns a channel that is closed at the table's next change.
// Unlike Subscribe it costs nothing to hold or drop, which suits a
// short wait such as one call's: take the channel, then read the table;
// once it is closed, take a new one and read the table again.
func (t *Table) Changed() <-chan struct{} {
	return *t.changed.Load()
}

// notify must be called with t.mu held.
func (t *Table) notify() {
	t.notes++
	ch := make(chan struct{})
	close(*t.changed.Swap(&ch))
	for ch := range t.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

func (t *Table) relist(ctx context.Context) error {
	start, end := t.keys.tableRange()
	resp, err := t.client.Get(ctx, start, clientv3.WithRange(end))
	if err != nil {
		return fmt.Errorf("placement: list %s: %w", t.keys.Root(), err)
	}
	shards := map[uint32]Owner{}
	nodes := map[string]NodeInfo{}
	for _, kv := range resp.Kvs {
		t.applyPut(shards, nodes, string(kv.Key), kv.Value, kv.CreateRevision, kv.Lease)
	}
	t.mu.Lock()
	t.shards, t.nodes, t.rev = shards, nodes, resp.Header.Revision
	t.notify()
	t.mu.Unlock()
	return nil
}

// applyPut applies a put of key and reports whether key is a shard or
// node entry (anything else in the watched range changes nothing).
func (t *Table) applyPut(shards map[uint32]Owner, nodes map[string]NodeInfo, key string, val []byte, crev, lease int64) bool {
	if n, ok := t.keys.parseShard(key); ok {
		shards[n] = Owner{NodeID: string(val), Epoch: crev, Lease: lease}
		return true
	}
	if id, ok := strings.CutPrefix(key, t.keys.NodesPrefix()); ok {
		ni, err := decodeNodeInfo(id, val)
		if err != nil {
			t.log.Warn("placement: ignoring node entry", "key", key, "err", err)
			return false
		}
		nodes[id] = ni
		return true
	}
	return false
}

// applyDelete applies a delete of key and reports whether key is a shard
// or node entry.
func (t *Table) applyDelete(shards map[uint32]Owner, nodes map[string]NodeInfo, key string) bool {
	if n, ok := t.keys.parseShard(key); ok {
		delete(shards, n)
		return true
	}
	if id, ok := strings.CutPrefix(key, t.keys.NodesPrefix()); ok {
		delete(nodes, id)
		return true
	}
	return false
}

// tableWatch is an open watch of the table's range.
type tableWatch struct {
	ch     clientv3.WatchChan
	cancel context.CancelFunc
}

// resync opens a watch of the table's range at etcd's current revision,
// waits (under waitCtx) until etcd has created it, and then lists the
// range: the table then holds the list, and the watch's events from the
// list's revision on apply to it. The watch lives under runCtx.
func (t *Table) resync(waitCtx, runCtx context.Context) (tableWatch, error) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(runCtx))
	start, end := t.keys.tableRange()
	ch := t.client.Watch(wctx, start, clientv3.WithRange(end), clientv3.WithCreatedNotify())
	select {
	case resp, ok := <-ch:
		if !ok || resp.Canceled || resp.Err() != nil || !resp.Created {
			cancel()
			err := resp.Err()
			if err == nil {
				err = errors.New("watch closed before it was created")
			}
			return tableWatch{}, fmt.Errorf("placement: watch %s: %w", t.keys.Root(), err)
		}
	case <-waitCtx.Done():
		cancel()
		return tableWatch{}, fmt.Errorf("placement: watch %s: %w", t.keys.Root(), waitCtx.Err())
	}
	if err := t.relist(waitCtx); err != nil {
		cancel()
		return tableWatch{}, err
	}
	return tableWatch{ch: ch, cancel: cancel}, nil
}

func (t *Table) run(ctx context.Context, w tableWatch) {
	defer close(t.exited)
	for {
		t.watch(w)
		w.cancel()
		// The watch ended: watch and list again.
		backoff := t.retry
		for {
			if ctx.Err() != nil {
				return
			}
			var err error
			if w, err = t.resync(ctx, ctx); err == nil {
				break
			}
			t.log.Debug("placement: relist failed", "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 2*time.Second)
		}
	}
}

// watch applies w's events newer than the table until the watch fails or
// its context ends.
func (t *Table) watch(w tableWatch) {
	for resp := range w.ch {
		if resp.CompactRevision != 0 || resp.Canceled || resp.Err() != nil {
			t.log.Debug("placement: watch ended", "err", resp.Err(), "compacted", resp.CompactRevision)
			return
		}
		if len(resp.Events) == 0 {
			continue
		}
		t.mu.Lock()
		changed := false
		for _, ev := range resp.Events {
			if ev.Kv.ModRevision <= t.rev {
				continue // the list holds it
			}
			key := string(ev.Kv.Key)
			if ev.Type == mvccpb.DELETE {
				changed = t.applyDelete(t.shards, t.nodes, key) || changed
			} else {
				changed = t.applyPut(t.shards, t.nodes, key, ev.Kv.Value, ev.Kv.CreateRevision, ev.Kv.Lease) || changed
			}
		}
		t.rev = max(t.rev, resp.Events[len(resp.Events)-1].Kv.ModRevision)
		if changed {
			t.notify()
		}
		t.mu.Unlock()
	}
}
