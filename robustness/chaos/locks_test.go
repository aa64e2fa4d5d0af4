package chaos

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/ordo-actors/ordo/etcdembed"
	"github.com/ordo-actors/ordo/placement"
)

// An unserved shard is described by its lock as etcd holds it and by the
// nodes that claim it: a lock no node claims shows as such.
func TestDescribeLocks(t *testing.T) {
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
	keys, err := placement.NewKeys(placement.DefaultConfig().Prefix)
	if err != nil {
		t.Fatal(err)
	}
	lease, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	epoch, err := placement.Acquire(ctx, cli, keys, 213, "n3", lease.ID)
	if err != nil {
		t.Fatal(err)
	}
	got := describeLocks(ctx, cli, keys, []uint32{7, 213}, map[uint32][]string{7: {"n1"}})
	want := []string{
		"shard 7: no lock, claimed by [n1]",
		fmt.Sprintf("shard 213: locked by n3 at epoch %d under lease %x, claimed by []", epoch, int64(lease.ID)),
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
