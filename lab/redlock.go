package lab

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redlock is the Redlock algorithm over independent Redis servers: a lock
// is held when SET NX PX succeeded on a majority within its TTL, for a
// validity time of TTL − elapsed − drift (drift = TTL/100 + 2ms). Accounts
// are locked in sorted order; balances live in the first server. The
// transfer checks the validity time after reading and before the pause, as
// a careful client would; a pause after that check is exactly the window
// Redlock cannot close. Safe for concurrent use.
type Redlock struct {
	cfg      RedisConfig
	cs       []*redis.Client
	quorum   int
	accounts int
}

var _ Approach = (*Redlock)(nil)

// NewRedlock connects to every address of cfg.Addrs (at least 3).
func NewRedlock(cfg RedisConfig) (*Redlock, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	if len(cfg.Addrs) < 3 {
		return nil, fmt.Errorf("lab: redlock needs at least 3 independent servers, have %d", len(cfg.Addrs))
	}
	r := &Redlock{cfg: cfg, quorum: len(cfg.Addrs)/2 + 1}
	for _, a := range cfg.Addrs {
		r.cs = append(r.cs, newRedisClient(a, cfg.PoolSize))
	}
	return r, nil
}

// Name implements Approach.
func (r *Redlock) Name() string { return "redlock" }

func (r *Redlock) lockKey(i int) string { return r.cfg.Prefix + ":redlock:" + strconv.Itoa(i) }
func (r *Redlock) balKey(i int) string  { return r.cfg.Prefix + ":rlbal:" + strconv.Itoa(i) }

// Setup implements Approach.
func (r *Redlock) Setup(ctx context.Context, accounts int, initial int64) error {
	r.accounts = accounts
	for _, c := range r.cs {
		if err := redisSetup(ctx, c, accounts, initial, r.lockKey, r.balKey); err != nil {
			return err
		}
	}
	return nil
}

// Balances implements Approach.
func (r *Redlock) Balances(ctx context.Context) ([]int64, error) {
	return redisBalances(ctx, r.cs[0], r.accounts, r.balKey)
}

// lock takes key on a majority, retrying until ctx ends, and returns the
// end of the lock's validity.
func (r *Redlock) lock(ctx context.Context, key, token string) (time.Time, error) {
	drift := r.cfg.TTL/100 + 2*time.Millisecond
	per := max(r.cfg.TTL/50, 5*time.Millisecond) // per-server timeout, small against the TTL
	for attempt := 0; ; attempt++ {
		start := time.Now()
		n := 0
		var lastErr error
		for _, c := range r.cs {
			sctx, cancel := context.WithTimeout(ctx, per)
			ok, err := setNXPX(sctx, c, key, token, r.cfg.TTL)
			cancel()
			if err != nil {
				lastErr = err
			}
			if ok {
				n++
			}
		}
		validity := r.cfg.TTL - time.Since(start) - drift
		if n >= r.quorum && validity > 0 {
			return start.Add(validity), nil
		}
		r.unlock(ctx, key, token)
		if err := backoff(ctx, attempt); err != nil {
			if lastErr != nil {
				err = errors.Join(err, lastErr)
			}
			return time.Time{}, err
		}
	}
}

// unlock releases key on every server where it still holds token.
func (r *Redlock) unlock(ctx context.Context, key, token string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	for _, c := range r.cs {
		_ = unlockScript.Run(ctx, c, []string{key}, token).Err() // it expires anyway
	}
}

// Transfer implements Approach.
func (r *Redlock) Transfer(ctx context.Context, from, to int, amount int64) error {
	token := newToken()
	lo, hi := sortedPair(from, to)
	until, err := r.lock(ctx, r.lockKey(lo), token)
	if err != nil {
		return fmt.Errorf("%w: lock account %d: %w", ErrAborted, lo, err)
	}
	defer r.unlock(ctx, r.lockKey(lo), token)
	until2, err := r.lock(ctx, r.lockKey(hi), token)
	if err != nil {
		return fmt.Errorf("%w: lock account %d: %w", ErrAborted, hi, err)
	}
	defer r.unlock(ctx, r.lockKey(hi), token)
	if until2.Before(until) {
		until = until2
	}
	return redisRMW(ctx, r.cs[0], r.balKey(from), r.balKey(to), amount, func() bool {
		return time.Now().Before(until)
	})
}

// Close implements Approach.
func (r *Redlock) Close() error {
	var errs []error
	for _, c := range r.cs {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}
