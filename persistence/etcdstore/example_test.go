package etcdstore_test

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/ordo-actors/ordo/persistence"
	etcdstore "github.com/ordo-actors/ordo/persistence/etcdstore"
)

func ExampleNew() {
	ctx, cancel := context.WithTimeout(context.TODO(), 10*time.Second)
	defer cancel()
	// endpoints are those of the embedded etcd the tests run against.
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, Logger: zap.NewNop()})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cli.Close() // the caller owns the client

	cfg := etcdstore.DefaultConfig()
	cfg.Prefix = "/example/store/"
	s, err := etcdstore.New(cli, cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()

	if err := s.Fence(ctx, 3, 1); err != nil {
		fmt.Println(err)
		return
	}
	out, err := s.Save(ctx, []persistence.Record{
		{Kind: "account", ID: "alice", Shard: 3, Epoch: 1, Data: []byte("100")},
		{Kind: "account", ID: "bob", Shard: 4, Epoch: 1, Data: []byte("5")}, // shard 4 not fenced
	})
	fmt.Println(out[3], out[4], err)
	r, err := s.Load(ctx, "account", "alice")
	fmt.Printf("%s %d %v\n", r.Data, r.Epoch, err)
	// Output:
	// <nil> persistence: shard 4 fenced: epoch 1, store has 0 <nil>
	// 100 1 <nil>
}
