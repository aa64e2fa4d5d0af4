package actors

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"time"
)

// RetryPolicy says how an entity's outgoing messages (Request, Send) are
// retried when an attempt fails with a retryable error: Retryable(err),
// or ErrDeadline (each attempt has its own deadline,
// HostConfig.RequestTimeout, so a timed-out attempt is retried like an
// unreachable owner). Permanent errors (ErrHandler, ErrBadRequest,
// ErrUnknownKind, ErrInternal) end the request at once. Every attempt
// carries the same envelope, so the same request ID: the receiver applies
// the message at most once however often it is retried.
//
// Before attempt n+1 the sender waits a random time in
// [(1-Jitter)·b, b], where b = min(Max, Initial·Multiplier^(n-1)).
// Retries stop after MaxAttempts attempts, or when the next attempt would
// start more than MaxElapsed after the first (a zero limit is no limit;
// at least one must be set), or when the sender's shard ownership ends.
//
// The backoff is kept per target and request ID for the entity's
// activation: a request sent again after it failed (a saga resending a
// step from its continuation) waits as its retries would have, so no
// sequence of sends of one request can become a busy loop. With
// Jitter < 1, any two attempts of one request are at least
// (1-Jitter)·Initial apart.
//
// In a cluster, the node's router also retries within one attempt (see
// cluster.RetryPolicy): an attempt ends when the owner answered or the
// attempt's deadline passed. RetryPolicy is a value; the zero value is
// invalid.
type RetryPolicy struct {
	// Initial is the backoff bound before the first retry. Must be
	// positive.
	Initial time.Duration
	// Max caps the backoff bound. Must be at least Initial.
	Max time.Duration
	// Multiplier is the growth of the bound per attempt. Must be at least 1.
	Multiplier float64
	// Jitter is the fraction of the bound drawn at random, in [0, 1]: 0
	// waits exactly the bound, 1 is "full jitter" (anywhere in [0, b]).
	Jitter float64
	// MaxAttempts bounds the attempts of one request, the first included
	// (1: no retry). 0: no bound, MaxElapsed must then be set.
	MaxAttempts int
	// MaxElapsed bounds the time from the first attempt to the start of
	// the last. 0: no bound, MaxAttempts must then be set.
	MaxElapsed time.Duration
}

// DefaultRetryPolicy returns the default policy of HostConfig.Retry: 8
// attempts, backoff from 20ms doubling up to 2s, half of it jittered.
func DefaultRetryPolicy() RetryPolicy {
	return RetryPolicy{
		Initial:     20 * time.Millisecond,
		Max:         2 * time.Second,
		Multiplier:  2,
		Jitter:      0.5,
		MaxAttempts: 8,
	}
}

// Validate reports the first invalid field.
func (p RetryPolicy) Validate() error {
	switch {
	case p.Initial <= 0:
		return errors.New("actors: retry policy: Initial must be positive")
	case p.Max < p.Initial:
		return errors.New("actors: retry policy: Max must be at least Initial")
	case !(p.Multiplier >= 1) || math.IsInf(p.Multiplier, 0):
		return errors.New("actors: retry policy: Multiplier must be at least 1")
	case !(p.Jitter >= 0 && p.Jitter <= 1):
		return errors.New("actors: retry policy: Jitter must be in [0, 1]")
	case p.MaxAttempts < 0 || p.MaxElapsed < 0:
		return errors.New("actors: retry policy: MaxAttempts and MaxElapsed must not be negative")
	case p.MaxAttempts == 0 && p.MaxElapsed == 0:
		return errors.New("actors: retry policy: set MaxAttempts or MaxElapsed (retries must end)")
	}
	return nil
}

// bound returns the backoff bound after n failed attempts (n >= 1).
func (p RetryPolicy) bound(n int) time.Duration {
	b := float64(p.Initial) * math.Pow(p.Multiplier, float64(n-1))
	if b >= float64(p.Max) || math.IsNaN(b) {
		return p.Max
	}
	return time.Duration(b)
}

// backoff draws the wait after n failed attempts.
func (p RetryPolicy) backoff(n int) time.Duration {
	b := p.bound(n)
	if j := time.Duration(p.Jitter * float64(b)); j > 0 {
		b -= rand.N(j + 1)
	}
	return b
}

// allows reports whether a request that made attempts attempts, the first
// at first, may make another one after waiting wait.
func (p RetryPolicy) allows(attempts int, first time.Time, wait time.Duration, now time.Time) bool {
	if p.MaxAttempts > 0 && attempts >= p.MaxAttempts {
		return false
	}
	return p.MaxElapsed <= 0 || now.Add(wait).Sub(first) <= p.MaxElapsed
}

// retryableAttempt reports whether an attempt of an entity's outgoing
// message that failed with err is worth another attempt.
func retryableAttempt(err error) bool {
	return Retryable(err) || errors.Is(err, ErrDeadline)
}

// RequestOption configures one Request or Send. Options are built fresh
// per call.
type RequestOption func(*requestOptions)

type requestOptions struct {
	retry  *RetryPolicy
	md     map[string]string // set on top of the run's metadata
	oneWay bool
	early  bool
}

// AtMostOnce sends a Send's message once, unacknowledged: the receiver
// handles it like any other message (deduplicated by its request ID) but
// sends no reply, and the message is not retried. It is lost if it cannot
// be delivered on its first attempt: the receiver's node is down or
// unreachable, its shard is moving or has no owner, or its host is
// overloaded. What it saves is the reply's trip back (a network message
// when the receiver is on another node) and a run of the sender per
// message.
//
// Use it only for messages whose loss something else repairs, as a
// reminder that sends them again: the bank's Forget, which an account's
// settle reminder asks for again. A Request with AtMostOnce fails with
// ErrBadRequest (it has no reply to wait for), and WithRetry has no
// effect with it.
func AtMostOnce() RequestOption {
	return func(o *requestOptions) { o.oneWay = true }
}

// BeforeDurable sends the message as soon as the run ends, without
// waiting for the state the run wrote (and the entity's earlier writes) to
// be durable, as messages otherwise wait (see Context.Send). The receiver
// may then act on a message whose sender's state is lost: the sender's
// write fails, or its node dies before the write is durable, and the
// entity restarts from its previous durable state as if it had never
// sent it.
//
// Use it only when the receiver's effect is provisional until the sender
// confirms it in a later message, sent the usual way, and the receiver
// can learn, in every case, whether to keep or drop it: the bank's
// transfer holds the credit at its destination while the debit at its
// source becomes durable (Hold, then Release or Cancel), so that the two
// writes are made at the same time rather than one after the other. A
// message to a co-located entity (same shard) leaves at once anyway.
func BeforeDurable() RequestOption {
	return func(o *requestOptions) { o.early = true }
}

// WithRetry makes the message retried with p instead of HostConfig.Retry.
// An invalid p fails the Request with ErrBadRequest (a Send is dropped and
// logged); nothing is sent.
func WithRetry(p RetryPolicy) RequestOption {
	return func(o *requestOptions) { o.retry = &p }
}

// WithOutgoingMetadata sets key to value in the message's metadata, over
// the metadata the run propagates (the request's; see WithMetadata), for
// this message only: a handler that starts a span passes its traceparent
// on this way.
func WithOutgoingMetadata(key, value string) RequestOption {
	return func(o *requestOptions) {
		if o.md == nil {
			o.md = make(map[string]string, 1)
		}
		o.md[key] = value
	}
}

// resolvedOptions are one message's options over the host's defaults.
type resolvedOptions struct {
	policy RetryPolicy
	md     map[string]string // the run's metadata plus overrides
	oneWay bool              // AtMostOnce
	early  bool              // BeforeDurable
}

// resolveRequestOptions applies opts over the host's defaults: the retry
// policy and the metadata (run's metadata plus overrides) of one message.
func resolveRequestOptions(def RetryPolicy, runMD map[string]string, opts []RequestOption) (resolvedOptions, error) {
	if len(opts) == 0 {
		return resolvedOptions{policy: def, md: runMD}, nil
	}
	var o requestOptions
	for _, opt := range opts {
		opt(&o)
	}
	r := resolvedOptions{policy: def, md: runMD, oneWay: o.oneWay, early: o.early}
	if o.retry != nil {
		r.policy = *o.retry
		if err := r.policy.Validate(); err != nil {
			return r, err
		}
	}
	if len(o.md) > 0 {
		r.md = make(map[string]string, len(runMD)+len(o.md))
		maps.Copy(r.md, runMD)
		maps.Copy(r.md, o.md)
		if err := validateMetadata(r.md); err != nil {
			return r, fmt.Errorf("actors: %w", err)
		}
	}
	return r, nil
}
