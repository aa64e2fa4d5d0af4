package cluster

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/ordotls"
	"github.com/ordo-actors/ordo/proto/ordopb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	grpcpeer "google.golang.org/grpc/peer"
	"google.golang.org/protobuf/proto"
)

// errUnreachable marks attempts that got no answer from the owner (refused
// or broken connection, timeout); the caller retries.
var errUnreachable = errors.New("cluster: owner unreachable")

// Transport limits. A frame is what one gRPC message carries: the calls
// (or results) that were ready to leave together.
const (
	// maxFrameBytes is the largest frame either side sends or accepts. A
	// larger frame ends its stream (only a peer that is not ordo sends
	// one: senders split their frames).
	maxFrameBytes = 16 << 20
	// maxEnvelopeBytes bounds one call's envelope or one result's reply;
	// a larger one is refused before it is sent.
	maxEnvelopeBytes = maxFrameBytes - 4<<10
	// frameBytes is where a sender starts a new frame.
	frameBytes = 1 << 20
	// maxStreamBacklog bounds what one stream owes its caller (calls with
	// the host and results not yet sent) before it stops reading calls.
	maxStreamBacklog = 4096
	// handshakeTimeout bounds a new connection's TLS handshake and HTTP/2
	// preface, so that connections that never finish one do not pile up.
	handshakeTimeout = 10 * time.Second
	// windowBytes is each connection's and stream's HTTP/2 flow-control
	// window, fixed (a peer has one stream per connection). gRPC's default
	// window grows by estimating the link's bandwidth-delay product with a
	// PING per round trip of data, and a PING and its ack are a write and
	// two reads on each side: under load, as many syscalls as the calls
	// themselves. A fixed window sends no PINGs and a WINDOW_UPDATE per
	// quarter window received. 4 MiB covers a LAN's bandwidth-delay
	// product many times over; it is also what a stalled receiver (see
	// maxStreamBacklog) may have buffered per peer before its sender
	// blocks.
	windowBytes = 4 << 20
)

// serveFunc hands an envelope that arrived from the network to the local
// host; reply must be called exactly once, from any goroutine. caller is
// the sending process as the transport verified it (callerOf): who is
// calling, for authorization to decide on.
type serveFunc func(caller peerID, env *ordopb.Envelope, reply func(*ordopb.Reply))

// peerID is the identity of the process at the other end of a stream, as
// mutual TLS verified it; the zero peerID is an unverified one
// (plaintext).
type peerID struct {
	// Name is the subject common name of the peer's certificate.
	Name string
	// Node: the certificate is a node's (ordotls CA.Node), valid for
	// server authentication; a client's (CA.Client) is valid for client
	// authentication only.
	Node bool
}

// transport is ordo's gRPC transport (service ordo.v1.Transport). Every
// process can call: it keeps one long-lived stream per peer address, sends
// frames of calls on it and matches results to calls by the stream's call
// ID and the envelope's request ID. Nodes also listen and serve. Nothing
// that arrives from the network reaches anything but the host's Submit,
// and every undecodable frame ends its stream. With TLS, every connection
// either way is mutual TLS from the source's material (see package
// ordotls); without, plaintext. Safe for concurrent use.
type transport struct {
	log      *slog.Logger
	tls      ordotls.Source // nil: plaintext
	dialOpts []grpc.DialOption

	// Serving side (nodes only).
	ln    net.Listener
	srv   *grpc.Server
	addr  string // advertised: what peers call
	bound string // listened on

	mu      sync.Mutex
	peers   map[string]*peer
	streams map[*serverStream]struct{}
	closed  bool

	// What went out to other processes (TransportStats).
	calls, callFrames, results, resultFrames atomic.Uint64
}

// TransportStats counts what a process's transport sent to other
// processes since it started: the calls (requests and one-way messages)
// and the frames that carried them, and, on a node, the results it sent
// back and their frames. A frame carries whatever was ready to go to one
// peer, up to about 1 MiB. Messages between co-located entities, and
// calls a node routes to itself, never reach the transport.
type TransportStats struct {
	Calls        uint64 `json:"calls"`
	CallFrames   uint64 `json:"call_frames"`
	Results      uint64 `json:"results"`
	ResultFrames uint64 `json:"result_frames"`
}

func (t *transport) stats() TransportStats {
	return TransportStats{Calls: t.calls.Load(), CallFrames: t.callFrames.Load(),
		Results: t.results.Load(), ResultFrames: t.resultFrames.Load()}
}

// newTransport returns a transport that can call but does not listen. It
// dials with mutual TLS from src, or in plaintext when src is nil.
func newTransport(log *slog.Logger, src ordotls.Source) *transport {
	return &transport{
		log: log,
		tls: src,
		dialOpts: []grpc.DialOption{
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxFrameBytes), grpc.MaxCallSendMsgSize(maxFrameBytes)),
			// A dead peer is reported quickly: ordo's router retries and
			// follows the placement table, so waiting buys nothing.
			grpc.WithConnectParams(grpc.ConnectParams{
				Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
				MinConnectTimeout: 2 * time.Second,
			}),
			// A peer that stops answering (a partition stalls TCP) is
			// detected and its stream failed.
			grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 5 * time.Second, Timeout: 5 * time.Second}),
			grpc.WithStaticStreamWindowSize(windowBytes),
			grpc.WithStaticConnWindowSize(windowBytes),
		},
		peers:   make(map[string]*peer),
		streams: make(map[*serverStream]struct{}),
	}
}

// startTransport returns a transport listening on addr ("host:port", port
// 0 for a free one). advertise, if not "", is the address peers are told
// to call instead (it must reach addr); the transport's addr is then
// advertise. It serves nothing until serve is called. With src, it serves
// and dials mutual TLS only; with nil, plaintext only.
func startTransport(addr, advertise string, log *slog.Logger, src ordotls.Source) (*transport, error) {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, fmt.Errorf("cluster: remote address %q: %w", addr, err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("cluster: remote address %q: %w", addr, err)
	}
	t := newTransport(log, src)
	t.ln = ln
	t.bound = ln.Addr().String()
	t.addr = t.bound
	if advertise != "" {
		t.addr = advertise
	}
	return t, nil
}

// serve starts answering calls with fn. Connections that arrived before
// wait in the listener's backlog.
func (t *transport) serve(fn serveFunc) {
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(maxFrameBytes),
		grpc.MaxSendMsgSize(maxFrameBytes),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: time.Second, PermitWithoutStream: true}),
		grpc.ConnectionTimeout(handshakeTimeout),
		grpc.StaticStreamWindowSize(windowBytes),
		grpc.StaticConnWindowSize(windowBytes),
	}
	if t.tls != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(t.tls.ServerConfig())))
	}
	t.srv = grpc.NewServer(opts...)
	ordopb.RegisterTransportServer(t.srv, &transportServer{t: t, fn: fn})
	go func() { _ = t.srv.Serve(t.ln) }()
}

// request sends env to the node at addr and waits for its reply, at most
// until ctx ends. Failures to reach the node wrap errUnreachable; an
// envelope too large to send is answered with a bad-request reply.
func (t *transport) request(ctx context.Context, addr string, env *ordopb.Envelope) (*ordopb.Reply, error) {
	return t.requestWhile(ctx, addr, env, nil, nil)
}

// sendOneWay queues a one-way envelope (env.OneWay) on the stream to addr
// and returns: the other side sends no result for it. It fails if the
// envelope is too large or the stream to addr has failed; once queued, the
// envelope may still be lost with the stream.
func (t *transport) sendOneWay(addr string, env *ordopb.Envelope) error {
	if size := proto.Size(env); size > maxEnvelopeBytes {
		return fmt.Errorf("envelope of %d bytes exceeds the transport's %d", size, maxEnvelopeBytes)
	}
	p, err := t.peer(addr)
	if err != nil {
		return err
	}
	return p.addOneWay(env)
}

// errOwnerMoved ends a request whose shard has another owner now (see
// ownerWatch).
var errOwnerMoved = errors.New("the shard's owner changed while the call was in flight")

// errAttemptTimeout ends a request whose timeout channel fired first.
var errAttemptTimeout = errors.New("attempt timed out")

// requestWhile is request that also stops waiting, with errOwnerMoved, as
// soon as w (when not nil) sees its shard owned by another node, and with
// errAttemptTimeout when timeout (when not nil) fires.
func (t *transport) requestWhile(ctx context.Context, addr string, env *ordopb.Envelope, w *ownerWatch, timeout <-chan time.Time) (*ordopb.Reply, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if size := proto.Size(env); size > maxEnvelopeBytes {
		return &ordopb.Reply{RequestId: env.GetRequestId(), Error: actors.ErrorToProto(&actors.Error{
			Code: ordopb.Code_CODE_BAD_REQUEST, Message: fmt.Sprintf("envelope of %d bytes exceeds the transport's %d", size, maxEnvelopeBytes)})}, nil
	}
	p, err := t.peer(addr)
	if err != nil {
		return nil, err
	}
	id, wait, err := p.add(env)
	if err != nil {
		return nil, err
	}
	var changed <-chan struct{} // nil: never
	if w != nil {
		changed = w.changed
	}
	for {
		select {
		case rep, ok := <-wait:
			if !ok {
				return nil, p.failure()
			}
			return rep, nil
		case <-ctx.Done():
			p.forget(id)
			return nil, ctx.Err()
		case <-timeout:
			p.forget(id)
			return nil, errAttemptTimeout
		case <-changed:
			if w.moved() {
				p.forget(id)
				return nil, errOwnerMoved
			}
			changed = w.changed
		}
	}
}

// peer returns the live connection to addr, dialing a new one when there
// is none or the last one failed.
func (t *transport) peer(addr string) (*peer, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, ErrClosed
	}
	if p := t.peers[addr]; p != nil {
		return p, nil
	}
	conn, err := grpc.NewClient(addr, append(t.dialOpts[:len(t.dialOpts):len(t.dialOpts)], t.credentials(addr))...)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", errUnreachable, addr, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &peer{t: t, addr: addr, conn: conn, ctx: ctx, cancel: cancel,
		pending: make(map[uint64]chan *ordopb.Reply), reqIDs: make(map[uint64]string), wake: make(chan struct{}, 1)}
	t.peers[addr] = p
	go p.run()
	return p, nil
}

// credentials returns how to secure connections to addr: mutual TLS that
// verifies the server's certificate against addr's host (a name or an IP
// address), or plaintext.
func (t *transport) credentials(addr string) grpc.DialOption {
	if t.tls == nil {
		return grpc.WithTransportCredentials(insecure.NewCredentials())
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	return grpc.WithTransportCredentials(credentials.NewTLS(t.tls.ClientConfig(host)))
}

// dropPeer forgets p if it is still addr's connection.
func (t *transport) dropPeer(p *peer) {
	t.mu.Lock()
	if t.peers[p.addr] == p {
		delete(t.peers, p.addr)
	}
	t.mu.Unlock()
}

// close stops serving and calling. A graceful close first lets every
// stream send the results it owes (bounded by a second); a hard close
// drops them. Later calls do nothing.
func (t *transport) close(hard bool) {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	t.closed = true
	peers := make([]*peer, 0, len(t.peers))
	for _, p := range t.peers {
		peers = append(peers, p)
	}
	streams := make([]*serverStream, 0, len(t.streams))
	for s := range t.streams {
		streams = append(streams, s)
	}
	t.mu.Unlock()

	if t.srv != nil {
		if !hard {
			deadline := time.Now().Add(time.Second)
			for _, s := range streams {
				s.flush(deadline, nil)
			}
		}
		t.srv.Stop()
	} else if t.ln != nil {
		t.ln.Close()
	}
	for _, p := range peers {
		p.fail(ErrClosed)
	}
}

// peer is the calling side of one stream to one address.
type peer struct {
	t      *transport
	addr   string
	conn   *grpc.ClientConn
	ctx    context.Context
	cancel context.CancelFunc
	wake   chan struct{}

	mu      sync.Mutex
	next    uint64
	pending map[uint64]chan *ordopb.Reply
	reqIDs  map[uint64]string
	queue   []*ordopb.Call
	err     error // why the stream ended; nil while it is up
}

// add queues env and returns its call ID and the channel its reply will
// arrive on (closed if the stream fails first).
func (p *peer) add(env *ordopb.Envelope) (uint64, chan *ordopb.Reply, error) {
	ch := make(chan *ordopb.Reply, 1)
	p.mu.Lock()
	if p.err != nil {
		err := p.err
		p.mu.Unlock()
		return 0, nil, p.wrap(err)
	}
	p.next++
	id := p.next
	p.pending[id] = ch
	p.reqIDs[id] = env.GetRequestId()
	p.queue = append(p.queue, &ordopb.Call{Id: id, Envelope: env})
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
	return id, ch, nil
}

// addOneWay queues a one-way env: no call waits for its result (none
// comes).
func (p *peer) addOneWay(env *ordopb.Envelope) error {
	p.mu.Lock()
	if p.err != nil {
		err := p.err
		p.mu.Unlock()
		return p.wrap(err)
	}
	p.next++
	p.queue = append(p.queue, &ordopb.Call{Id: p.next, Envelope: env})
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
	return nil
}

// forget drops a call whose caller stopped waiting; a late result for it
// is ignored.
func (p *peer) forget(id uint64) {
	p.mu.Lock()
	delete(p.pending, id)
	delete(p.reqIDs, id)
	p.mu.Unlock()
}

func (p *peer) failure() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.wrap(p.err)
}

func (p *peer) wrap(err error) error {
	if errors.Is(err, ErrClosed) {
		return err
	}
	return fmt.Errorf("%w: %s: %v", errUnreachable, p.addr, err)
}

// fail ends the stream: every waiting call fails, and the next request to
// the address dials again.
func (p *peer) fail(err error) {
	p.mu.Lock()
	if p.err != nil {
		p.mu.Unlock()
		return
	}
	p.err = err
	pending := p.pending
	p.pending, p.reqIDs, p.queue = nil, nil, nil
	p.mu.Unlock()
	p.t.dropPeer(p)
	p.cancel()
	for _, ch := range pending {
		close(ch)
	}
	_ = p.conn.Close()
}

// run opens the stream, then sends frames until it fails.
func (p *peer) run() {
	stream, err := ordopb.NewTransportClient(p.conn).Calls(p.ctx)
	if err != nil {
		p.fail(err)
		return
	}
	go p.receive(stream)
	frame := &ordopb.CallFrame{}
	var batch []*ordopb.Call
	for {
		select {
		case <-p.wake:
		case <-p.ctx.Done():
			return
		}
		p.mu.Lock()
		batch, p.queue = p.queue, batch[:0]
		p.mu.Unlock()
		for len(batch) > 0 {
			n, size := 0, 0
			for n < len(batch) && (n == 0 || size < frameBytes) {
				size += proto.Size(batch[n])
				n++
			}
			frame.Calls = batch[:n]
			if err := stream.Send(frame); err != nil {
				p.fail(err)
				return
			}
			p.t.calls.Add(uint64(n))
			p.t.callFrames.Add(1)
			clear(batch[:n])
			batch = batch[n:]
		}
		frame.Calls = nil
	}
}

// receive matches results to waiting calls until the stream ends. A
// result for no waiting call, or whose reply names another request ID
// than the call's, is ignored.
func (p *peer) receive(stream ordopb.Transport_CallsClient) {
	for {
		frame, err := stream.Recv()
		if err != nil {
			if err == io.EOF {
				err = errors.New("stream closed by the peer")
			}
			p.fail(err)
			return
		}
		for _, r := range frame.GetResults() {
			p.mu.Lock()
			ch, ok := p.pending[r.GetId()]
			if ok && p.reqIDs[r.GetId()] == r.GetReply().GetRequestId() && r.GetReply() != nil {
				delete(p.pending, r.GetId())
				delete(p.reqIDs, r.GetId())
			} else {
				ok = false
			}
			p.mu.Unlock()
			if ok {
				ch <- r.GetReply()
			} else {
				p.t.log.Debug("transport: ignored a result that matches no waiting call", "peer", p.addr, "call", r.GetId())
			}
		}
	}
}

// transportServer serves ordo.v1.Transport.
type transportServer struct {
	ordopb.UnimplementedTransportServer
	t  *transport
	fn serveFunc
}

// Calls serves one caller's stream: every call in every frame goes to the
// host, and each result leaves, batched with whatever else is ready, as
// soon as the host answers. A frame that cannot be decoded ends the stream.
func (s *transportServer) Calls(stream ordopb.Transport_CallsServer) error {
	ss := newServerStream(callerOf(stream.Context()))
	s.t.log.Debug("transport: stream opened", "caller", ss.caller)
	if !s.t.track(ss, true) {
		return ErrClosed
	}
	defer s.t.track(ss, false)
	ctx, cancel := context.WithCancel(stream.Context())
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		ss.send(ctx, stream, s.t)
	}()
	err := s.receive(stream, ss)
	if err == nil {
		// The caller closed its side: answer what it is owed first.
		ss.flush(time.Time{}, ctx.Done())
	}
	cancel()
	<-sent
	ss.close()
	return err
}

func (s *transportServer) receive(stream ordopb.Transport_CallsServer, ss *serverStream) error {
	for {
		// A caller that sends calls faster than it reads their results
		// (or not at all) is not read from until it catches up: its
		// unsent results stay bounded, and TCP pushes back on it.
		if !ss.waitBacklog(maxStreamBacklog, stream.Context().Done()) {
			return stream.Context().Err()
		}
		frame, err := stream.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		for _, c := range frame.GetCalls() {
			id, env := c.GetId(), c.GetEnvelope()
			if env == nil {
				ss.put(&ordopb.Result{Id: id, Reply: &ordopb.Reply{Error: actors.ErrorToProto(&actors.Error{
					Code: ordopb.Code_CODE_BAD_REQUEST, Message: "call without an envelope"})}}, false)
				continue
			}
			ss.begin()
			if env.GetOneWay() {
				// Its caller wants no result: it is owed nothing once the
				// host has answered.
				s.fn(ss.caller, env, func(*ordopb.Reply) { ss.settle() })
				continue
			}
			s.fn(ss.caller, env, func(rep *ordopb.Reply) { ss.put(&ordopb.Result{Id: id, Reply: rep}, true) })
		}
	}
}

// track registers or unregisters a serving stream; it reports false when
// the transport is closed.
func (t *transport) track(s *serverStream, add bool) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !add {
		delete(t.streams, s)
		return true
	}
	if t.closed {
		return false
	}
	t.streams[s] = struct{}{}
	return true
}

// callerOf returns the identity of the peer of a stream, if the transport
// verified its certificate (mutual TLS), and the zero peerID otherwise.
// The certificate is a node's when it is valid for server authentication
// (extended key usage ServerAuth): nodes serve the transport, clients
// only call it. Only the verified chain counts: its leaf was checked
// against the cluster's CAs, so its name and usages are the CA's word.
func callerOf(ctx context.Context) peerID {
	p, ok := grpcpeer.FromContext(ctx)
	if !ok {
		return peerID{}
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return peerID{}
	}
	leaf := info.State.VerifiedChains[0][0]
	return peerID{Name: leaf.Subject.CommonName, Node: slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageServerAuth)}
}

// serverStream is the answering side of one stream: the results the host
// produced and not yet sent, and the calls it still owes.
type serverStream struct {
	caller peerID // the peer's verified identity (callerOf); fixed
	wake   chan struct{}

	mu       sync.Mutex
	queue    []*ordopb.Result
	inflight int           // calls handed to the host and not yet answered
	sending  bool          // the sender holds results it has not sent yet
	closed   bool          // the stream ended: results are dropped
	changed  chan struct{} // closed, and replaced, when the above change
	parked   bool          // the reader waits for the backlog to shrink
	received int           // calls handed to the host, ever
	sent     int           // results sent, ever
}

func newServerStream(caller peerID) *serverStream {
	return &serverStream{caller: caller, wake: make(chan struct{}, 1), changed: make(chan struct{})}
}

// notify wakes flush's waiters; the caller holds mu.
func (ss *serverStream) notify() {
	close(ss.changed)
	ss.changed = make(chan struct{})
}

func (ss *serverStream) begin() {
	ss.mu.Lock()
	ss.inflight++
	ss.received++
	ss.mu.Unlock()
}

// put queues a result: the host's answer to a call (settles), or the
// transport's own for a call it refused before the host saw it.
func (ss *serverStream) put(r *ordopb.Result, settles bool) {
	if size := proto.Size(r.GetReply()); size > maxEnvelopeBytes {
		r.Reply = &ordopb.Reply{RequestId: r.GetReply().GetRequestId(), Error: actors.ErrorToProto(&actors.Error{
			Code: ordopb.Code_CODE_INTERNAL, Message: fmt.Sprintf("reply of %d bytes exceeds the transport's %d", size, maxEnvelopeBytes)})}
	}
	ss.mu.Lock()
	if settles {
		ss.inflight--
	}
	if ss.closed {
		ss.mu.Unlock()
		return
	}
	ss.queue = append(ss.queue, r)
	ss.mu.Unlock()
	select {
	case ss.wake <- struct{}{}:
	default:
	}
}

// settle records the host's answer to a one-way call, which is sent to
// nobody.
func (ss *serverStream) settle() {
	ss.mu.Lock()
	ss.inflight--
	ss.mu.Unlock()
	select {
	case ss.wake <- struct{}{}: // the sender notifies flush's and the reader's waiters
	default:
	}
}

// send writes queued results in frames until ctx ends or a send fails,
// counting them in t.
func (ss *serverStream) send(ctx context.Context, stream ordopb.Transport_CallsServer, t *transport) {
	frame := &ordopb.ResultFrame{}
	var batch []*ordopb.Result
	for {
		select {
		case <-ss.wake:
		case <-ctx.Done():
			return
		}
		ss.mu.Lock()
		batch, ss.queue = ss.queue, batch[:0]
		ss.sending = len(batch) > 0
		ss.mu.Unlock()
		for len(batch) > 0 {
			n, size := 0, 0
			for n < len(batch) && (n == 0 || size < frameBytes) {
				size += proto.Size(batch[n])
				n++
			}
			frame.Results = batch[:n]
			if err := stream.Send(frame); err != nil {
				return // the receive side sees the broken stream too
			}
			t.results.Add(uint64(n))
			t.resultFrames.Add(1)
			ss.mu.Lock()
			ss.sent += n
			ss.mu.Unlock()
			clear(batch[:n])
			batch = batch[n:]
		}
		frame.Results = nil
		ss.mu.Lock()
		ss.sending = false
		ss.notify()
		ss.mu.Unlock()
	}
}

// waitBacklog waits until the stream owes fewer than max results (calls
// with the host plus results not yet sent); false if done closed first.
func (ss *serverStream) waitBacklog(max int, done <-chan struct{}) bool {
	for {
		ss.mu.Lock()
		ok := ss.closed || ss.inflight+len(ss.queue) < max
		ss.parked = !ok
		changed := ss.changed
		ss.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-changed:
		case <-done:
			return false
		}
	}
}

// flush waits until every call handed to the host is answered and every
// result sent, or until deadline (zero: none) or done.
func (ss *serverStream) flush(deadline time.Time, done <-chan struct{}) {
	var timeout <-chan time.Time
	if !deadline.IsZero() {
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		timeout = t.C
	}
	for {
		ss.mu.Lock()
		idle := ss.closed || (ss.inflight == 0 && len(ss.queue) == 0 && !ss.sending)
		changed := ss.changed
		ss.mu.Unlock()
		if idle {
			return
		}
		select {
		case <-changed:
		case <-timeout:
			return
		case <-done:
			return
		}
	}
}

// close drops whatever is still queued; later results are dropped.
func (ss *serverStream) close() {
	ss.mu.Lock()
	ss.closed = true
	ss.queue = nil
	ss.notify()
	ss.mu.Unlock()
}
