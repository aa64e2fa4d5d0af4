package lab

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
)

// EtcdConfig configures the etcd lock approach.
type EtcdConfig struct {
	// Endpoints are the etcd client URLs.
	Endpoints []string
	// SessionTTL is the lease TTL of the sessions holding the mutexes,
	// rounded up to whole seconds (etcd's unit); default 2s. etcd raises
	// TTLs below its minimum (about 1.5s with default timers) to it.
	SessionTTL time.Duration
	// Prefix namespaces the keys; default "/ordo-lab/etcd".
	Prefix string
	// Sessions caps the idle sessions kept for reuse; default 64.
	Sessions int
}

// EtcdLock takes a concurrency.Mutex per account, in sorted order, on a
// session with a TTL, and writes both balances in one Txn guarded by
// IsOwner() of both mutexes: a holder whose session expired during a pause
// finds its lock keys gone and its write refused. This is a fenced lock.
//
// A session serves one transfer at a time (two mutexes of one session on
// one key would both "hold" it, etcd #10756). A pause orphans the
// transfer's session, stopping its keepalive as a real process pause
// would, and the session is discarded. Safe for concurrent use.
type EtcdLock struct {
	cfg      EtcdConfig
	c        *clientv3.Client
	ttl      int
	idle     chan *concurrency.Session
	accounts int
}

var _ Approach = (*EtcdLock)(nil)

// NewEtcdLock connects to cfg.Endpoints.
func NewEtcdLock(ctx context.Context, cfg EtcdConfig) (*EtcdLock, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("lab: etcd: no endpoints")
	}
	if cfg.SessionTTL == 0 {
		cfg.SessionTTL = 2 * time.Second
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "/ordo-lab/etcd"
	}
	if cfg.Sessions == 0 {
		cfg.Sessions = 64
	}
	ttl := int((cfg.SessionTTL + time.Second - 1) / time.Second)
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   cfg.Endpoints,
		DialTimeout: 5 * time.Second,
		Context:     context.WithoutCancel(ctx),
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("lab: etcd: %w", err)
	}
	return &EtcdLock{cfg: cfg, c: c, ttl: ttl, idle: make(chan *concurrency.Session, cfg.Sessions)}, nil
}

// Name implements Approach.
func (e *EtcdLock) Name() string { return "etcd" }

func (e *EtcdLock) lockKey(i int) string { return e.cfg.Prefix + "/lock/" + strconv.Itoa(i) }
func (e *EtcdLock) balKey(i int) string  { return e.cfg.Prefix + "/bal/" + strconv.Itoa(i) }

// Setup implements Approach.
func (e *EtcdLock) Setup(ctx context.Context, accounts int, initial int64) error {
	e.accounts = accounts
	if _, err := e.c.Delete(ctx, e.cfg.Prefix+"/", clientv3.WithPrefix()); err != nil {
		return err
	}
	const batch = 100 // below etcd's default --max-txn-ops of 128
	for lo := 0; lo < accounts; lo += batch {
		var ops []clientv3.Op
		for i := lo; i < min(lo+batch, accounts); i++ {
			ops = append(ops, clientv3.OpPut(e.balKey(i), strconv.FormatInt(initial, 10)))
		}
		if _, err := e.c.Txn(ctx).Then(ops...).Commit(); err != nil {
			return err
		}
	}
	return nil
}

// Balances implements Approach.
func (e *EtcdLock) Balances(ctx context.Context) ([]int64, error) {
	resp, err := e.c.Get(ctx, e.cfg.Prefix+"/bal/", clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	out := make([]int64, e.accounts)
	seen := make([]bool, e.accounts)
	for _, kv := range resp.Kvs {
		i, err := strconv.Atoi(string(kv.Key[len(e.cfg.Prefix+"/bal/"):]))
		if err != nil || i < 0 || i >= e.accounts {
			return nil, fmt.Errorf("lab: etcd: unexpected key %q", kv.Key)
		}
		if out[i], err = strconv.ParseInt(string(kv.Value), 10, 64); err != nil {
			return nil, fmt.Errorf("lab: etcd: account %d: %w", i, err)
		}
		seen[i] = true
	}
	for i, ok := range seen {
		if !ok {
			return nil, fmt.Errorf("lab: etcd: account %d has no balance", i)
		}
	}
	return out, nil
}

func (e *EtcdLock) session() (*concurrency.Session, error) {
	for {
		select {
		case s := <-e.idle:
			select {
			case <-s.Done():
				continue // expired while idle
			default:
				return s, nil
			}
		default:
			return concurrency.NewSession(e.c, concurrency.WithTTL(e.ttl))
		}
	}
}

func (e *EtcdLock) release(s *concurrency.Session) {
	select {
	case e.idle <- s:
	default:
		_ = s.Close()
	}
}

// Transfer implements Approach.
func (e *EtcdLock) Transfer(ctx context.Context, from, to int, amount int64) (err error) {
	s, err := e.session()
	if err != nil {
		return fmt.Errorf("%w: etcd session: %w", ErrAborted, err)
	}
	paused := false
	defer func() {
		if paused {
			_ = s.Close() // its lease expired or is about to; Close revokes it
		} else {
			e.release(s)
		}
	}()
	lo, hi := sortedPair(from, to)
	mlo := concurrency.NewMutex(s, e.lockKey(lo))
	mhi := concurrency.NewMutex(s, e.lockKey(hi))
	if err := mlo.Lock(ctx); err != nil {
		return fmt.Errorf("%w: lock account %d: %w", ErrAborted, lo, err)
	}
	defer unlockEtcd(ctx, mlo)
	if err := mhi.Lock(ctx); err != nil {
		return fmt.Errorf("%w: lock account %d: %w", ErrAborted, hi, err)
	}
	defer unlockEtcd(ctx, mhi)

	resp, err := e.c.Txn(ctx).Then(clientv3.OpGet(e.balKey(from)), clientv3.OpGet(e.balKey(to))).Commit()
	if err != nil {
		return fmt.Errorf("%w: read: %w", ErrAborted, err)
	}
	var b [2]int64
	for i, r := range resp.Responses {
		kvs := r.GetResponseRange().Kvs
		if len(kvs) != 1 {
			return fmt.Errorf("%w: missing balance", ErrAborted)
		}
		if b[i], err = strconv.ParseInt(string(kvs[0].Value), 10, 64); err != nil {
			return fmt.Errorf("%w: %w", ErrAborted, err)
		}
	}
	if b[0] < amount {
		return ErrInsufficientFunds
	}
	if d := Pausing(ctx); d > 0 {
		paused = true
		s.Orphan() // the paused process sends no keepalives
		Stall(ctx)
	}
	w, err := e.c.Txn(ctx).
		If(mlo.IsOwner(), mhi.IsOwner()).
		Then(clientv3.OpPut(e.balKey(from), strconv.FormatInt(b[0]-amount, 10)),
			clientv3.OpPut(e.balKey(to), strconv.FormatInt(b[1]+amount, 10))).
		Commit()
	if err != nil {
		return fmt.Errorf("lab: etcd: write: %w", err)
	}
	if !w.Succeeded {
		return fmt.Errorf("%w: etcd: lock lost before the write (fenced)", ErrAborted)
	}
	return nil
}

func unlockEtcd(ctx context.Context, m *concurrency.Mutex) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	_ = m.Unlock(ctx) // the key goes with the session's lease anyway
}

// Close implements Approach.
func (e *EtcdLock) Close() error {
	for {
		select {
		case s := <-e.idle:
			_ = s.Close()
		default:
			return e.c.Close()
		}
	}
}
