package actors

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/ordo-actors/ordo/persistence"
	"github.com/ordo-actors/ordo/proto/ordopb"
	"go.opentelemetry.io/otel/trace"
)

// Router delivers envelopes from entities to other entities (possibly on
// other nodes). Route must not block; it calls done exactly once with the
// reply, or with an error reply when ctx ends first. It makes no attempt
// while from.Current() is false: the message waits (from.Changed) until it
// is true again, or gives up (ErrSenderGone) once ctx ends, which it does
// when the sender's shard ownership ends. A one-way envelope
// (env.OneWay, from AtMostOnce) is delivered on at most one attempt, and
// nothing waits for its reply: done may be called with nil as soon as it
// has left or been dropped. The cluster package supplies a router that
// finds the owner and retries; without one, a Host routes to itself.
type Router interface {
	Route(ctx context.Context, env *ordopb.Envelope, from Sender, done func(*ordopb.Reply))
}

// Sender is the ownership an entity's message is sent under.
type Sender interface {
	// Current reports whether the message may be sent now: false once the
	// sender's shard ownership has ended or while its node's lease is not
	// valid.
	Current() bool
	// Changed returns a channel that is closed the next time Current may
	// have turned true (nil: never).
	Changed() <-chan struct{}
}

// Lease is the node's placement lease as a host sees it (placement.Agent
// is one): replies are withheld, and entities' messages wait, while it is
// not valid.
type Lease interface {
	// Valid reports whether the lease is valid now.
	Valid() bool
	// Changed returns a channel that is closed the next time Valid may
	// answer differently.
	Changed() <-chan struct{}
}

// HostConfig configures a Host. Every field has a default (DefaultHostConfig).
type HostConfig struct {
	// Shards is the number of shards entities are spread over (see ShardOf).
	// It must match the cluster's shard count. Default 256.
	Shards uint32
	// IdleTimeout passivates an entity that received no message for this
	// long. Default 5m.
	IdleTimeout time.Duration
	// MaxActive caps active entities; above it the least recently used idle
	// entities are passivated. Default 100,000.
	MaxActive int
	// DedupWindow is how many recent request IDs (with replies) each entity
	// keeps. A retry is recognised as long as fewer than DedupWindow other
	// write requests were applied to the entity in between, and the
	// replies in between fit MaxStateBytes (the oldest entries make room
	// for newer ones when the record would exceed it). Default 128.
	DedupWindow int
	// BatchMaxRecords bounds the records of one Store.Save. Default 256.
	BatchMaxRecords int
	// BatchMaxBytes bounds the data bytes of one Store.Save (a single larger
	// record still goes alone). Default 1 MiB.
	BatchMaxBytes int
	// BatchMaxDelay is how long a write may wait for others to join its
	// batch while no Save is in flight. 0 (the default) sends at once; writes
	// made while a Save is in flight always wait for it and go together.
	BatchMaxDelay time.Duration
	// BatchPace spaces the Saves of a busy host by how long they take, so
	// that each carries more writes: after a Save of at least 4 entities
	// that took d, the next starts no sooner than BatchPace × d after it
	// ended, unless BatchMaxRecords or BatchMaxBytes are queued by then.
	// The gap is at most 5 ms, and one under 100 µs is not waited for, so
	// a store whose Saves take microseconds (persistence/memory) is never
	// paced, nor is a host whose Saves carry one or two writes. A store's
	// Save costs much the same whatever it carries (PostgreSQL: most of a
	// millisecond of CPU, and a few hundredths per record), so fewer,
	// larger Saves cost less CPU per write; a write made within the gap
	// waits up to its end. 0 turns pacing off. Default 0.5.
	BatchPace float64
	// BatchMaxInFlight is how many Saves may run at once (an entity is in
	// at most one of them). Default 1: under load every write made while a
	// Save is in flight joins the next one, which keeps the store's work
	// (and the machine's CPU) per write lowest; raise it for a store whose
	// commits are slow but parallel.
	BatchMaxInFlight int
	// BatchMaxEvents bounds the events (of event-sourced kinds, see
	// EventSourced) that one shard's group of records in a Save carries:
	// an entity's queued writes are coalesced only up to it, and a run
	// that emits more fails with ErrTooLarge. The default, 60, keeps a
	// group of journal appends within one etcd transaction under etcd's
	// default of 128 operations (see persistence/etcdstore: each appending
	// entity costs two comparisons, each event one write); raise it with
	// the store's limits (PostgreSQL has none that matter here). A group
	// the store still refuses as too large is split as any other. An
	// entity's write also carries the events of its runs written behind
	// (Context.WriteBehind), at most 8. Default 60.
	BatchMaxEvents int
	// StoreTimeout bounds each store call. A Save of the batcher ends
	// between StoreTimeout and 5/4 StoreTimeout after it starts: its
	// deadline serves the Saves of a quarter of StoreTimeout. Default 10s.
	StoreTimeout time.Duration
	// RequestTimeout bounds each attempt of an entity-to-entity message
	// (Request, Send): it is the attempt's deadline. Default 30s.
	RequestTimeout time.Duration

	// ReminderTick is how often the host looks for durable reminders
	// (Context.SetReminder) due in the shards it owns, and so the
	// tolerance of their firing: a reminder fires within about
	// ReminderTick after its due time, plus the time its entity takes to
	// activate and handle it, on a host that keeps up (see
	// ReminderBatch). A shard in which nothing is due costs no store read
	// per tick. Default 1s.
	ReminderTick time.Duration
	// ReminderBatch bounds the entities the host is delivering due
	// reminders to at once, across its shards (each delivery lasts until
	// the entity's firings are durable), and the index entries it reads
	// per shard and tick: a million reminders due at once activate their
	// entities ReminderBatch at a time, never all together, and never
	// while MaxActive + ReminderBatch entities are active; above that the
	// tolerance grows. Default 1024.
	ReminderBatch int

	// Limits. A Host never queues, keeps or waits for anything without a
	// bound: an oversized request or state fails that request alone
	// (ErrTooLarge), never its shard; overload is refused with a retryable
	// ErrUnavailable carrying a retry-after hint (see RetryAfter).

	// MaxPayloadBytes bounds the encoded payload of a call's envelope. A
	// larger one is refused with ErrTooLarge (which matches ErrBadRequest)
	// before it is decoded, before its entity is activated and before any
	// store read. Messages between co-located entities are never encoded
	// and not measured. Default 1 MiB.
	MaxPayloadBytes int
	// MaxStateBytes bounds an entity's record: its encoded state plus the
	// dedup entries (request IDs and replies) stored with it. A write
	// handler whose run would leave a larger record fails with ErrTooLarge
	// and is rolled back (state, messages, deferral); nothing is recorded,
	// and the shard is not affected. First, the oldest dedup entries of
	// earlier requests are dropped to make room. A hook or continuation
	// over the limit is rolled back and logged. The default, 512 KiB,
	// leaves room within etcd's default request limit (1.5 MiB, see
	// persistence/etcdstore) and within BatchMaxBytes; raise it only with the
	// store's limits. Default 512 KiB.
	MaxStateBytes int
	// MaxMailbox bounds the calls queued for one entity and not yet taken
	// by it (and the calls parked while it passivates). Beyond it a call
	// is refused with ErrUnavailable and a retry-after hint. Messages from
	// co-located entities (same shard) are counted but never refused, and
	// nothing an entity needs to finish work it already admitted (write
	// results, replies to its own Requests, retry and deadline timers)
	// goes through this bound: see the package doc. Default 1024.
	MaxMailbox int
	// MaxInflight bounds the calls the host admitted and has not answered
	// yet (queued, running, waiting for a write or deferred), co-located
	// messages excepted. Beyond it a call is refused like a full mailbox.
	// Default 10,000.
	MaxInflight int
	// RetryAfter is the retry-after hint of an overload refusal: each
	// refusal carries a random hint in [RetryAfter, 1.5·RetryAfter), so
	// refused callers do not come back together. Default 100ms.
	RetryAfter time.Duration
	// DefaultDeadline is the deadline of a call whose envelope has none,
	// counted from its admission: a call, a deferred reply and a call
	// waiting in a mailbox always end. Default 30s.
	DefaultDeadline time.Duration
	// MaxDeadline caps a call's deadline, counted from its admission: a
	// later deadline is brought forward to it. Default 5m.
	MaxDeadline time.Duration

	// Retry is how entity-to-entity messages are retried (see
	// RetryPolicy); WithRetry overrides it per message. Default
	// DefaultRetryPolicy().
	Retry RetryPolicy
	// TrustUnauthenticated makes the host trust callers with no verified
	// identity (CallerUnknown: a plaintext transport) as it trusts the
	// cluster's nodes: they may send the messages kinds declare internal
	// (Internal), and their claim that an entity sent a message is
	// believed. Off, such callers are external, like clients. A cluster
	// that runs in plaintext (cluster.Config.Insecure) turns it on: there
	// nobody can be told from anybody, and the saga messages of its own
	// entities arrive unauthenticated. Default false.
	TrustUnauthenticated bool
	// Tracer, when set, makes OpenTelemetry spans of the calls entities
	// handle, their continuations, the batcher's Saves and every store
	// call, and carries each span's context in the metadata of the
	// messages its run sends (see TracerName and the package doc). Default
	// nil: no tracing, at the cost of a nil check per message.
	Tracer trace.Tracer
	// Logger receives the host's logs. Default slog.Default().
	Logger *slog.Logger
}

// HostDeps are what a host works with but does not own, kept apart from
// the tunables of HostConfig. Only Store is required.
type HostDeps struct {
	// Store keeps the entities' records (and, for event-sourced kinds,
	// their journals). Required; the host does not close it.
	Store persistence.Store
	// Router delivers entity-to-entity messages; nil routes within this
	// host.
	Router Router
	// Lease is the node's placement lease: replies are withheld (the caller
	// gets a retryable error) and entities' messages wait while it is not
	// valid. nil means always valid.
	Lease Lease
	// ShardLost is called (from an entity's goroutine; it must not block)
	// when the host gives a shard up on its own: the store rejected a write
	// or fence with ErrFenced, or a write failed with an unknown outcome.
	// Placement should let the shard go so that it is owned again under a
	// new epoch. nil: nobody is told.
	ShardLost func(shard uint32, epoch int64, err error)
	// OnBatch, when set, is called with the record count of every Save the
	// batcher makes (from the goroutine that runs the Save; it must not
	// block).
	OnBatch func(records int)
	// Faults is the host's fault seam: nil in production (no faults, at
	// the cost of one nil check per message); a test harness sets it to
	// pause the entities.
	Faults Faults
}

// Faults is the fault seam a host consults (HostDeps.Faults): faults a
// test harness injects to simulate a process that stops running (a long
// GC pause, SIGSTOP) without stopping it.
type Faults interface {
	// Paused returns nil while the entities may run, or a channel that is
	// closed when they may run again. Each entity calls it before it
	// handles a message and, given a channel, waits for it to close (or
	// for the host to stop). Called from the entities' goroutines
	// concurrently: it must be safe for concurrent use and not block.
	Paused() <-chan struct{}
}

// DefaultHostConfig returns the production defaults.
func DefaultHostConfig() HostConfig {
	return HostConfig{
		Shards:           256,
		IdleTimeout:      5 * time.Minute,
		MaxActive:        100_000,
		DedupWindow:      128,
		BatchMaxRecords:  256,
		BatchMaxBytes:    1 << 20,
		BatchMaxInFlight: 1,
		BatchMaxEvents:   60,
		BatchPace:        0.5,
		StoreTimeout:     10 * time.Second,
		RequestTimeout:   30 * time.Second,
		ReminderTick:     time.Second,
		ReminderBatch:    1024,
		Retry:            DefaultRetryPolicy(),
		MaxPayloadBytes:  1 << 20,
		MaxStateBytes:    512 << 10,
		MaxMailbox:       1024,
		MaxInflight:      10_000,
		RetryAfter:       100 * time.Millisecond,
		DefaultDeadline:  30 * time.Second,
		MaxDeadline:      5 * time.Minute,
	}
}

// DefaultLocalConfig returns defaults with short timers, for tests and
// single-process demos.
func DefaultLocalConfig() HostConfig {
	c := DefaultHostConfig()
	c.IdleTimeout = 30 * time.Second
	c.StoreTimeout = 5 * time.Second
	c.RequestTimeout = 5 * time.Second
	return c
}

// Validate reports the first invalid setting; the error wraps
// ErrInvalidConfig.
func (c HostConfig) Validate() error {
	if err := c.validate(); err != nil {
		return invalidConfig(err)
	}
	return nil
}

// Validate reports the first invalid field.
func (c HostConfig) validate() error {
	switch {
	case c.Shards <= 0 || c.Shards > 1<<16:
		return fmt.Errorf("actors: Shards %d out of range [1, 65536]", c.Shards)
	case c.IdleTimeout <= 0:
		return errors.New("actors: IdleTimeout must be positive")
	case c.MaxActive <= 0:
		return errors.New("actors: MaxActive must be positive")
	case c.DedupWindow <= 0:
		return errors.New("actors: DedupWindow must be positive")
	case c.BatchMaxRecords <= 0:
		return errors.New("actors: BatchMaxRecords must be positive")
	case c.BatchMaxBytes <= 0:
		return errors.New("actors: BatchMaxBytes must be positive")
	case c.BatchMaxInFlight <= 0:
		return errors.New("actors: BatchMaxInFlight must be positive")
	case c.BatchMaxEvents <= 0:
		return errors.New("actors: BatchMaxEvents must be positive")
	case c.BatchMaxDelay < 0:
		return errors.New("actors: BatchMaxDelay must not be negative")
	case !(c.BatchPace >= 0) || math.IsInf(c.BatchPace, 1):
		return fmt.Errorf("actors: BatchPace %v must be a finite number, 0 or more", c.BatchPace)
	case c.StoreTimeout <= 0:
		return errors.New("actors: StoreTimeout must be positive")
	case c.RequestTimeout <= 0:
		return errors.New("actors: RequestTimeout must be positive")
	case c.ReminderTick <= 0:
		return errors.New("actors: ReminderTick must be positive")
	case c.ReminderBatch <= 0:
		return errors.New("actors: ReminderBatch must be positive")
	case c.MaxPayloadBytes <= 0:
		return errors.New("actors: MaxPayloadBytes must be positive")
	case c.MaxStateBytes <= 0:
		return errors.New("actors: MaxStateBytes must be positive")
	case c.MaxMailbox <= 0:
		return errors.New("actors: MaxMailbox must be positive")
	case c.MaxInflight <= 0:
		return errors.New("actors: MaxInflight must be positive")
	case c.RetryAfter <= 0:
		return errors.New("actors: RetryAfter must be positive")
	case c.DefaultDeadline <= 0:
		return errors.New("actors: DefaultDeadline must be positive")
	case c.MaxDeadline < c.DefaultDeadline:
		return errors.New("actors: MaxDeadline must be at least DefaultDeadline")
	}
	if err := c.Retry.Validate(); err != nil {
		return fmt.Errorf("actors: Retry: %w", err)
	}
	return nil
}
