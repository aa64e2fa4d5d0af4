package actors

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/ordo-actors/ordo/proto/ordopb"
)

// Router delivers envelopes from entities to other entities (possibly on
// other nodes). Route must not block; it calls done exactly once with the
// reply, or with an error reply when ctx ends first. The cluster package
// supplies a router that finds the owner and retries; without one, a Host
// routes to itself.
type Router interface {
	Route(ctx context.Context, env *ordopb.Envelope, done func(*ordopb.Reply))
}

// HostConfig configures a Host. Every field has a default (DefaultHostConfig).
type HostConfig struct {
	// Shards is the number of shards entities are spread over (see ShardOf).
	// It must match the cluster's shard count. Default 256.
	Shards int
	// IdleTimeout passivates an entity that received no message for this
	// long. Default 5m.
	IdleTimeout time.Duration
	// MaxActive caps active entities; above it the least recently used idle
	// entities are passivated. Default 100,000.
	MaxActive int
	// DedupWindow is how many recent request IDs (with replies) each entity
	// keeps. A retry is recognised as long as fewer than DedupWindow other
	// write requests were applied to the entity in between. Default 128.
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
	// BatchMaxInFlight is how many Saves may run at once (an entity is in
	// at most one of them). Default 1: under load every write made while a
	// Save is in flight joins the next one, which keeps the store's work
	// (and the machine's CPU) per write lowest; raise it for a store whose
	// commits are slow but parallel.
	BatchMaxInFlight int
	// StoreTimeout bounds each store call. Default 10s.
	StoreTimeout time.Duration
	// RequestTimeout bounds each attempt of an entity-to-entity message
	// (Request, Send): it is the attempt's deadline. Default 30s.
	RequestTimeout time.Duration
	// Retry is how entity-to-entity messages are retried (see
	// RetryPolicy); WithRetry overrides it per message. Default
	// DefaultRetryPolicy().
	Retry RetryPolicy
	// Router delivers entity-to-entity messages; nil routes within this host.
	Router Router
	// LeaseValid reports whether the node's placement lease is still valid;
	// replies are withheld (the caller gets a retryable error) while it
	// returns false. nil means always valid.
	LeaseValid func() bool
	// OnShardLost is called (from an entity's goroutine; it must not block)
	// when a shard is dropped because the store rejected a write or fence
	// with ErrFenced, or a write failed with an unknown outcome: placement
	// should give the shard up so that it is owned again under a new epoch.
	OnShardLost func(shard uint32, epoch int64, err error)
	// OnBatch, when set, is called with the record count of every Save the
	// batcher makes (from the batcher's goroutine; it must not block).
	OnBatch func(records int)
	// Logger receives the host's logs. Default slog.Default().
	Logger *slog.Logger
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
		StoreTimeout:     10 * time.Second,
		RequestTimeout:   30 * time.Second,
		Retry:            DefaultRetryPolicy(),
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

// Validate reports the first invalid field.
func (c HostConfig) Validate() error {
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
	case c.BatchMaxDelay < 0:
		return errors.New("actors: BatchMaxDelay must not be negative")
	case c.StoreTimeout <= 0:
		return errors.New("actors: StoreTimeout must be positive")
	case c.RequestTimeout <= 0:
		return errors.New("actors: RequestTimeout must be positive")
	}
	if err := c.Retry.Validate(); err != nil {
		return fmt.Errorf("actors: Retry: %w", err)
	}
	return nil
}
