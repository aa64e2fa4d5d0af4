package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/ordo-actors/ordo/proto/ordopb"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/anypb"
)

// fakeNode answers every call through answer, which returns the results to
// send for it, in order.
type fakeNode struct {
	ordopb.UnimplementedTransportServer
	answer func(c *ordopb.Call) []*ordopb.Result
}

func (f *fakeNode) Calls(stream ordopb.Transport_CallsServer) error {
	for {
		frame, err := stream.Recv()
		if err != nil {
			return nil
		}
		for _, c := range frame.GetCalls() {
			if err := stream.Send(&ordopb.ResultFrame{Results: f.answer(c)}); err != nil {
				return err
			}
		}
	}
}

func startFake(t *testing.T, f *fakeNode) (addr string, stop func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	ordopb.RegisterTransportServer(srv, f)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return ln.Addr().String(), srv.Stop
}

// leakCheck verifies, after every cleanup of t, that t leaked no goroutine.
func leakCheck(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func echoed(c *ordopb.Call, requestID string) *ordopb.Result {
	return &ordopb.Result{Id: c.GetId(), Reply: &ordopb.Reply{RequestId: requestID, Payload: c.GetEnvelope().GetPayload()}}
}

// A result with another request ID than its call's, or for a call that is
// not waiting, is ignored: the caller gets its own reply or none.
func TestTransportIgnoresForgedResults(t *testing.T) {
	leakCheck(t)
	addr, _ := startFake(t, &fakeNode{answer: func(c *ordopb.Call) []*ordopb.Result {
		if c.GetEnvelope().GetRequestId() == "never" {
			return []*ordopb.Result{echoed(c, "forged")}
		}
		return []*ordopb.Result{
			echoed(c, "forged"),
			{Id: c.GetId() + 1000, Reply: &ordopb.Reply{RequestId: c.GetEnvelope().GetRequestId()}},
			{Id: c.GetId()}, // no reply at all
			echoed(c, c.GetEnvelope().GetRequestId()),
		}
	}})
	tr := newTransport(quietLog(), nil)
	defer tr.close(true)
	ctx := context.Background()
	for _, id := range []string{"r1", "r2", "r3"} {
		rep, err := tr.request(ctx, addr, &ordopb.Envelope{RequestId: id})
		if err != nil {
			t.Fatal(err)
		}
		if rep.GetRequestId() != id {
			t.Fatalf("call %s got the reply of %s", id, rep.GetRequestId())
		}
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if rep, err := tr.request(short, addr, &ordopb.Envelope{RequestId: "never"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a call answered only by a forged result got %v, %v", rep, err)
	}
}

// When the stream breaks, every waiting call fails as unreachable (the
// router retries it), and the next call dials again.
func TestTransportPeerFailure(t *testing.T) {
	leakCheck(t)
	block := make(chan struct{})
	addr, stop := startFake(t, &fakeNode{answer: func(c *ordopb.Call) []*ordopb.Result {
		if c.GetEnvelope().GetRequestId() == "hang" {
			<-block
		}
		return []*ordopb.Result{echoed(c, c.GetEnvelope().GetRequestId())}
	}})
	defer close(block)
	tr := newTransport(quietLog(), nil)
	defer tr.close(true)
	ctx := context.Background()
	if _, err := tr.request(ctx, addr, &ordopb.Envelope{RequestId: "r1"}); err != nil {
		t.Fatal(err)
	}
	failed := make(chan error, 1)
	go func() {
		_, err := tr.request(ctx, addr, &ordopb.Envelope{RequestId: "hang"})
		failed <- err
	}()
	// Wait until the call is in flight, then take the node away.
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		p, _ := tr.peer(addr)
		p.mu.Lock()
		defer p.mu.Unlock()
		if len(p.pending) != 1 {
			return errors.New("the call is not in flight yet")
		}
		return nil
	})
	go stop()
	if err := <-failed; !errors.Is(err, errUnreachable) {
		t.Fatalf("a call in flight to a node that stopped got %v, want errUnreachable", err)
	}
	if _, err := tr.request(ctx, addr, &ordopb.Envelope{RequestId: "r2"}); !errors.Is(err, errUnreachable) {
		t.Fatalf("a call to a stopped node got %v, want errUnreachable", err)
	}
	tr.close(false)
	if _, err := tr.request(ctx, addr, &ordopb.Envelope{RequestId: "r3"}); !errors.Is(err, ErrClosed) {
		t.Fatalf("a call on a closed transport got %v, want ErrClosed", err)
	}
}

// An envelope too large for the transport is refused before it is sent.
func TestTransportRefusesOversizedEnvelope(t *testing.T) {
	leakCheck(t)
	sent := 0
	addr, _ := startFake(t, &fakeNode{answer: func(c *ordopb.Call) []*ordopb.Result {
		sent++
		return []*ordopb.Result{echoed(c, c.GetEnvelope().GetRequestId())}
	}})
	tr := newTransport(quietLog(), nil)
	defer tr.close(true)
	rep, err := tr.request(context.Background(), addr, &ordopb.Envelope{RequestId: strings.Repeat("x", maxEnvelopeBytes)})
	if err != nil {
		t.Fatal(err)
	}
	if rep.GetError().GetCode() != ordopb.Code_CODE_BAD_REQUEST || sent != 0 {
		t.Fatalf("oversized envelope: reply %v, %d sent", rep, sent)
	}
}

// countingConn counts the writes made on a connection: a syscall each.
type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(b []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(b)
}

type countingListener struct {
	net.Listener
	writes *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countingConn{c, l.writes}, nil
}

// A call one way and its result the other are a write each, with no
// flow-control traffic beside them: no bandwidth-estimating PING per round
// trip (a write and its ack on each side), no WINDOW_UPDATE before a
// quarter window has arrived. Counted over sequential calls, each alone
// on the connection, after one call has set the connection up.
func TestTransportWritesPerCall(t *testing.T) {
	leakCheck(t)
	var clientWrites, serverWrites atomic.Int64
	srv, err := startTransport("127.0.0.1:0", "", quietLog(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.close(false)
	srv.ln = countingListener{srv.ln, &serverWrites}
	srv.serve(func(_ peerID, env *ordopb.Envelope, reply func(*ordopb.Reply)) {
		reply(&ordopb.Reply{RequestId: env.GetRequestId(), Payload: env.GetPayload()})
	})
	cl := newTransport(quietLog(), nil)
	defer cl.close(false)
	cl.dialOpts = append(cl.dialOpts, grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return countingConn{c, &clientWrites}, nil
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n := 0
	call := func() {
		t.Helper()
		n++
		id := fmt.Sprintf("r%d", n)
		rep, err := cl.request(ctx, srv.addr, &ordopb.Envelope{RequestId: id, Payload: &anypb.Any{TypeUrl: "type.googleapis.com/ordo.test.Blob", Value: make([]byte, 512)}})
		if err != nil || rep.GetRequestId() != id {
			t.Fatalf("call %s: %v, %v", id, rep, err)
		}
	}
	// The set-up's frames (SETTINGS and their acks) may still be on their
	// way after the first call: wait for a call that is a write each way.
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		c, s := clientWrites.Load(), serverWrites.Load()
		call()
		if c, s := clientWrites.Load()-c, serverWrites.Load()-s; c != 1 || s != 1 {
			return fmt.Errorf("a call took %d writes from the client and %d from the server", c, s)
		}
		return nil
	})
	const calls = 300
	c0, s0 := clientWrites.Load(), serverWrites.Load()
	cst0, sst0 := cl.stats(), srv.stats()
	for range calls {
		call()
	}
	if c, s := clientWrites.Load()-c0, serverWrites.Load()-s0; c != calls || s != calls {
		t.Fatalf("%d calls, each alone on the connection: the client wrote %d times, the server %d; want %d each", calls, c, s, calls)
	}
	// The transport's own counts agree: a frame per call each way. The
	// server counts a result once its frame is written, which may come
	// just after the client read it.
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		cst, sst := cl.stats(), srv.stats()
		got := TransportStats{Calls: cst.Calls - cst0.Calls, CallFrames: cst.CallFrames - cst0.CallFrames,
			Results: sst.Results - sst0.Results, ResultFrames: sst.ResultFrames - sst0.ResultFrames}
		if want := (TransportStats{Calls: calls, CallFrames: calls, Results: calls, ResultFrames: calls}); got != want {
			return fmt.Errorf("counted %+v, want %+v", got, want)
		}
		if cst.Results != 0 || sst.Calls != 0 {
			return fmt.Errorf("the client counts %d results and the server %d calls; want 0", cst.Results, sst.Calls)
		}
		return nil
	})
}

// One-way calls reach the serving side in order, and it sends no result
// for them: of 50 one-way calls and a call behind them, the stream sends
// one result, and owes nothing once the host has answered them all.
func TestTransportOneWay(t *testing.T) {
	leakCheck(t)
	srv, err := startTransport("127.0.0.1:0", "", quietLog(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.close(false)
	var mu sync.Mutex
	var served []string
	srv.serve(func(_ peerID, env *ordopb.Envelope, reply func(*ordopb.Reply)) {
		mu.Lock()
		served = append(served, env.GetRequestId())
		mu.Unlock()
		reply(&ordopb.Reply{RequestId: env.GetRequestId()})
	})
	cl := newTransport(quietLog(), nil)
	defer cl.close(false)
	const oneWay = 50
	var want []string
	for i := range oneWay {
		id := fmt.Sprintf("one-way-%d", i)
		want = append(want, id)
		if err := cl.sendOneWay(srv.addr, &ordopb.Envelope{RequestId: id, OneWay: true}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep, err := cl.request(ctx, srv.addr, &ordopb.Envelope{RequestId: "last"})
	if err != nil || rep.GetRequestId() != "last" {
		t.Fatalf("the call behind the one-way calls: %v, %v", rep, err)
	}
	mu.Lock()
	got := slices.Clone(served)
	mu.Unlock()
	if want = append(want, "last"); !slices.Equal(got, want) {
		t.Fatalf("served %v, want %v", got, want)
	}
	srv.mu.Lock()
	streams := slices.Collect(maps.Keys(srv.streams))
	srv.mu.Unlock()
	if len(streams) != 1 {
		t.Fatalf("%d streams, want 1", len(streams))
	}
	ss := streams[0]
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		ss.mu.Lock()
		defer ss.mu.Unlock()
		if ss.received != oneWay+1 || ss.sent != 1 || ss.inflight != 0 {
			return fmt.Errorf("the stream received %d calls, sent %d results and owes %d calls; want %d, 1 and 0",
				ss.received, ss.sent, ss.inflight, oneWay+1)
		}
		return nil
	})
	// A sender counts a frame once it is written, which may come just
	// after its peer read it.
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if st := cl.stats(); st.Calls != oneWay+1 || st.CallFrames < 1 || st.CallFrames > oneWay+1 {
			return fmt.Errorf("the client counted %d calls in %d frames; want %d calls in 1 to %d frames", st.Calls, st.CallFrames, oneWay+1, oneWay+1)
		}
		if st := srv.stats(); st.Results != 1 || st.ResultFrames != 1 {
			return fmt.Errorf("the server counted %d results in %d frames; want 1 in 1", st.Results, st.ResultFrames)
		}
		return nil
	})
	if err := cl.sendOneWay(srv.addr, &ordopb.Envelope{RequestId: strings.Repeat("x", maxEnvelopeBytes), OneWay: true}); err == nil {
		t.Fatal("an oversized one-way envelope was sent")
	}
}
