package actors

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ordo-actors/ordo/internal/configerr"
	"github.com/ordo-actors/ordo/persistence"
	"github.com/ordo-actors/ordo/proto/ordopb"
)

// Sentinels for the wire error codes. An error returned by a call matches
// the sentinel of its code with errors.Is, on whatever node it arose.
var (
	// ErrUnknownKind: the target kind is not registered where the call landed.
	ErrUnknownKind = errors.New("actors: unknown kind")
	// ErrNotHere: the node does not own the target's shard (retryable).
	ErrNotHere = errors.New("actors: shard not owned here")
	// ErrFenced: the shard's epoch moved on (retryable at the new owner).
	// It is persistence.ErrFenced, so store and wire errors match alike.
	ErrFenced = persistence.ErrFenced
	// ErrDeadline: the call's deadline passed. It also matches
	// context.DeadlineExceeded.
	ErrDeadline = errors.New("actors: deadline exceeded")
	// ErrHandler: the entity's handler returned an error (see Error.HandlerCode).
	ErrHandler = errors.New("actors: handler error")
	// ErrBadRequest: the request was malformed.
	ErrBadRequest = errors.New("actors: bad request")
	// ErrUnavailable: the node could not serve the call now (retryable).
	ErrUnavailable = errors.New("actors: unavailable")
	// ErrInternal: a bug or panic on the serving side.
	ErrInternal = errors.New("actors: internal error")
	// ErrClosed: the host is shut down.
	ErrClosed = errors.New("actors: host closed")
	// ErrTooLarge: a size limit was exceeded: the request's payload
	// (HostConfig.MaxPayloadBytes), or the entity's state with its recent
	// replies as the request would leave it (HostConfig.MaxStateBytes), or
	// the store refused the entity's record as too large. Nothing of the
	// request was applied. An error of this code matches ErrBadRequest too:
	// the same request never succeeds as is.
	ErrTooLarge = errors.New("actors: too large")
	// ErrSenderGone: an entity's outgoing message was given up because the
	// sender's shard ownership ended or its node's lease is not valid
	// (Sender); the shard's next owner carries the work on.
	ErrSenderGone = errors.New("actors: sender no longer owns its shard")
	// ErrInvalidConfig is wrapped by every error of HostConfig.Validate
	// and FollowConfig.Validate (and of NewHost and Follow, which call
	// them).
	ErrInvalidConfig = errors.New("actors: invalid config")
	// ErrPermissionDenied: the caller may not send this request: an
	// external client (or an unauthenticated caller) sent a message type
	// its target kind declares internal (Internal). Nothing was read or
	// written. Not retryable.
	ErrPermissionDenied = errors.New("actors: permission denied")
)

// Error is an error that can cross the wire. It matches the sentinel of its
// Code with errors.Is.
type Error struct {
	Code ordopb.Code
	// HandlerCode is the application's code of a CODE_HANDLER error, such
	// as "insufficient_funds".
	HandlerCode string
	Message     string
	// RetryAfter is an overloaded node's hint on a CODE_UNAVAILABLE error:
	// the caller should not retry sooner (see RetryAfter). 0: no hint.
	RetryAfter time.Duration
}

// HandlerError returns the error a handler returns to reject a request with
// an application code. The code and message reach the caller unchanged, and
// the rejection is recorded for deduplication like any reply.
func HandlerError(code, format string, args ...any) *Error {
	return &Error{Code: ordopb.Code_CODE_HANDLER, HandlerCode: code, Message: fmt.Sprintf(format, args...)}
}

// Unavailable returns the error a handler returns to refuse a request
// for now, when it cannot answer yet and a later attempt may: the caller
// sees a retryable ErrUnavailable (with retryAfter as its RetryAfter
// hint, 0 for none) and retries with the same request ID, as it retries
// an overloaded node. Nothing of the run is kept or recorded for
// deduplication, so the retry runs the handler again. (A handler that
// returns any retryable *Error, such as one a nested call gave it, is
// treated the same: a recorded retryable answer would be the answer to
// every retry.)
func Unavailable(retryAfter time.Duration, format string, args ...any) *Error {
	return &Error{Code: ordopb.Code_CODE_UNAVAILABLE, Message: fmt.Sprintf(format, args...), RetryAfter: max(retryAfter, 0)}
}

func (e *Error) Error() string {
	if e.Code == ordopb.Code_CODE_HANDLER && e.HandlerCode != "" {
		return fmt.Sprintf("%s: %s: %s", sentinelOf(e.Code), e.HandlerCode, e.Message)
	}
	if e.Message == "" {
		return sentinelOf(e.Code).Error()
	}
	return fmt.Sprintf("%s: %s", sentinelOf(e.Code), e.Message)
}

// Is matches the sentinel of e's code (and context.DeadlineExceeded for
// CODE_DEADLINE, ErrBadRequest for CODE_TOO_LARGE).
func (e *Error) Is(target error) bool {
	switch {
	case e.Code == ordopb.Code_CODE_DEADLINE && target == context.DeadlineExceeded,
		e.Code == ordopb.Code_CODE_TOO_LARGE && target == ErrBadRequest:
		return true
	}
	return target == sentinelOf(e.Code)
}

// RetryAfter returns the retry-after hint err carries (an overloaded
// node's refusal: a full mailbox, HostConfig.MaxMailbox, or too many calls
// in flight, HostConfig.MaxInflight), or 0. A caller that retries waits
// at least this long; cluster's router and entities' outgoing messages do.
func RetryAfter(err error) time.Duration {
	var e *Error
	if errors.As(err, &e) && e.RetryAfter > 0 {
		return e.RetryAfter
	}
	return 0
}

// Retryable reports whether a call that failed with err may succeed if it
// is made again, later or at another node, with the same request ID (which
// keeps it applied at most once). Per code:
//
//	code               Retryable  why
//	NOT_HERE           yes        the shard is owned elsewhere, moving, or not yet owned
//	FENCED             yes        a newer owner took the shard; retry reaches it
//	UNAVAILABLE        yes        overload (see RetryAfter), a failed write, lease not valid, host closed
//	DEADLINE           no         the caller's deadline passed; the outcome is unknown
//	HANDLER            no         the handler's answer, recorded: a retry gets it again
//	BAD_REQUEST        no         the request is malformed; it never succeeds
//	TOO_LARGE          no         a size limit was exceeded; nothing was applied
//	UNKNOWN_KIND       no         the kind is not registered; it never succeeds
//	PERMISSION_DENIED  no         the caller may not send this message; it never succeeds from it
//	INTERNAL           no         a bug on the serving side
//
// ErrDeadline is not Retryable for the caller whose deadline it was, yet
// its outcome is unknown, so a new call with a new deadline must reuse the
// request ID. An entity's outgoing messages do exactly that: each attempt
// has its own deadline, and RetryPolicy retries ErrDeadline too.
func Retryable(err error) bool {
	return errors.Is(err, ErrNotHere) || errors.Is(err, ErrFenced) || errors.Is(err, ErrUnavailable)
}

func sentinelOf(c ordopb.Code) error {
	switch c {
	case ordopb.Code_CODE_UNKNOWN_KIND:
		return ErrUnknownKind
	case ordopb.Code_CODE_NOT_HERE:
		return ErrNotHere
	case ordopb.Code_CODE_FENCED:
		return ErrFenced
	case ordopb.Code_CODE_DEADLINE:
		return ErrDeadline
	case ordopb.Code_CODE_HANDLER:
		return ErrHandler
	case ordopb.Code_CODE_BAD_REQUEST:
		return ErrBadRequest
	case ordopb.Code_CODE_UNAVAILABLE:
		return ErrUnavailable
	case ordopb.Code_CODE_TOO_LARGE:
		return ErrTooLarge
	case ordopb.Code_CODE_PERMISSION_DENIED:
		return ErrPermissionDenied
	default:
		return ErrInternal
	}
}

// ErrorToProto converts err to its wire form, keeping its code: an *Error
// keeps everything; a sentinel or an error wrapping one keeps the sentinel's
// code; context errors become CODE_DEADLINE (DeadlineExceeded) or
// CODE_UNAVAILABLE (Canceled); persistence.ErrTooLarge becomes
// CODE_TOO_LARGE; anything else becomes CODE_INTERNAL.
func ErrorToProto(err error) *ordopb.Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return &ordopb.Error{Code: e.Code, HandlerCode: e.HandlerCode, Message: e.Message,
			RetryAfterMillis: e.RetryAfter.Milliseconds()}
	}
	code := ordopb.Code_CODE_INTERNAL
	switch {
	case errors.Is(err, ErrUnknownKind):
		code = ordopb.Code_CODE_UNKNOWN_KIND
	case errors.Is(err, ErrNotHere):
		code = ordopb.Code_CODE_NOT_HERE
	case errors.Is(err, ErrFenced):
		code = ordopb.Code_CODE_FENCED
	case errors.Is(err, ErrDeadline), errors.Is(err, context.DeadlineExceeded):
		code = ordopb.Code_CODE_DEADLINE
	case errors.Is(err, ErrHandler):
		code = ordopb.Code_CODE_HANDLER
	case errors.Is(err, ErrTooLarge), errors.Is(err, persistence.ErrTooLarge):
		code = ordopb.Code_CODE_TOO_LARGE
	case errors.Is(err, ErrPermissionDenied):
		code = ordopb.Code_CODE_PERMISSION_DENIED
	case errors.Is(err, ErrBadRequest), errors.Is(err, persistence.ErrInvalid):
		code = ordopb.Code_CODE_BAD_REQUEST
	case errors.Is(err, ErrUnavailable), errors.Is(err, context.Canceled), errors.Is(err, ErrClosed):
		code = ordopb.Code_CODE_UNAVAILABLE
	}
	return &ordopb.Error{Code: code, Message: err.Error()}
}

// ErrorFromProto converts a wire error back to an *Error (nil for nil or
// CODE_OK).
func ErrorFromProto(p *ordopb.Error) error {
	if p == nil || p.GetCode() == ordopb.Code_CODE_OK {
		return nil
	}
	e := &Error{Code: p.GetCode(), HandlerCode: p.GetHandlerCode(), Message: p.GetMessage()}
	if ms := p.GetRetryAfterMillis(); ms > 0 {
		e.RetryAfter = time.Duration(min(ms, maxRetryAfterMillis)) * time.Millisecond
	}
	return e
}

// maxRetryAfterMillis caps a retry-after hint from the wire (an hour): a
// peer cannot make a caller wait for ever.
const maxRetryAfterMillis = 3600_000

func errf(code ordopb.Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// invalidConfig makes a Validate error: err, also matching ErrInvalidConfig.
func invalidConfig(err error) error { return configerr.Wrap(ErrInvalidConfig, err) }
