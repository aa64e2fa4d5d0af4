package placement

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Session is one etcd lease kept alive by this process, with a local
// validity deadline.
//
// The session runs its own keepalive loop with KeepAliveOnce every
// KeepAliveInterval instead of clientv3's KeepAlive stream, because the
// deadline needs the send time of each acknowledged request: the etcd
// leader extends the lease to (time it received the request + TTL), which is
// never earlier than (time we sent it + TTL), so
//
//	deadline = send time of the last acknowledged keepalive + TTL - margin
//
// measured on the monotonic clock never outlives the lease in etcd, as long
// as the clocks of this process and of the etcd leader run at rates that
// differ by less than margin over one TTL. KeepAlive's stream hides the
// send time and answers only the latest request.
//
// The session ends, and Done is closed, when the lease is reported gone
// (revoked or expired), when the deadline passes without a fresh
// acknowledgement, or when Close is called. It never renews a lease it has
// lost and never grants a new one: whoever owns the session opens another.
//
// All methods are safe for concurrent use.
type Session struct {
	client   *clientv3.Client
	id       clientv3.LeaseID
	ttl      time.Duration
	margin   time.Duration
	interval time.Duration
	// suspended, when set, returns non-nil while keepalives are suspended
	// (Agent.suspended: Faults.KeepalivesSuspended, or a crash).
	suspended func() <-chan struct{}

	deadline atomic.Int64 // nanoseconds since epochBase, monotonic

	mu     sync.Mutex
	err    error
	done   chan struct{}
	cancel context.CancelFunc
	exited chan struct{}
}

// epochBase anchors monotonic deadlines: time.Since(epochBase) reads the
// monotonic clock.
var epochBase = time.Now()

func monoNow() int64 { return int64(time.Since(epochBase)) }

// NewSession grants a lease of ttl (whole seconds) and starts keeping it
// alive every interval. margin is subtracted from the TTL for the local
// deadline. The session's goroutine ends when the session ends; call
// Close to end it early.
func NewSession(ctx context.Context, client *clientv3.Client, ttl, margin, interval time.Duration) (*Session, error) {
	return newSession(ctx, client, ttl, margin, interval, nil)
}

// newSession is NewSession whose loop skips its keepalives while
// suspended, when set, returns non-nil.
func newSession(ctx context.Context, client *clientv3.Client, ttl, margin, interval time.Duration, suspended func() <-chan struct{}) (*Session, error) {
	if ttl < time.Second || margin <= 0 || margin >= ttl || interval <= 0 || interval >= ttl-margin {
		return nil, fmt.Errorf("%w: session ttl %v, margin %v, interval %v", ErrInvalidConfig, ttl, margin, interval)
	}
	sent := monoNow()
	resp, err := client.Grant(ctx, int64(ttl/time.Second))
	if err != nil {
		return nil, fmt.Errorf("placement: grant lease: %w", err)
	}
	granted := time.Duration(resp.TTL) * time.Second
	s := &Session{
		client:    client,
		id:        resp.ID,
		ttl:       granted,
		margin:    margin,
		interval:  interval,
		suspended: suspended,
		done:      make(chan struct{}),
		exited:    make(chan struct{}),
	}
	s.deadline.Store(sent + int64(granted-margin))
	// The loop's context is detached from ctx on purpose: ctx bounds the
	// grant only; the session lives until it ends or Close.
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel = cancel
	go s.loop(lctx)
	return s, nil
}

// ID returns the lease ID.
func (s *Session) ID() clientv3.LeaseID { return s.id }

// TTL returns the TTL granted by etcd.
func (s *Session) TTL() time.Duration { return s.ttl }

// Valid reports whether the session has not ended and its validity
// deadline has not passed. A host checks it before letting a reply out.
func (s *Session) Valid() bool {
	select {
	case <-s.done:
		return false
	default:
	}
	return monoNow() < s.deadline.Load()
}

// Deadline returns the current validity deadline (wall time carrying a
// monotonic reading). It only moves forward while the session lives.
func (s *Session) Deadline() time.Time {
	return epochBase.Add(time.Duration(s.deadline.Load()))
}

// Done is closed when the session ends. Err then tells why.
func (s *Session) Done() <-chan struct{} { return s.done }

// Err returns nil while the session lives, then ErrLeaseLost,
// ErrSessionExpired or ErrSessionClosed (possibly wrapped).
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

func (s *Session) end(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return
	}
	s.err = err
	close(s.done)
}

// Close ends the session's keepalive loop and waits for it. It does not
// revoke the lease (see Revoke). Idempotent.
func (s *Session) Close() {
	s.end(ErrSessionClosed)
	s.cancel()
	<-s.exited
}

// Revoke closes the session and revokes its lease, deleting every key bound
// to it.
func (s *Session) Revoke(ctx context.Context) error {
	s.Close()
	if _, err := s.client.Revoke(ctx, s.id); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return fmt.Errorf("placement: revoke lease %x: %w", int64(s.id), err)
	}
	return nil
}

func (s *Session) loop(ctx context.Context) {
	defer close(s.exited)
	defer s.cancel()
	tick := time.NewTicker(s.interval)
	defer tick.Stop()
	expire := time.NewTimer(time.Duration(s.deadline.Load() - monoNow()))
	defer expire.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.done:
			return
		case <-expire.C:
			if monoNow() >= s.deadline.Load() {
				s.end(ErrSessionExpired)
				return
			}
			expire.Reset(time.Duration(s.deadline.Load() - monoNow()))
			continue
		case <-tick.C:
		}
		if s.suspended != nil && s.suspended() != nil {
			continue
		}
		sent := monoNow()
		dl := s.deadline.Load()
		if until := sent + int64(s.interval); until < dl {
			dl = until
		}
		rctx, cancel := context.WithTimeout(ctx, time.Duration(dl-sent))
		resp, err := s.client.KeepAliveOnce(rctx, s.id)
		cancel()
		switch {
		case err == nil && monoNow() >= s.deadline.Load():
			// Acknowledged too late: the deadline already passed and the
			// node may have stopped serving. Never resurrect a session.
			s.end(ErrSessionExpired)
			return
		case err == nil:
			nd := sent + int64(time.Duration(resp.TTL)*time.Second-s.margin)
			if nd > s.deadline.Load() {
				s.deadline.Store(nd)
			}
			if !expire.Stop() {
				select {
				case <-expire.C:
				default:
				}
			}
			expire.Reset(time.Duration(s.deadline.Load() - monoNow()))
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			s.end(fmt.Errorf("%w: lease %x not found", ErrLeaseLost, int64(s.id)))
			return
		default:
			// Transient (no leader, connection lost, request timeout): try
			// again at the next tick; the deadline timer ends the session
			// if no acknowledgement comes in time.
		}
	}
}
