package lab

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisConfig configures the Redis lock and Redlock approaches.
type RedisConfig struct {
	// Addrs are the Redis servers: the single-lock approach uses the first,
	// Redlock all of them (5 in the classic setup).
	Addrs []string
	// TTL is the lock's expiry (PX); default 2s.
	TTL time.Duration
	// Prefix namespaces the keys; default "ordo-lab".
	Prefix string
	// PoolSize is the client connection pool size per server; default 32.
	PoolSize int
}

func (c *RedisConfig) fill() error {
	if len(c.Addrs) == 0 {
		return errors.New("lab: redis: no server addresses")
	}
	if c.TTL == 0 {
		c.TTL = 2 * time.Second
	}
	if c.TTL < 10*time.Millisecond {
		return fmt.Errorf("lab: redis: lock TTL %v too short", c.TTL)
	}
	if c.Prefix == "" {
		c.Prefix = "ordo-lab"
	}
	if c.PoolSize == 0 {
		c.PoolSize = 32
	}
	return nil
}

// unlockScript deletes the lock only if it still holds our token.
var unlockScript = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`)

// setNXPX runs SET key token NX PX ttl and reports whether it took the lock.
func setNXPX(ctx context.Context, c *redis.Client, key, token string, ttl time.Duration) (bool, error) {
	err := c.Do(ctx, "SET", key, token, "NX", "PX", ttl.Milliseconds()).Err()
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, redis.Nil):
		return false, nil
	default:
		return false, err
	}
}

func newToken() string {
	var b [16]byte
	_, _ = crand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}

// sortedPair returns the two accounts in lock order.
func sortedPair(a, b int) (int, int) {
	if a < b {
		return a, b
	}
	return b, a
}

// backoff sleeps a jittered, growing delay before the next lock attempt,
// or returns ctx's error.
func backoff(ctx context.Context, attempt int) error {
	d := time.Millisecond << min(attempt, 5) // 1ms … 32ms
	d = d/2 + rand.N(d/2+1)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// RedisLock is the single-instance Redis lock: SET NX PX per account in
// sorted order, balances read with GET and written with SET in MULTI/EXEC,
// release by compare-and-delete. Nothing stops a holder whose lock expired
// during a pause from writing. Safe for concurrent use.
type RedisLock struct {
	cfg      RedisConfig
	c        *redis.Client
	accounts int
}

var _ Approach = (*RedisLock)(nil)

// NewRedisLock connects to cfg.Addrs[0].
func NewRedisLock(cfg RedisConfig) (*RedisLock, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	return &RedisLock{cfg: cfg, c: newRedisClient(cfg.Addrs[0], cfg.PoolSize)}, nil
}

func newRedisClient(addr string, pool int) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:         addr,
		PoolSize:     pool,
		DialTimeout:  time.Second,
		ReadTimeout:  2 * time.Second,
		WriteTimeout: 2 * time.Second,
		MaxRetries:   -1, // a retried SET could apply twice; the lab counts unknowns instead
	})
}

// Name implements Approach.
func (r *RedisLock) Name() string { return "redis" }

func (r *RedisLock) lockKey(i int) string { return r.cfg.Prefix + ":lock:" + strconv.Itoa(i) }
func (r *RedisLock) balKey(i int) string  { return r.cfg.Prefix + ":bal:" + strconv.Itoa(i) }

// Setup implements Approach.
func (r *RedisLock) Setup(ctx context.Context, accounts int, initial int64) error {
	r.accounts = accounts
	return redisSetup(ctx, r.c, accounts, initial, r.lockKey, r.balKey)
}

func redisSetup(ctx context.Context, c *redis.Client, accounts int, initial int64, lockKey, balKey func(int) string) error {
	_, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for i := range accounts {
			p.Del(ctx, lockKey(i))
			p.Set(ctx, balKey(i), initial, 0)
		}
		return nil
	})
	return err
}

// Balances implements Approach.
func (r *RedisLock) Balances(ctx context.Context) ([]int64, error) {
	return redisBalances(ctx, r.c, r.accounts, r.balKey)
}

func redisBalances(ctx context.Context, c *redis.Client, accounts int, balKey func(int) string) ([]int64, error) {
	keys := make([]string, accounts)
	for i := range keys {
		keys[i] = balKey(i)
	}
	vals, err := c.MGet(ctx, keys...).Result()
	if err != nil {
		return nil, err
	}
	out := make([]int64, accounts)
	for i, v := range vals {
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("lab: redis: account %d has no balance", i)
		}
		if out[i], err = strconv.ParseInt(s, 10, 64); err != nil {
			return nil, fmt.Errorf("lab: redis: account %d: %w", i, err)
		}
	}
	return out, nil
}

// lock takes one account's lock, retrying until ctx ends.
func (r *RedisLock) lock(ctx context.Context, key, token string) error {
	for attempt := 0; ; attempt++ {
		ok, err := setNXPX(ctx, r.c, key, token, r.cfg.TTL)
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if err := backoff(ctx, attempt); err != nil {
			return err
		}
	}
}

func (r *RedisLock) unlock(ctx context.Context, key, token string) {
	// Detached: the lock must go even when the transfer's context ended.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	_ = unlockScript.Run(ctx, r.c, []string{key}, token).Err() // it expires anyway
}

// Transfer implements Approach.
func (r *RedisLock) Transfer(ctx context.Context, from, to int, amount int64) error {
	token := newToken()
	lo, hi := sortedPair(from, to)
	for _, i := range []int{lo, hi} {
		if err := r.lock(ctx, r.lockKey(i), token); err != nil {
			if i == hi {
				r.unlock(ctx, r.lockKey(lo), token)
			}
			return fmt.Errorf("%w: lock account %d: %w", ErrAborted, i, err)
		}
	}
	defer r.unlock(ctx, r.lockKey(lo), token)
	defer r.unlock(ctx, r.lockKey(hi), token)
	return redisRMW(ctx, r.c, r.balKey(from), r.balKey(to), amount, nil)
}

// redisRMW reads both balances, checks the funds, pauses if asked, and
// writes both. valid, when non-nil, is checked before the pause and aborts
// the transfer when the locks may have expired.
func redisRMW(ctx context.Context, c *redis.Client, fromKey, toKey string, amount int64, valid func() bool) error {
	vals, err := c.MGet(ctx, fromKey, toKey).Result()
	if err != nil {
		return fmt.Errorf("%w: read: %w", ErrAborted, err)
	}
	var b [2]int64
	for i, v := range vals {
		s, ok := v.(string)
		if !ok {
			return fmt.Errorf("%w: missing balance", ErrAborted)
		}
		if b[i], err = strconv.ParseInt(s, 10, 64); err != nil {
			return fmt.Errorf("%w: %w", ErrAborted, err)
		}
	}
	if b[0] < amount {
		return ErrInsufficientFunds
	}
	if valid != nil && !valid() {
		return fmt.Errorf("%w: lock validity ran out before the write", ErrAborted)
	}
	Stall(ctx)
	_, err = c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, fromKey, b[0]-amount, 0)
		p.Set(ctx, toKey, b[1]+amount, 0)
		return nil
	})
	if err != nil {
		return fmt.Errorf("lab: redis: write: %w", err)
	}
	return nil
}

// Close implements Approach.
func (r *RedisLock) Close() error { return r.c.Close() }
