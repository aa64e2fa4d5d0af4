package placement

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/etcdembed"
	"github.com/ordo-actors/ordo/internal/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Writes under the cluster prefix that are not shard or node entries (an
// etcd store's records under P/store/) neither reach the table's watch nor
// wake its subscribers: one node entry written after 50 of them is one
// notification.
func TestTableIgnoresOtherKeysUnderThePrefix(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli := embeddedEtcd(t)()
	const prefix = "/ordo/tbl"
	table := startTable(ctx, t, cli, prefix)
	before := table.notifications()
	for i := 0; i < 50; i++ {
		if _, err := cli.Put(ctx, fmt.Sprintf("%s/store/counter/e%d", prefix, i), "state"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cli.Put(ctx, table.keys.Node("n1"), `{"id":"n1","lease":1}`); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, 5*time.Millisecond, func() error {
		if _, ok := table.Node("n1"); !ok {
			return errors.New("the node entry has not reached the table")
		}
		return nil
	})
	if n := table.notifications() - before; n != 1 {
		t.Fatalf("%d notifications for 50 store writes and one node entry, want 1", n)
	}
}

func (t *Table) notifications() int64 {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.notes
}

// The table lists and watches node and shard entries only: an etcd
// store's records under the prefix are outside its range.
func TestTableRange(t *testing.T) {
	keys, err := NewKeys("/ordo/x")
	if err != nil {
		t.Fatal(err)
	}
	start, end := keys.tableRange()
	in := func(k string) bool { return k >= start && k < end }
	for _, k := range []string{keys.Node("n1"), keys.Shard(0), keys.Shard(1023)} {
		if !in(k) {
			t.Errorf("%s is outside the table's range [%s, %s)", k, start, end)
		}
	}
	for _, k := range []string{"/ordo/x/store/counter/a", "/ordo/x/store/", keys.Config(), "/ordo/xy/nodes/n1", "/ordo/x/t/1"} {
		if in(k) {
			t.Errorf("%s is inside the table's range [%s, %s)", k, start, end)
		}
	}
}

// recordingWatcher is the table's etcd Watcher with two seams: it records
// the start revision of every watch the table opens, and runs created
// right after etcd confirms a watch, before the table sees the
// confirmation (between the watch and the list that follows it); end()
// ends the table's current watch as a failed one.
type recordingWatcher struct {
	clientv3.Watcher
	created func(n int) // n: watches created so far, this one included

	mu   sync.Mutex
	revs []int64
	end  chan struct{}
}

func (w *recordingWatcher) Watch(ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.WatchChan {
	w.mu.Lock()
	w.revs = append(w.revs, clientv3.OpGet(key, opts...).Rev())
	n := len(w.revs)
	end := make(chan struct{})
	w.end = end
	w.mu.Unlock()
	in := w.Watcher.Watch(ctx, key, opts...)
	out := make(chan clientv3.WatchResponse)
	go func() {
		defer close(out)
		for {
			var resp clientv3.WatchResponse
			var ok bool
			select {
			case resp, ok = <-in:
				if !ok {
					return
				}
			case <-end:
				resp = clientv3.WatchResponse{Canceled: true}
			case <-ctx.Done():
				return
			}
			if resp.Created && w.created != nil {
				w.created(n)
			}
			select {
			case out <- resp:
			case <-ctx.Done():
				return
			}
			if resp.Canceled {
				return
			}
		}
	}()
	return out
}

func (w *recordingWatcher) starts() []int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.revs)
}

func (w *recordingWatcher) endWatch() {
	w.mu.Lock()
	defer w.mu.Unlock()
	close(w.end)
}

// The table opens its watch at etcd's current revision and lists after
// etcd has created it. etcd catches a watch opened at a past revision up
// only every 100 ms: a node's table that listed just before its peers
// handed it shards would learn of that up to 100 ms late (every call to
// those shards finding no owner meanwhile). Writes landing between the
// watch's creation and the list are in the list, and their events, which
// the watch delivers too, change nothing and wake no one: the table never
// goes back to an older owner.
func TestTableWatchesFromTheCurrentRevisionAndListsAfter(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	newClient := embeddedEtcd(t)
	direct, cli := newClient(), newClient()
	const prefix = "/ordo/tbl"
	keys, _ := NewKeys(prefix)
	put := func(key, val string) {
		if _, err := direct.Put(ctx, key, val); err != nil {
			t.Error(err)
		}
	}
	put(keys.Shard(1), "old")
	put(keys.Shard(2), "gone")
	w := &recordingWatcher{Watcher: cli.Watcher, created: func(n int) {
		// Each owner in turn, then a deletion: replayed, the events would
		// show shard 1 owned by n1 again for a while.
		put(keys.Shard(1), fmt.Sprintf("n%d", n))
		put(keys.Shard(1), fmt.Sprintf("n%d", n+1))
		put(keys.Node(fmt.Sprintf("n%d", n)), fmt.Sprintf(`{"id":"n%d","lease":1}`, n))
		if _, err := direct.Delete(ctx, keys.Shard(2)); err != nil {
			t.Error(err)
		}
	}}
	cli.Watcher = w
	table := startTable(ctx, t, cli, prefix)

	// check runs after the table's watches-th watch and list: it expects
	// notes notifications in all by then (one per list, one per change
	// after a list).
	check := func(watches int, notes int64) {
		t.Helper()
		if o, _ := table.Lookup(1); o.NodeID != fmt.Sprintf("n%d", watches+1) {
			t.Fatalf("shard 1 owned by %q after the list, want n%d", o.NodeID, watches+1)
		}
		if _, ok := table.Lookup(2); ok {
			t.Fatal("shard 2, deleted before the list, is in the table")
		}
		// One more node entry, after the list: its event follows those of
		// the writes the list holds, which must wake no one.
		id := fmt.Sprintf("after%d", watches)
		put(keys.Node(id), fmt.Sprintf(`{"id":%q,"lease":1}`, id))
		testutil.Eventually(t, 10*time.Second, 5*time.Millisecond, func() error {
			if _, ok := table.Node(id); !ok {
				return errors.New("the node entry has not reached the table")
			}
			return nil
		})
		if n := table.notifications(); n != notes {
			t.Fatalf("%d notifications, want %d: the events of the writes the list holds were applied again", n, notes)
		}
		if o, _ := table.Lookup(1); o.NodeID != fmt.Sprintf("n%d", watches+1) {
			t.Fatalf("shard 1 owned by %q, want n%d", o.NodeID, watches+1)
		}
		starts := w.starts()
		if len(starts) != watches {
			t.Fatalf("%d watches opened, want %d", len(starts), watches)
		}
		for i, rev := range starts {
			if rev != 0 {
				t.Fatalf("watch %d opened at revision %d: a watch at a past revision is caught up only every 100 ms", i+1, rev)
			}
		}
	}
	check(1, 2) // the list, the node entry

	// A failed watch: the table watches and lists again, the same way.
	put(keys.Shard(2), "again")
	testutil.Eventually(t, 10*time.Second, 5*time.Millisecond, func() error {
		if _, ok := table.Lookup(2); !ok {
			return errors.New("shard 2's new owner has not reached the table")
		}
		return nil
	})
	w.endWatch()
	testutil.Eventually(t, 10*time.Second, 5*time.Millisecond, func() error {
		if len(w.starts()) < 2 {
			return errors.New("the table has not watched again")
		}
		if o, _ := table.Lookup(1); o.NodeID != "n3" {
			return fmt.Errorf("shard 1 owned by %q, want n3", o.NodeID)
		}
		return nil
	})
	check(2, 5) // and shard 2's write, the new list, the node entry
}

// embeddedEtcd starts an etcd server for the test and returns a function
// that opens a client of it; both close at the test's end.
func embeddedEtcd(t *testing.T) func() *clientv3.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := etcdembed.Start(ctx, etcdembed.Config{Dir: t.TempDir(), UnsafeNoFsync: true, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return func() *clientv3.Client {
		t.Helper()
		c, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
}

// startTable starts a table of prefix on cli, closed at the test's end.
func startTable(ctx context.Context, t *testing.T, cli *clientv3.Client, prefix string) *Table {
	t.Helper()
	table, err := NewTable(cli, prefix, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := table.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(table.Close)
	return table
}
