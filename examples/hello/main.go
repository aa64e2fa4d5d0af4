// Command hello embeds ordo: a kind, a node (mutual TLS from a throw-away CA) on an embedded
// etcd with the in-memory store, one call whose reply it prints. Run: go run ./examples/hello.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/cluster"
	"github.com/ordo-actors/ordo/etcdembed"
	"github.com/ordo-actors/ordo/ordotls"
	"github.com/ordo-actors/ordo/persistence/memory"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// greeter entities count their greetings (state) and greet a name (request).
var greeter = actors.MustKind("greeter", func() *wrapperspb.Int64Value { return new(wrapperspb.Int64Value) },
	actors.On(func(c *actors.Context[*wrapperspb.Int64Value], name *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		c.State.Value++
		return wrapperspb.String(fmt.Sprintf("hello, %s: greeting %d from %s", name.Value, c.State.Value, c.Ref())), nil
	}))

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	dir, err := os.MkdirTemp("", "ordo-hello-")
	check(err)
	defer os.RemoveAll(dir)
	etcd, err := etcdembed.Start(ctx, etcdembed.Config{Dir: dir + "/etcd", Slog: log})
	check(err)
	defer etcd.Close()
	ca, err := ordotls.NewCA("hello-ca") // a deployment loads its certificates with ordotls.Load
	check(err)
	cfg := cluster.DefaultLocalConfig()
	cfg.NodeID, cfg.EtcdEndpoints, cfg.Store, cfg.Logger = "hello-1", etcd.Endpoints(), memory.New(), log
	cfg.TLS, err = ca.Node(cfg.NodeID)
	check(err)
	node, err := cluster.New(cfg, greeter)
	check(err)
	check(node.Start(ctx))
	defer node.Shutdown(context.WithoutCancel(ctx))
	check(node.WaitReady(ctx))

	reply, err := cluster.Call[*wrapperspb.StringValue](ctx, node, greeter.Ref("world"), wrapperspb.String("ordo"))
	check(err)
	fmt.Println(reply.Value)
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "hello:", err)
		os.Exit(1) // deferred cleanup is skipped: the process is ending
	}
}
