package cluster

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/ordo-actors/ordo/persistence/memory"
	"github.com/ordo-actors/ordo/placement/etcdembed"
	"github.com/ordo-actors/ordo/proto/ordopb"
	"github.com/ordo-actors/ordo/proto/testpb"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"
)

// fuzzNode starts one node owning every shard and a client transport.
func fuzzNode(tb testing.TB) (*Node, *transport) {
	tb.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx := context.Background()
	srv, err := etcdembed.Start(ctx, etcdembed.Config{Dir: tb.TempDir(), UnsafeNoFsync: true, Logger: zap.NewNop()})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(srv.Close)
	cfg := DefaultLocalConfig()
	cfg.NodeID = "fz"
	cfg.EtcdEndpoints = srv.Endpoints()
	cfg.Store = memory.New()
	cfg.Placement.Prefix = "/ordo/fuzz"
	cfg.Placement.Shards = 4
	cfg.Logger = quiet
	n, err := New(cfg, echoKind)
	if err != nil {
		tb.Fatal(err)
	}
	if err := n.Start(ctx); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_ = n.Shutdown(sctx)
	})
	testutil.Eventually(tb, 20*time.Second, 10*time.Millisecond, func() error {
		if o := len(n.Owned()); o < 4 {
			return fmt.Errorf("the node holds %d of 4 shards", o)
		}
		return nil
	})
	tr, err := startTransport("127.0.0.1:0", "", quiet)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { tr.close(false) })
	return n, tr
}

// Envelopes decoded from arbitrary bytes and sent over the network to a
// node's router always get a reply; the node keeps serving.
func FuzzRouterEnvelope(f *testing.F) {
	for _, m := range []proto.Message{&testpb.Echo{N: 1}, &testpb.Add{Delta: 1}, &testpb.Get{}} {
		env, _ := actors.Envelope(echoKind.Ref("a"), m, "r1")
		b, _ := proto.Marshal(env)
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{0x0a, 0x02, 0x0a, 0x00})
	n, tr := fuzzNode(f)
	pid := actor.NewPID(n.tr.addr, routerName)
	f.Fuzz(func(t *testing.T, b []byte) {
		var env ordopb.Envelope
		if proto.Unmarshal(b, &env) != nil {
			return
		}
		res, err := tr.system.Root.RequestFuture(pid, &env, 10*time.Second).Result()
		if err != nil {
			t.Fatalf("no answer to %v: %v", &env, err)
		}
		if _, ok := res.(*ordopb.Reply); !ok {
			t.Fatalf("answer %T, want *ordopb.Reply", res)
		}
	})
}

// Other message types get an error reply, and raw garbage on the remote
// port does not bring the node down.
func TestRouterRejectsGarbage(t *testing.T) {
	n, tr := fuzzNode(t)
	pid := actor.NewPID(n.tr.addr, routerName)
	res, err := tr.system.Root.RequestFuture(pid, &testpb.Echo{N: 1}, 10*time.Second).Result()
	if err != nil {
		t.Fatal(err)
	}
	rep, ok := res.(*ordopb.Reply)
	if !ok || rep.GetError().GetCode() != ordopb.Code_CODE_BAD_REQUEST {
		t.Fatalf("got %v, want a bad-request reply", res)
	}

	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	for i := 0; i < 20; i++ {
		c, err := net.Dial("tcp", n.tr.addr)
		if err != nil {
			t.Fatal(err)
		}
		junk := make([]byte, 1+rng.IntN(4096))
		for j := range junk {
			junk[j] = byte(rng.Uint32())
		}
		_, _ = c.Write(junk)
		c.Close()
	}
	v, err := actors.Call[*testpb.Echo](context.Background(), n, echoKind.Ref("still-alive"), &testpb.Echo{N: 7})
	if err != nil || v.N != 7 {
		t.Fatalf("node stopped serving after garbage (seed %d): %v %v", seed, v, err)
	}
}
