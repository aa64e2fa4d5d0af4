package placement_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/ordo-actors/ordo/etcdembed"
	"github.com/ordo-actors/ordo/placement"
)

// Desired is a pure function of the shard and the live set, so every node
// agrees on it; a joining node takes only the shards it wins.
func ExampleDesired() {
	live := []string{"node-a", "node-b", "node-c"}
	for shard := uint32(0); shard < 6; shard++ {
		fmt.Println(shard, placement.Desired(shard, live))
	}
	fmt.Println("revoker of node-c:", placement.Revoker("node-c", live))
	// Output:
	// 0 node-a
	// 1 node-b
	// 2 node-a
	// 3 node-b
	// 4 node-b
	// 5 node-a
	// revoker of node-c: node-b
}

// exampleHost runs nothing; a real host starts and stops the shard's
// entities and fences its store at each new epoch.
type exampleHost struct{}

func (exampleHost) Acquired(shard uint32, epoch int64) {
	// Fence the store at epoch, then admit calls for the shard.
}

func (exampleHost) Release(ctx context.Context, shard uint32, epoch int64) error {
	// Stop admitting calls, finish the current one, flush, stop entities.
	return nil
}

func (exampleHost) Lost(shards []uint32) {
	// Drop the shards at once; discard replies not yet durable.
}

// A node with an embedded etcd: start it, feed it the live set, let it
// take its shards, shut it down.
func ExampleAgent() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir, err := os.MkdirTemp("", "ordo-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	etcd, err := etcdembed.Start(ctx, etcdembed.Config{Dir: dir, UnsafeNoFsync: true, Logger: zap.NewNop()})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer etcd.Close()
	client, err := clientv3.New(clientv3.Config{Endpoints: etcd.Endpoints(), Logger: zap.NewNop()})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()

	cfg := placement.DefaultLocalConfig()
	cfg.NodeID = "node-a"
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	node, err := placement.New(cfg, client, exampleHost{})
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := node.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	node.SetLive([]string{"node-a"}) // the cluster layer feeds memberlist ∩ registry
	routed := func() int { snap, _ := node.Table().Snapshot(); return len(snap) }
	for (len(node.Owned()) < int(cfg.Shards) || routed() < int(cfg.Shards)) && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond) // poll; an example has no test helpers
	}
	owner, _ := node.Table().Lookup(7)
	fmt.Println("owned:", len(node.Owned()), "valid:", node.Valid())
	fmt.Println("shard 7 owner:", owner.NodeID, "epoch matches:", owner.Epoch == node.Owned()[7])
	if err := node.Shutdown(ctx); err != nil {
		fmt.Println(err)
	}
	fmt.Println("after shutdown:", len(node.Owned()))
	// Output:
	// owned: 256 valid: true
	// shard 7 owner: node-a epoch matches: true
	// after shutdown: 0
}
