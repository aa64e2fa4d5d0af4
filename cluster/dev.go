package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sync"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/persistence"
	"github.com/ordo-actors/ordo/persistence/memory"
	"github.com/ordo-actors/ordo/proto/ordopb"
)

// DevConfig configures a development node (NewDev). Its zero value, with
// Kinds set, is a valid configuration.
type DevConfig struct {
	// Kinds are the entity kinds the node hosts. At least one.
	Kinds []actors.Kind
	// Shards is the shard count. Default 256, a cluster's default, so
	// that entities share shards (and so Saves) as they would there.
	Shards uint32
	// Host configures the entity runtime. The zero HostConfig means
	// actors.DefaultLocalConfig(); to change one setting, start from that.
	// Its Shards is set by NewDev.
	Host actors.HostConfig
	// Store keeps entity state. Default a new persistence/memory store,
	// closed by Close; a Store given here stays the caller's. It must not
	// be shared with another node: the dev node fences every shard at its
	// own epochs.
	Store persistence.Store
	// Retry is how calls are retried (a call meets a retryable error only
	// while a shard is served again after a failed write, see Dev). The
	// zero RetryPolicy means DefaultRetryPolicy().
	Retry RetryPolicy
	// Logger receives the node's logs. Default slog.Default().
	Logger *slog.Logger
}

// DevEpoch is the fencing epoch at which a development node first owns
// every shard.
const DevEpoch int64 = 1

// Dev is a development node: one in-process entity host that owns every
// shard, over a memory store by default, with no etcd, no gossip and no
// network. It is for unit tests of an application's own kinds and for
// development; a Dev implements actors.Invoker, so actors.Call and
// cluster.Call work against it as against a Node or a Client.
//
// Handlers see exactly the runtime a cluster node gives them: write
// batching and the output gate (a reply leaves once the state it
// reports is durable in the store), request deduplication, deferred
// replies, co-located messages, and Send and Request between the node's
// entities. Calls are retried with the same request ID, with backoff,
// until their context ends, as a node retries them; entity-to-entity
// messages too. What a cluster adds and a Dev lacks is placement: there is
// no lease to lose and no handoff. A shard is given up only when the store
// rejects a write with ErrFenced (another writer raised its fence: the Dev
// then stops serving it, and logs an error) or a write's outcome is
// unknown; in the second case the shard is served again at once, at the
// next epoch, as placement would have it re-acquired.
//
// Lifecycle: NewDev, then Close (idempotent). All methods are safe for
// concurrent use.
type Dev struct {
	host     *actors.Host
	store    persistence.Store
	ownStore bool
	retry    RetryPolicy
	log      *slog.Logger

	mu     sync.Mutex
	closed bool
	epochs map[uint32]int64 // the epoch each shard is owned at
	wg     sync.WaitGroup   // re-owning and routing goroutines; Add under mu while !closed

	closeOnce sync.Once
	closeErr  error
}

var _ actors.Invoker = (*Dev)(nil)

// NewDev starts a development node that owns every shard at DevEpoch.
// ctx bounds the start only. On an error nothing is left running.
func NewDev(ctx context.Context, cfg DevConfig) (_ *Dev, err error) {
	if len(cfg.Kinds) == 0 {
		return nil, errors.New("cluster: NewDev: no kinds")
	}
	if cfg.Shards == 0 {
		cfg.Shards = DefaultConfig().Placement.Shards
	}
	if reflect.ValueOf(cfg.Host).IsZero() {
		cfg.Host = actors.DefaultLocalConfig()
	}
	if cfg.Retry == (RetryPolicy{}) {
		cfg.Retry = DefaultRetryPolicy()
	}
	if err := cfg.Retry.validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	d := &Dev{store: cfg.Store, retry: cfg.Retry, log: cfg.Logger, epochs: make(map[uint32]int64, cfg.Shards)}
	if d.store == nil {
		d.store, d.ownStore = memory.New(), true
	}
	hc := cfg.Host
	hc.Shards = cfg.Shards
	if hc.Logger == nil {
		hc.Logger = cfg.Logger
	}
	// No lease: always valid.
	deps := actors.HostDeps{Store: d.store, Router: devRouter{d}, ShardLost: d.shardLost}
	if d.host, err = actors.NewHost(hc, deps, cfg.Kinds...); err != nil {
		d.closeStore()
		return nil, fmt.Errorf("cluster: NewDev: %w", err)
	}
	if err = d.host.Start(ctx); err != nil {
		d.closeStore()
		return nil, fmt.Errorf("cluster: NewDev: %w", err)
	}
	defer func() {
		if err != nil {
			_ = d.Close(ctx)
		}
	}()
	d.mu.Lock()
	defer d.mu.Unlock()
	for s := range cfg.Shards {
		if err := d.host.Own(s, DevEpoch); err != nil {
			return nil, fmt.Errorf("cluster: NewDev: %w", err)
		}
		d.epochs[uint32(s)] = DevEpoch
	}
	return d, nil
}

// Invoke implements actors.Invoker: it delivers env to its entity and
// retries retryable outcomes, with the same envelope, as the RetryPolicy
// allows (until ctx ends or MaxAttempts attempts were made).
func (d *Dev) Invoke(ctx context.Context, env *ordopb.Envelope) (*ordopb.Reply, error) {
	return d.invoke(ctx, env, nil)
}

// invoke delivers env, retrying. A caller's call (from nil) fails with
// ErrClosed once Close has begun; an entity's message is retried while
// its ctx lasts and from.Current allows, as a node's router does (the
// ctx ends when the sender's shard is given up, at the latest).
func (d *Dev) invoke(ctx context.Context, env *ordopb.Envelope, from actors.Sender) (*ordopb.Reply, error) {
	if dl, ok := ctx.Deadline(); ok && env.GetDeadlineUnixNano() == 0 {
		env.DeadlineUnixNano = dl.UnixNano()
	}
	var last error
	for attempt := 0; ; attempt++ {
		if from == nil && d.isClosed() {
			return nil, ErrClosed
		}
		var lastRep *ordopb.Reply
		if from == nil || from.Current() {
			actx, cancel := context.WithTimeout(ctx, d.retry.AttemptTimeout)
			rep, err := d.host.Invoke(actx, env)
			cancel()
			switch {
			case err == nil && !actors.Retryable(actors.ErrorFromProto(rep.GetError())):
				return rep, nil
			case err == nil:
				last, lastRep = actors.ErrorFromProto(rep.GetError()), rep
			case ctx.Err() == nil:
				last = fmt.Errorf("%w: attempt timed out after %v", actors.ErrUnavailable, d.retry.AttemptTimeout)
			default:
				last = err
			}
		} else {
			last = actors.ErrSenderGone
		}
		wait, more := d.retry.next(attempt, attempt+1, last)
		if !more {
			if lastRep != nil {
				return lastRep, nil
			}
			ref, _ := actors.RefFromProto(env.GetTarget())
			return nil, fmt.Errorf("%w: cluster: call to %s gave up after %d attempts (RetryPolicy.MaxAttempts): %v",
				actors.ErrUnavailable, ref, attempt+1, last)
		}
		env = actors.ForRetry(env)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			ref, _ := actors.RefFromProto(env.GetTarget())
			return nil, fmt.Errorf("cluster: call to %s gave up after %d attempts: %w (last: %v)", ref, attempt+1, ctx.Err(), last)
		case <-t.C:
		}
	}
}

func (d *Dev) isClosed() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.closed
}

// shardLost implements HostDeps.ShardLost (called from an entity's
// goroutine; it must not block).
func (d *Dev) shardLost(shard uint32, epoch int64, err error) {
	if errors.Is(err, persistence.ErrFenced) {
		d.log.Error("dev node: a shard was fenced by another writer of its store; no longer serving it",
			"shard", shard, "epoch", epoch, "err", err)
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed || d.epochs[shard] != epoch {
		return
	}
	next := epoch + 1
	d.epochs[shard] = next
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		if err := d.host.Own(shard, next); err != nil && !d.isClosed() {
			d.log.Error("dev node: cannot serve a shard again", "shard", shard, "epoch", next, "err", err)
		}
	}()
}

// Close drains every shard (calls in progress finish, writes become
// durable), stops the entities and, when NewDev made the store, closes
// it. If ctx ends first, what remains is stopped at once. Later calls
// return the first one's result; calls made after it fail with ErrClosed.
func (d *Dev) Close(ctx context.Context) error {
	d.closeOnce.Do(func() {
		d.mu.Lock()
		d.closed = true
		d.mu.Unlock()
		d.closeErr = d.host.Shutdown(ctx)
		d.wg.Wait()
		d.closeStore()
	})
	return d.closeErr
}

func (d *Dev) closeStore() {
	if d.ownStore {
		_ = d.store.Close()
	}
}

// Owned returns the shards the node serves and their epochs.
func (d *Dev) Owned() map[uint32]int64 { return d.host.Owned() }

// Stats returns the node's host counters.
func (d *Dev) Stats() actors.HostStats { return d.host.Stats() }

// Store returns the node's store: a test may read what its entities made
// durable, or, with the default memory store, inject faults.
func (d *Dev) Store() persistence.Store { return d.store }

// devRouter routes entity-to-entity messages of a Dev: within its host,
// retried like calls (see Dev.invoke), each on its own goroutine; a
// one-way message (actors.AtMostOnce) is submitted once.
type devRouter struct{ d *Dev }

// Route implements actors.Router.
func (r devRouter) Route(ctx context.Context, env *ordopb.Envelope, from actors.Sender, done func(*ordopb.Reply)) {
	d := r.d
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		done(&ordopb.Reply{RequestId: env.GetRequestId(), Error: actors.ErrorToProto(
			&actors.Error{Code: ordopb.Code_CODE_UNAVAILABLE, Message: ErrClosed.Error()})})
		return
	}
	if env.GetOneWay() {
		// One attempt, unacknowledged (actors.AtMostOnce).
		d.mu.Unlock()
		if from == nil || from.Current() {
			d.host.Submit(env, func(*ordopb.Reply) {})
		}
		done(nil)
		return
	}
	d.wg.Add(1)
	d.mu.Unlock()
	go func() {
		defer d.wg.Done()
		rep, err := d.invoke(ctx, env, from)
		if err != nil {
			rep = &ordopb.Reply{RequestId: env.GetRequestId(), Error: actors.ErrorToProto(
				&actors.Error{Code: ordopb.Code_CODE_UNAVAILABLE, Message: err.Error()})}
		}
		done(rep)
	}()
}
