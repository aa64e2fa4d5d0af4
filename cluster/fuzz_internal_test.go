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

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/etcdembed"
	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/ordo-actors/ordo/persistence/memory"
	"github.com/ordo-actors/ordo/proto/ordopb"
	"github.com/ordo-actors/ordo/proto/testpb"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/proto"
)

// fuzzNode starts one node owning every shard, with mutual TLS from
// testCA.
func fuzzNode(tb testing.TB) *Node {
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
	cfg.TLS = nodeTLS(tb, "fz")
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
	return n
}

// rawConn is a plain gRPC connection to a node's transport port, with a
// client certificate from testCA: a caller that is not ordo, free to send
// anything.
func rawConn(tb testing.TB, addr string) *grpc.ClientConn {
	tb.Helper()
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		tb.Fatal(err)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(clientTLS(tb, "fuzzer").ClientConfig(host))))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { conn.Close() })
	return conn
}

// exchange sends frames on one stream, closes its side, and returns every
// result the node sent before ending the stream.
func exchange(ctx context.Context, conn *grpc.ClientConn, frames ...*ordopb.CallFrame) ([]*ordopb.Result, error) {
	stream, err := ordopb.NewTransportClient(conn).Calls(ctx)
	if err != nil {
		return nil, err
	}
	for _, f := range frames {
		if err := stream.Send(f); err != nil {
			return nil, err
		}
	}
	if err := stream.CloseSend(); err != nil {
		return nil, err
	}
	var out []*ordopb.Result
	for {
		f, err := stream.Recv()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, f.GetResults()...)
	}
}

// assertServing fails the test unless the node still answers a call.
func assertServing(t testing.TB, n *Node, why string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, err := actors.Call[*testpb.Echo](ctx, n, echoKind.Ref("still-alive"), &testpb.Echo{N: 7})
	if err != nil || v.GetN() != 7 {
		t.Fatalf("node stopped serving after %s: %v %v", why, v, err)
	}
}

// Any frame a peer can encode, sent over a real stream, is answered call
// by call: one result per call, each with its call's ID, but none for a
// one-way call (its envelope's one_way).
func FuzzTransportFrame(f *testing.F) {
	for _, m := range []proto.Message{&testpb.Echo{N: 1}, &testpb.Add{Delta: 1}, &testpb.Get{}} {
		env, _ := actors.Envelope(echoKind.Ref("a"), m, "r1")
		b, _ := proto.Marshal(&ordopb.CallFrame{Calls: []*ordopb.Call{{Id: 1, Envelope: env}, {Id: 2}}})
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{0x0a, 0x02, 0x08, 0x01})
	n := fuzzNode(f)
	conn := rawConn(f, n.tr.bound)
	f.Fuzz(func(t *testing.T, b []byte) {
		var frame ordopb.CallFrame
		if proto.Unmarshal(b, &frame) != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		results, err := exchange(ctx, conn, &frame)
		if err != nil {
			t.Fatalf("stream of %v: %v", &frame, err)
		}
		want := map[uint64]int{}
		for _, c := range frame.GetCalls() {
			if !c.GetEnvelope().GetOneWay() {
				want[c.GetId()]++
			}
		}
		for _, r := range results {
			want[r.GetId()]--
			if r.GetReply() == nil {
				t.Fatalf("result %d without a reply", r.GetId())
			}
		}
		for id, missing := range want {
			if missing != 0 {
				t.Fatalf("call %d: %d results missing (frame %v)", id, missing, &frame)
			}
		}
	})
}

// rawCodec sends bytes as they are, so a test can put anything in a gRPC
// message.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// Random bytes on the port, random bytes as gRPC messages, frames of
// random calls, an oversized frame and calls to unknown methods never
// bring a node down, and it keeps answering.
func TestTransportSurvivesGarbage(t *testing.T) {
	n := fuzzNode(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	junk := func(max int) []byte {
		b := make([]byte, 1+rng.IntN(max))
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}

	// Bytes that are not TLS at all.
	for i := 0; i < 20; i++ {
		c, err := net.Dial("tcp", n.tr.bound)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = c.Write(junk(4096))
		c.Close()
	}
	assertServing(t, n, fmt.Sprintf("raw bytes (seed %d)", seed))

	// gRPC messages that are not frames: the stream ends with an error.
	conn := rawConn(t, n.tr.bound)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	desc := &grpc.StreamDesc{StreamName: "Calls", ServerStreams: true, ClientStreams: true}
	for i := 0; i < 20; i++ {
		s, err := conn.NewStream(ctx, desc, ordopb.Transport_Calls_FullMethodName, grpc.ForceCodec(rawCodec{}))
		if err != nil {
			t.Fatal(err)
		}
		b := junk(512)
		_ = s.SendMsg(&b)
		_ = s.CloseSend()
		var out []byte
		for s.RecvMsg(&out) == nil {
		}
	}
	assertServing(t, n, fmt.Sprintf("random messages (seed %d)", seed))

	// A frame above the limit ends its stream, and nothing else.
	big := &ordopb.CallFrame{Calls: []*ordopb.Call{{Id: 1, Envelope: &ordopb.Envelope{RequestId: string(make([]byte, maxFrameBytes))}}}}
	if _, err := exchange(ctx, conn, big); err == nil {
		t.Fatal("an oversized frame was accepted")
	}
	assertServing(t, n, "an oversized frame")

	// Another method of the service, and another service.
	if err := conn.Invoke(ctx, "/ordo.v1.Transport/Stop", &ordopb.Envelope{}, &ordopb.Reply{}); err == nil {
		t.Fatal("an unknown method was served")
	}
	if err := conn.Invoke(ctx, "/grpc.health.v1.Health/Check", &ordopb.Envelope{}, &ordopb.Reply{}); err == nil {
		t.Fatal("an unknown service was served")
	}

	// Frames of random calls, valid protobuf: every call is answered, but
	// a one-way one.
	for i := 0; i < 50; i++ {
		var frame ordopb.CallFrame
		for j := rng.IntN(5); j >= 0; j-- {
			env := &ordopb.Envelope{RequestId: fmt.Sprint(rng.Uint32())}
			if rng.IntN(4) > 0 {
				env.Target = &ordopb.EntityRef{Kind: []string{"echo", "nope", ""}[rng.IntN(3)], Id: fmt.Sprintf("%x", junk(8))}
			}
			if rng.IntN(4) > 0 {
				_ = proto.Unmarshal(junk(64), env) // random fields on top
			}
			frame.Calls = append(frame.Calls, &ordopb.Call{Id: rng.Uint64N(4), Envelope: env})
		}
		if _, err := proto.Marshal(&frame); err != nil {
			continue // random fields made it unencodable (invalid UTF-8): the random-message case covers those bytes
		}
		results, err := exchange(ctx, conn, &frame)
		if err != nil {
			t.Fatalf("seed %d: frame %v: %v", seed, &frame, err)
		}
		answered := 0
		for _, c := range frame.Calls {
			if !c.GetEnvelope().GetOneWay() {
				answered++
			}
		}
		if len(results) != answered {
			t.Fatalf("seed %d: %d results for %d calls, %d of them one-way", seed, len(results), len(frame.Calls), len(frame.Calls)-answered)
		}
	}
	assertServing(t, n, fmt.Sprintf("random calls (seed %d)", seed))
}

// A caller that sends calls and never reads their results is not read
// from once its stream owes maxStreamBacklog results: what the node holds
// for it stays bounded, and the node keeps serving everyone else.
func TestTransportBoundsAStreamThatDoesNotRead(t *testing.T) {
	n := fuzzNode(t)
	conn := rawConn(t, n.tr.bound)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := ordopb.NewTransportClient(conn).Calls(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const total = 4 * maxStreamBacklog
	sent := make(chan int, 1)
	go func() { // blocks once the node stops reading
		i := 0
		for ; i < total; i += 100 {
			frame := &ordopb.CallFrame{}
			for j := 0; j < 100; j++ {
				env, _ := actors.Envelope(echoKind.Ref(fmt.Sprintf("e%d", (i+j)%64)), &testpb.Echo{N: 1}, fmt.Sprint("r", i+j))
				frame.Calls = append(frame.Calls, &ordopb.Call{Id: uint64(i + j + 1), Envelope: env})
			}
			if stream.Send(frame) != nil {
				break
			}
		}
		sent <- i
	}()
	var ss *serverStream
	testutil.Eventually(t, 30*time.Second, 5*time.Millisecond, func() error {
		n.tr.mu.Lock()
		for s := range n.tr.streams {
			ss = s
		}
		n.tr.mu.Unlock()
		if ss == nil {
			return fmt.Errorf("no stream yet")
		}
		ss.mu.Lock()
		defer ss.mu.Unlock()
		if !ss.parked {
			return fmt.Errorf("reader not parked: %d received, %d sent", ss.received, ss.sent)
		}
		return nil
	})
	ss.mu.Lock()
	received, owed := ss.received, ss.received-ss.sent
	ss.mu.Unlock()
	if received >= total || owed > 2*maxStreamBacklog+100 {
		t.Fatalf("the node read %d of %d calls and owes %d results, want at most %d owed", received, total, owed, 2*maxStreamBacklog+100)
	}
	assertServing(t, n, "a stream that does not read")
	cancel()
	<-sent
}
