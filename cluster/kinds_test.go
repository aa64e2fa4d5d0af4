package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/cluster"
	"github.com/ordo-actors/ordo/placement"
	"github.com/ordo-actors/ordo/proto/ordopb"
	"github.com/ordo-actors/ordo/proto/testpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// tallyKind is the kind a rolling deploy adds.
var tallyKind = actors.MustKind("tally", func() *testpb.Counter { return new(testpb.Counter) },
	actors.On(func(c *counterCtx, m *testpb.Add) (*testpb.Value, error) {
		c.State.Value += m.Delta
		return &testpb.Value{Value: c.State.Value}, nil
	}))

// A rolling deploy that adds a kind: while a node without it owns a shard,
// calls to the kind's entities there fail with a retryable error, never
// unknown-kind, and succeed as soon as a node that has it owns the shard
// (here: the same node, restarted with the kind). A kind no node hosts is
// unknown at once.
func TestRollingDeployAddsKind(t *testing.T) {
	e := newEnv(t, nil, 16)
	n1 := e.startKinds(e.config("n1"), counterKind, tallyKind)
	n2 := e.startKinds(e.config("n2"), counterKind)
	e.converged(n1, n2)
	client := e.dial()

	// An entity of tally on a shard n2 owns, and one on a shard n1 owns.
	var onOld, onNew actors.Ref
	for i := 0; onOld.ID == "" || onNew.ID == ""; i++ {
		ref := tallyKind.Ref(fmt.Sprintf("t%d", i))
		if placement.Desired(actors.ShardOf(ref, e.shards), []string{"n1", "n2"}) == "n2" {
			if onOld.ID == "" {
				onOld = ref
			}
		} else if onNew.ID == "" {
			onNew = ref
		}
	}
	for _, inv := range []actors.Invoker{client, n1, n2} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if _, err := cluster.Call[*testpb.Value](ctx, inv, onNew, &testpb.Add{Delta: 1}); err != nil {
			t.Fatalf("tally on n1's shard: %v", err)
		}
		cancel()
	}

	// Retryable while n2 owns the shard: the caller's deadline ends the
	// call, not an unknown-kind answer.
	for _, inv := range []actors.Invoker{client, n1, n2} {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		_, err := cluster.Call[*testpb.Value](ctx, inv, onOld, &testpb.Add{Delta: 1})
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, actors.ErrUnknownKind) {
			t.Fatalf("tally on n2's shard while n2 lacks it: %v, want a deadline after retries", err)
		}
	}
	// n2's own host, asked directly, still says the kind is unknown to it;
	// the router is what turns that into a retry.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cluster.Call[*testpb.Value](ctx, client, actors.Ref{Kind: "nope", ID: "x"}, &testpb.Add{Delta: 1}); !errors.Is(err, actors.ErrUnknownKind) {
		t.Fatalf("a kind no node hosts: %v, want ErrUnknownKind", err)
	}

	// A call made during the deploy succeeds once n2 is back with tally.
	done := make(chan error, 1)
	go func() {
		_, err := cluster.Call[*testpb.Value](ctx, client, onOld, &testpb.Add{Delta: 5}, actors.WithRequestID("during-deploy"))
		done <- err
	}()
	if err := n2.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	cfg := e.config("n2")
	cfg.Join = []string{n1.GossipAddr()}
	n2b := e.startKinds(cfg, counterKind, tallyKind)
	if err := <-done; err != nil {
		t.Fatalf("call during the deploy: %v", err)
	}
	e.converged(n1, n2b)
	v, err := cluster.Call[*testpb.Value](ctx, client, onOld, &testpb.Add{Delta: 0})
	if err != nil || v.GetValue() != 5 {
		t.Fatalf("after the deploy: %v %v, want 5 (the call during the deploy applied once)", v, err)
	}
}

// A node asked over the transport for a kind it does not host, which
// another node hosts (a caller whose table is stale, or that did not know
// what the node hosts), answers unavailable, not unknown-kind.
func TestNodeWithoutKindAnswersRetryable(t *testing.T) {
	e := newEnv(t, nil, 4)
	e.startKinds(e.config("n1"), counterKind, tallyKind)
	n2 := e.startKinds(e.config("n2"), counterKind)
	e.converged(e.nodes...)
	conn, err := grpc.NewClient(n2.RemoteAddr(), grpc.WithTransportCredentials(credentials.NewTLS(clientTLS("client").ClientConfig("127.0.0.1"))))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := ordopb.NewTransportClient(conn).Calls(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tally, _ := actors.Envelope(tallyKind.Ref("x"), &testpb.Add{Delta: 1}, "r1")
	nope, _ := actors.Envelope(actors.Ref{Kind: "nope", ID: "x"}, &testpb.Add{Delta: 1}, "r2")
	if err := stream.Send(&ordopb.CallFrame{Calls: []*ordopb.Call{{Id: 1, Envelope: tally}, {Id: 2, Envelope: nope}}}); err != nil {
		t.Fatal(err)
	}
	want := map[uint64]ordopb.Code{1: ordopb.Code_CODE_UNAVAILABLE, 2: ordopb.Code_CODE_UNKNOWN_KIND}
	for len(want) > 0 {
		f, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range f.GetResults() {
			if code := r.GetReply().GetError().GetCode(); code != want[r.GetId()] {
				t.Fatalf("call %d: %v, want %v", r.GetId(), r.GetReply(), want[r.GetId()])
			}
			delete(want, r.GetId())
		}
	}
}
