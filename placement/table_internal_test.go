package placement

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
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
	srv, err := etcdembed.Start(ctx, etcdembed.Config{Dir: t.TempDir(), UnsafeNoFsync: true, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	const prefix = "/ordo/tbl"
	table, err := NewTable(cli, prefix, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := table.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer table.Close()
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
