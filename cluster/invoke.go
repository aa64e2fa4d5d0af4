package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/placement"
	"github.com/ordo-actors/ordo/proto/ordopb"
	"go.opentelemetry.io/otel/trace"
)

// RetryPolicy says how calls are retried: exponential backoff with full
// jitter (a random wait in [0, min(Max, Base·2^n)], n the failed attempts
// since the shard's owner last changed), cut short when the owner
// changes, or longer when the owner answered with a retry-after hint (an
// overloaded node, see actors.RetryAfter), every attempt bounded by
// AttemptTimeout, until the caller's context ends or MaxAttempts attempts
// were made.
type RetryPolicy struct {
	// Base is the first backoff bound. Default 5ms.
	Base time.Duration
	// Max caps the backoff bound. Default 500ms.
	Max time.Duration
	// AttemptTimeout bounds one attempt (a slow owner is retried, with the
	// same request ID). Default 5s.
	AttemptTimeout time.Duration
	// MaxAttempts bounds the attempts of one call that reach a node (an
	// owner in the placement table), the first included, whatever its
	// context allows; the call then fails with the last retryable answer
	// (or ErrUnavailable). Waiting for a shard that has no owner yet (a
	// failover, a start) sends nothing and is bounded by the context only.
	// 0: until the context ends. Default 64: about 15s of backoff (250ms
	// on average once at Max) against owners that refuse or cannot be
	// reached, several times a failover (a 3s lease and gossip's
	// detection), yet a finite load from a caller whose context never
	// ends.
	MaxAttempts int
}

// DefaultRetryPolicy returns the defaults.
func DefaultRetryPolicy() RetryPolicy {
	return RetryPolicy{Base: 5 * time.Millisecond, Max: 500 * time.Millisecond, AttemptTimeout: 5 * time.Second, MaxAttempts: 64}
}

func (p RetryPolicy) validate() error {
	if p.Base <= 0 || p.Max < p.Base || p.AttemptTimeout <= 0 || p.MaxAttempts < 0 {
		return fmt.Errorf("cluster: invalid retry policy %+v: want 0 < Base <= Max, AttemptTimeout > 0 and MaxAttempts >= 0", p)
	}
	return nil
}

// next returns the wait before the attempt that follows attempt (from 0),
// which failed with err, sent attempts having reached a node so far: the
// backoff, or err's retry-after hint when longer. It reports false when
// the policy allows no further attempt.
func (p RetryPolicy) next(attempt, sent int, err error) (time.Duration, bool) {
	if p.MaxAttempts > 0 && sent >= p.MaxAttempts {
		return 0, false
	}
	return max(p.backoff(attempt), actors.RetryAfter(err)), true
}

// errNoOwner marks an attempt that found no owner for the shard: nothing
// was sent.
var errNoOwner = errors.New("no owner for shard")

func (p RetryPolicy) backoff(attempt int) time.Duration {
	bound := p.Max
	if attempt < 30 {
		if b := p.Base << attempt; b < bound {
			bound = b
		}
	}
	return rand.N(bound + 1)
}

// router finds shard owners in the placement table and delivers envelopes
// to them: to the local host when this node owns the shard, over the
// transport otherwise. It retries NotHere, fenced, unavailable and
// unreachable outcomes as its RetryPolicy allows, always with the same
// envelope (so the same request ID). Safe for concurrent use.
type router struct {
	self    string       // "" in a client
	local   *actors.Host // nil in a client
	table   *placement.Table
	tr      *transport
	shards  uint32
	policy  RetryPolicy
	metrics *metrics
	log     *slog.Logger
	kinds   map[string]bool // the kinds the local host has; nil in a client
	tracer  trace.Tracer    // nil: tracing off (trace.go)
}

// hosts reports whether the local host has kind.
func (r *router) hosts(kind string) bool { return r.kinds[kind] }

// missingKind is the answer to a call of kind routed to node, which does
// not host it: a retryable error while some registered node hosts the kind
// (a rolling deploy that adds it: the shard's owner has it once upgraded,
// or the shard moves to a node that has it), the permanent unknown-kind
// error when none does. It returns nil when some node's registration does
// not say what it hosts: the call is then sent, and its owner decides.
func (r *router) missingKind(node, kind string) *actors.Error {
	for _, info := range r.table.Nodes() {
		if info.Kinds == nil {
			return nil
		}
		if slices.Contains(info.Kinds, kind) {
			return &actors.Error{Code: ordopb.Code_CODE_UNAVAILABLE,
				Message: fmt.Sprintf("kind %q is not hosted by node %s, which owns its shard; node %s hosts it", kind, node, info.ID)}
		}
	}
	return &actors.Error{Code: ordopb.Code_CODE_UNKNOWN_KIND, Message: fmt.Sprintf("kind %q: no node of the cluster hosts it", kind)}
}

// Invoke implements actors.Invoker.
func (r *router) Invoke(ctx context.Context, env *ordopb.Envelope) (*ordopb.Reply, error) {
	return r.send(ctx, env, nil)
}

// send is Invoke of a message from an entity (from) or, with from nil, of
// a caller.
func (r *router) send(ctx context.Context, env *ordopb.Envelope, from actors.Sender) (*ordopb.Reply, error) {
	if r.tracer != nil {
		return r.tracedInvoke(ctx, env, from)
	}
	return r.invoke(ctx, env, from)
}

func (r *router) invoke(ctx context.Context, env *ordopb.Envelope, from actors.Sender) (*ordopb.Reply, error) {
	if env.GetOneWay() {
		return &ordopb.Reply{RequestId: env.GetRequestId(), Error: actors.ErrorToProto(&actors.Error{Code: ordopb.Code_CODE_BAD_REQUEST,
			Message: "a one-way envelope has no reply to wait for: an entity sends it with Send and AtMostOnce"})}, nil
	}
	if d, ok := ctx.Deadline(); ok && env.GetDeadlineUnixNano() == 0 {
		env.DeadlineUnixNano = d.UnixNano()
	}
	ref, err := actors.RefFromProto(env.GetTarget())
	if err != nil {
		return &ordopb.Reply{RequestId: env.GetRequestId(), Error: actors.ErrorToProto(
			&actors.Error{Code: ordopb.Code_CODE_BAD_REQUEST, Message: err.Error()})}, nil
	}
	shard := actors.ShardOf(ref, r.shards)
	start := time.Now()
	var last error
	sent := 0 // attempts that reached a node
	var streak failStreak
	for attempt := 0; ; attempt++ {
		// An entity's message is not sent while its node's lease is not
		// valid (from.Current): it waits, without an attempt, until the
		// lease is valid again or its ctx ends, as it does when the
		// sender's shard ownership ends.
		var err error
		var rep *ordopb.Reply
		if from == nil || from.Current() {
			if r.tracer != nil {
				rep, err = r.tracedAttempt(ctx, attempt, shard, env)
			} else {
				rep, err = r.attempt(ctx, shard, env)
			}
			if err == nil && !actors.Retryable(actors.ErrorFromProto(rep.GetError())) {
				r.metrics.observeCall(ref.Kind, start, rep.GetError())
				return rep, nil
			}
			if err == nil {
				err = actors.ErrorFromProto(rep.GetError())
			}
		} else {
			err = actors.ErrSenderGone
		}
		if !errors.Is(err, errNoOwner) && !errors.Is(err, actors.ErrSenderGone) {
			sent++
		}
		last = err
		r.log.Debug("call attempt failed", "entity", ref, "shard", shard, "attempt", attempt, "err", err)
		w := r.watch(shard)
		wait, more := r.policy.next(streak.failed(w.owner, w.owned), sent, err)
		if !more {
			r.metrics.observeCall(ref.Kind, start, actors.ErrorToProto(last))
			if rep != nil {
				return rep, nil
			}
			return nil, fmt.Errorf("%w: cluster: call to %s gave up after %d attempts (RetryPolicy.MaxAttempts): %v",
				actors.ErrUnavailable, ref, sent, last)
		}
		if attempt > 0 {
			r.metrics.retries.Inc()
		}
		env = actors.ForRetry(env)
		// Wait for the backoff, or less if the shard's owner changes.
		t := time.NewTimer(wait)
	waiting:
		for {
			select {
			case <-ctx.Done():
				t.Stop()
				r.metrics.observeCall(ref.Kind, start, actors.ErrorToProto(ctx.Err()))
				return nil, fmt.Errorf("cluster: call to %s gave up after %d attempts: %w (last: %v)", ref, attempt+1, ctx.Err(), last)
			case <-w.changed:
				if !w.moved() {
					continue
				}
				t.Stop()
			case <-t.C:
			}
			break waiting
		}
	}
}

// attempt makes one try: a reply (possibly a retryable error reply), or an
// error when the owner is unknown or unreachable. A remote attempt is
// abandoned as soon as the table shows another owner for the shard: a
// request in flight to a node that crashed or handed the shard off may
// never be answered, and waiting for AttemptTimeout would stall failover.
func (r *router) attempt(ctx context.Context, shard uint32, env *ordopb.Envelope) (*ordopb.Reply, error) {
	w := r.watch(shard)
	owner, ok := w.owner, w.owned
	if !ok {
		return nil, fmt.Errorf("%w: %w %d", actors.ErrNotHere, errNoOwner, shard)
	}
	kind := env.GetTarget().GetKind()
	if owner.NodeID == r.self && r.local != nil && !r.hosts(kind) {
		if err := r.missingKind(r.self, kind); err != nil {
			return &ordopb.Reply{RequestId: env.GetRequestId(), Error: actors.ErrorToProto(err)}, nil
		}
	}
	if owner.NodeID == r.self && r.local != nil {
		actx, cancel := context.WithTimeout(ctx, r.policy.AttemptTimeout)
		defer cancel()
		rep, err := r.local.Invoke(actx, env)
		if err != nil && ctx.Err() == nil {
			return nil, fmt.Errorf("%w: local attempt: %v", actors.ErrUnavailable, err)
		}
		return rep, err
	}
	info, ok := r.table.Node(owner.NodeID)
	if !ok || info.RemoteAddr == "" {
		return nil, fmt.Errorf("%w: owner %s of shard %d not registered", errUnreachable, owner.NodeID, shard)
	}
	if info.Kinds != nil && !slices.Contains(info.Kinds, kind) {
		if err := r.missingKind(owner.NodeID, kind); err != nil {
			return &ordopb.Reply{RequestId: env.GetRequestId(), Error: actors.ErrorToProto(err)}, nil
		}
	}
	bound := attemptTimers.Get().(*time.Timer)
	bound.Reset(r.policy.AttemptTimeout)
	rep, err := r.tr.requestWhile(ctx, info.RemoteAddr, env, &w, bound.C)
	bound.Stop() // no value is received from bound.C after this (Go 1.23 timers)
	attemptTimers.Put(bound)
	switch {
	case err == nil:
		return rep, nil
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case errors.Is(err, errAttemptTimeout):
		return nil, fmt.Errorf("%w: attempt timed out after %v", errUnreachable, r.policy.AttemptTimeout)
	case errors.Is(err, errOwnerMoved):
		return nil, fmt.Errorf("%w: shard %d moved from %s while the call was in flight", errUnreachable, shard, owner.NodeID)
	case errors.Is(err, errUnreachable):
		return nil, err
	default:
		return nil, fmt.Errorf("%w: %v", errUnreachable, err)
	}
}

// attemptTimers bound remote attempts: a timer is reset for an attempt
// and stopped after it, where context.WithTimeout would make a context,
// its timer, its Done channel and an entry in the caller's context per
// attempt.
var attemptTimers = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}}

// failStreak counts a call's failed attempts since its shard's owner last
// changed, which its backoff grows with: a new owner has not been asked
// yet, and one still taking the shard over (it holds the lock, and fences
// before it serves) answers within a few short backoffs, where the bound
// the earlier owner's refusals reached would make the caller sleep up to
// RetryPolicy.Max.
type failStreak struct {
	n     int
	owner placement.Owner // the owner at the last failure
	owned bool
}

// failed records a failure while the table shows owner (owned false: no
// owner) and returns the number of earlier failures of the streak.
func (s *failStreak) failed(owner placement.Owner, owned bool) int {
	if s.n > 0 && (owned != s.owned || owner != s.owner) {
		s.n = 0
	}
	s.owner, s.owned = owner, owned
	s.n++
	return s.n - 1
}

// ownerWatch follows a shard's owner in the placement table over one wait
// (an attempt in flight, a backoff): changed is closed at the table's next
// change, and moved then says whether the shard's owner is another now.
type ownerWatch struct {
	table   *placement.Table
	shard   uint32
	owner   placement.Owner // when the watch began
	owned   bool            // the shard had an owner then
	changed <-chan struct{}
}

// watch starts following shard's owner.
func (r *router) watch(shard uint32) ownerWatch {
	w := ownerWatch{table: r.table, shard: shard, changed: r.table.Changed()}
	w.owner, w.owned = r.table.Lookup(shard) // after Changed: no change is missed
	return w
}

// moved reports whether the shard's owner differs from the watch's first;
// it follows the table's next change from then on.
func (w *ownerWatch) moved() bool {
	w.changed = w.table.Changed()
	now, ok := w.table.Lookup(w.shard)
	return ok != w.owned || now != w.owner
}

// Route implements actors.Router for entity-to-entity messages: it runs
// Invoke on its own goroutine and reports the outcome through done. A
// one-way message (actors.AtMostOnce) is sent at once, on the caller's
// goroutine, and done(nil) follows: nothing waits for it (sendOneWay).
func (r *router) Route(ctx context.Context, env *ordopb.Envelope, from actors.Sender, done func(*ordopb.Reply)) {
	if env.GetOneWay() {
		if err := r.sendOneWay(env, from); err != nil {
			r.metrics.oneWayDropped.Inc()
			r.log.Debug("one-way message dropped", "target", env.GetTarget(), "request", env.GetRequestId(), "err", err)
		} else {
			r.metrics.oneWaySent.Inc()
		}
		done(nil)
		return
	}
	go func() {
		rep, err := r.send(ctx, env, from)
		if err != nil {
			rep = &ordopb.Reply{RequestId: env.GetRequestId(), Error: actors.ErrorToProto(
				&actors.Error{Code: ordopb.Code_CODE_UNAVAILABLE, Message: err.Error()})}
		}
		done(rep)
	}()
}

// sendOneWay makes a one-way message's only attempt without blocking: to
// the local host, or queued on the owner's stream, which sends no result
// for it. It reports why the message was not sent, if it was not (the
// sender may not send, the shard has no owner or the owner no address,
// the envelope is too large, the stream to the owner has failed); a
// message sent may still be lost on the way.
func (r *router) sendOneWay(env *ordopb.Envelope, from actors.Sender) error {
	if from != nil && !from.Current() {
		return actors.ErrSenderGone
	}
	ref, err := actors.RefFromProto(env.GetTarget())
	if err != nil {
		return err
	}
	shard := actors.ShardOf(ref, r.shards)
	owner, ok := r.table.Lookup(shard)
	if !ok {
		return fmt.Errorf("%w %d", errNoOwner, shard)
	}
	if owner.NodeID == r.self && r.local != nil {
		if !r.hosts(ref.Kind) {
			return r.missingKind(r.self, ref.Kind)
		}
		r.local.Submit(env, func(*ordopb.Reply) {})
		return nil
	}
	info, ok := r.table.Node(owner.NodeID)
	if !ok || info.RemoteAddr == "" {
		return fmt.Errorf("%w: owner %s of shard %d not registered", errUnreachable, owner.NodeID, shard)
	}
	return r.tr.sendOneWay(info.RemoteAddr, env)
}
