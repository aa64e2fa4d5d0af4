package actors

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"
	"unicode/utf8"
)

// Limits on the metadata of one call (Envelope.metadata). A call over
// them is refused with ErrBadRequest.
const (
	// MaxMetadataEntries bounds the number of metadata keys of a call.
	MaxMetadataEntries = 64
	// MaxMetadataBytes bounds the bytes of a call's metadata keys and
	// values together.
	MaxMetadataBytes = 16 << 10
)

type metadataKey struct{}

// WithMetadata returns a copy of ctx whose metadata has key set to value.
// Call puts the metadata of its context in the call's envelope; the
// handler sees it in its Context (MetadataFrom(c)), and the messages the
// handler sends (Send, Request) carry it on: a W3C traceparent set by a
// client thus reaches every entity the call leads to. Metadata is not
// part of a request's identity: a retry with other metadata is still
// deduplicated by its request ID. The context's map is never changed in
// place, so contexts may share it.
func WithMetadata(ctx context.Context, key, value string) context.Context {
	old, _ := ctx.Value(metadataKey{}).(map[string]string)
	md := make(map[string]string, len(old)+1)
	maps.Copy(md, old)
	md[key] = value
	return context.WithValue(ctx, metadataKey{}, md)
}

// MetadataFrom returns a copy of ctx's metadata, nil when it has none. In
// a handler, pass its Context: the metadata is the request's (see
// WithMetadata).
func MetadataFrom(ctx context.Context) map[string]string {
	md, _ := ctx.Value(metadataKey{}).(map[string]string)
	if len(md) == 0 {
		return nil
	}
	return maps.Clone(md)
}

// MetadataValue returns the value of key in ctx's metadata.
func MetadataValue(ctx context.Context, key string) (string, bool) {
	md, _ := ctx.Value(metadataKey{}).(map[string]string)
	v, ok := md[key]
	return v, ok
}

// metadataOf returns ctx's metadata map itself (read-only).
func metadataOf(ctx context.Context) map[string]string {
	md, _ := ctx.Value(metadataKey{}).(map[string]string)
	return md
}

// validateMetadata checks md against the limits: non-empty keys, valid
// UTF-8 (a protobuf string), MaxMetadataEntries and MaxMetadataBytes.
func validateMetadata(md map[string]string) error {
	if len(md) > MaxMetadataEntries {
		return fmt.Errorf("%d metadata entries, at most %d allowed", len(md), MaxMetadataEntries)
	}
	size := 0
	for k, v := range md {
		if k == "" {
			return fmt.Errorf("empty metadata key")
		}
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return fmt.Errorf("metadata %q: not valid UTF-8", k)
		}
		size += len(k) + len(v)
	}
	if size > MaxMetadataBytes {
		return fmt.Errorf("%d bytes of metadata, at most %d allowed", size, MaxMetadataBytes)
	}
	return nil
}

// runContext is the context.Context of one run of a handler, hook or
// continuation. The underlying context is built on first use only (a
// handler that never looks at its context costs no timer and no
// registration with the shard's context). Its methods may be called from
// any goroutine while the run lasts: a library the handler passes its
// context to may watch Done from its own goroutines.
type runContext struct {
	// parent is the context of the entity's shard ownership: it ends when
	// the shard is dropped or released or the host shuts down, which
	// includes every way the entity can stop while a run is in progress.
	parent   context.Context
	deadline int64             // Unix nanoseconds; 0: none
	md       map[string]string // read-only
	caller   *Caller           // read-only; nil: no request
	// traced is parent carrying the run's span (HostConfig.Tracer), the
	// base of the underlying context; nil when tracing is off.
	traced context.Context

	mu     sync.Mutex
	ctx    context.Context
	cancel context.CancelFunc
	ended  bool
}

func (r *runContext) context() context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ctx == nil {
		base := r.parent
		if r.traced != nil {
			base = r.traced
		}
		if r.deadline != 0 {
			r.ctx, r.cancel = context.WithDeadline(base, time.Unix(0, r.deadline))
		} else {
			r.ctx, r.cancel = context.WithCancel(base)
		}
		if r.ended {
			r.cancel()
		}
	}
	return r.ctx
}

// end cancels the run's context: the run is over.
func (r *runContext) end() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ended = true
	if r.cancel != nil {
		r.cancel()
	}
}

func (r *runContext) err() error {
	r.mu.Lock()
	ctx, ended := r.ctx, r.ended
	r.mu.Unlock()
	switch {
	case ctx != nil:
		return ctx.Err()
	case r.parent.Err() != nil:
		return r.parent.Err()
	case r.deadline != 0 && timeNow().UnixNano() >= r.deadline:
		return context.DeadlineExceeded
	case ended:
		return context.Canceled
	}
	return nil
}

func (r *runContext) value(key any) any {
	if key == (metadataKey{}) {
		return r.md
	}
	if key == (callerKey{}) {
		if r.caller == nil {
			return nil
		}
		return *r.caller
	}
	r.mu.Lock()
	ctx := r.ctx
	r.mu.Unlock()
	if ctx != nil {
		return ctx.Value(key)
	}
	if r.traced != nil {
		return r.traced.Value(key)
	}
	return r.parent.Value(key)
}

// Deadline implements context.Context: the deadline of the request being
// handled: its caller's (carried by its envelope), or, when the caller set
// none, HostConfig.DefaultDeadline from the call's admission, and never
// later than HostConfig.MaxDeadline from it. Hooks and continuations have
// none.
func (c *Context[S]) Deadline() (time.Time, bool) {
	if c.run.deadline == 0 {
		return time.Time{}, false
	}
	return time.Unix(0, c.run.deadline), true
}

// Done implements context.Context. The channel is closed when the
// caller's deadline passes, when the entity stops (its shard is dropped,
// lost or released, or the host shuts down), or when the run ends (the
// handler, hook or continuation returns), whichever comes first.
// Passivation never interrupts a run: it happens between messages.
func (c *Context[S]) Done() <-chan struct{} { return c.run.context().Done() }

// Err implements context.Context: context.DeadlineExceeded once the
// caller's deadline passed, context.Canceled once the entity stopped or
// the run ended, nil before. The cause of a stop (ErrNotHere, ErrFenced,
// ...) is available through context.Cause.
func (c *Context[S]) Err() error { return c.run.err() }

// Value implements context.Context. The request's metadata is read with
// MetadataFrom or MetadataValue, its caller with CallerFrom, the run's
// span (HostConfig.Tracer) with trace.SpanFromContext; other keys come
// from the context given to Host.Start.
func (c *Context[S]) Value(key any) any { return c.run.value(key) }
