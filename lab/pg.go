package lab

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// PGMode selects a PostgreSQL locking design.
type PGMode string

// The PostgreSQL designs.
const (
	// PGRow locks both rows with SELECT … FOR UPDATE in id order.
	PGRow PGMode = "pg-row"
	// PGAdvisory takes pg_advisory_xact_lock per account in id order and
	// reads the rows without row locks.
	PGAdvisory PGMode = "pg-advisory"
	// PGOptimistic reads without locks and updates both rows only if their
	// version columns are unchanged, retrying on conflict.
	PGOptimistic PGMode = "pg-optimistic"
)

// PGConfig configures a PostgreSQL approach.
type PGConfig struct {
	// URL is the connection string (postgres://…).
	URL string
	// Mode is the locking design.
	Mode PGMode
	// IdleTxTimeout sets idle_in_transaction_session_timeout, the nearest
	// thing to a lock TTL: the server ends a session that sits idle in a
	// transaction (a paused client holding row or advisory locks) this
	// long, releasing its locks and rolling it back. Default 2s; negative
	// leaves the server's setting.
	IdleTxTimeout time.Duration
	// MaxConns caps the pool; default 32.
	MaxConns int32
	// Retries bounds optimistic attempts per transfer; default 100.
	Retries int
}

// PGLock is one of the PostgreSQL designs. In each, the lock (row lock,
// transaction-scoped advisory lock or version check) lives in the same
// transaction as the write, so a client that lost its lock cannot commit:
// the database is its own fence. Safe for concurrent use.
type PGLock struct {
	cfg      PGConfig
	pool     *pgxpool.Pool
	table    string
	accounts int
}

var _ Approach = (*PGLock)(nil)

// advisoryClass is the first key of the two-key advisory locks.
const advisoryClass = 0x0bd0

// NewPGLock connects a pool to cfg.URL.
func NewPGLock(ctx context.Context, cfg PGConfig) (*PGLock, error) {
	var table string
	switch cfg.Mode {
	case PGRow:
		table = "ordo_lab_pg_row"
	case PGAdvisory:
		table = "ordo_lab_pg_advisory"
	case PGOptimistic:
		table = "ordo_lab_pg_optimistic"
	default:
		return nil, fmt.Errorf("lab: unknown PostgreSQL mode %q", cfg.Mode)
	}
	if cfg.URL == "" {
		return nil, errors.New("lab: pg: no URL")
	}
	if cfg.IdleTxTimeout == 0 {
		cfg.IdleTxTimeout = 2 * time.Second
	}
	if cfg.MaxConns == 0 {
		cfg.MaxConns = 32
	}
	if cfg.Retries == 0 {
		cfg.Retries = 100
	}
	pc, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("lab: pg: %w", err)
	}
	pc.MaxConns = cfg.MaxConns
	pc.ConnConfig.RuntimeParams["application_name"] = "ordo-lab-" + string(cfg.Mode)
	if cfg.IdleTxTimeout > 0 {
		pc.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"] = fmt.Sprint(cfg.IdleTxTimeout.Milliseconds())
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("lab: pg: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("lab: pg: %w", err)
	}
	return &PGLock{cfg: cfg, pool: pool, table: table}, nil
}

// Name implements Approach.
func (p *PGLock) Name() string { return string(p.cfg.Mode) }

// Setup implements Approach.
func (p *PGLock) Setup(ctx context.Context, accounts int, initial int64) error {
	p.accounts = accounts
	_, err := p.pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+p.table+` (
		id integer PRIMARY KEY, balance bigint NOT NULL, version bigint NOT NULL DEFAULT 0)`)
	if err != nil {
		return err
	}
	if _, err := p.pool.Exec(ctx, `TRUNCATE `+p.table); err != nil {
		return err
	}
	_, err = p.pool.Exec(ctx, `INSERT INTO `+p.table+` (id, balance) SELECT g, $2 FROM generate_series(0, $1 - 1) g`, accounts, initial)
	return err
}

// Balances implements Approach.
func (p *PGLock) Balances(ctx context.Context) ([]int64, error) {
	rows, err := p.pool.Query(ctx, `SELECT id, balance FROM `+p.table+` ORDER BY id`)
	if err != nil {
		return nil, err
	}
	out := make([]int64, p.accounts)
	n := 0
	var id int
	var b int64
	_, err = pgx.ForEachRow(rows, []any{&id, &b}, func() error {
		if id < 0 || id >= p.accounts {
			return fmt.Errorf("lab: pg: unexpected account %d", id)
		}
		out[id] = b
		n++
		return nil
	})
	if err != nil {
		return nil, err
	}
	if n != p.accounts {
		return nil, fmt.Errorf("lab: pg: %d accounts, want %d", n, p.accounts)
	}
	return out, nil
}

// Transfer implements Approach.
func (p *PGLock) Transfer(ctx context.Context, from, to int, amount int64) error {
	if p.cfg.Mode == PGOptimistic {
		return p.optimistic(ctx, from, to, amount)
	}
	tx, err := p.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("%w: begin: %w", ErrAborted, err)
	}
	defer rollback(ctx, tx)
	lo, hi := sortedPair(from, to)
	var b [2]int64 // from, to
	for _, i := range []int{lo, hi} {
		var v int64
		switch p.cfg.Mode {
		case PGRow:
			err = tx.QueryRow(ctx, `SELECT balance FROM `+p.table+` WHERE id = $1 FOR UPDATE`, i).Scan(&v)
		default:
			if _, err = tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, $2)`, advisoryClass, i); err == nil {
				err = tx.QueryRow(ctx, `SELECT balance FROM `+p.table+` WHERE id = $1`, i).Scan(&v)
			}
		}
		if err != nil {
			return fmt.Errorf("%w: lock account %d: %w", ErrAborted, i, err)
		}
		if i == from {
			b[0] = v
		} else {
			b[1] = v
		}
	}
	if b[0] < amount {
		return ErrInsufficientFunds
	}
	Stall(ctx)
	for _, u := range [][2]int64{{int64(from), b[0] - amount}, {int64(to), b[1] + amount}} {
		if _, err := tx.Exec(ctx, `UPDATE `+p.table+` SET balance = $2, version = version + 1 WHERE id = $1`, u[0], u[1]); err != nil {
			return fmt.Errorf("%w: write: %w", ErrAborted, err)
		}
	}
	return commit(ctx, tx)
}

func (p *PGLock) optimistic(ctx context.Context, from, to int, amount int64) error {
	for attempt := 0; attempt < p.cfg.Retries; attempt++ {
		rows, err := p.pool.Query(ctx, `SELECT id, balance, version FROM `+p.table+` WHERE id = ANY($1)`, []int32{int32(from), int32(to)})
		if err != nil {
			return fmt.Errorf("%w: read: %w", ErrAborted, err)
		}
		var b, ver [2]int64
		var id int
		var bal, v int64
		n := 0
		_, err = pgx.ForEachRow(rows, []any{&id, &bal, &v}, func() error {
			k := 1
			if id == from {
				k = 0
			}
			b[k], ver[k] = bal, v
			n++
			return nil
		})
		if err != nil || n != 2 {
			return fmt.Errorf("%w: read: %d rows, %v", ErrAborted, n, err)
		}
		if b[0] < amount {
			return ErrInsufficientFunds
		}
		if attempt == 0 {
			Stall(ctx)
		}
		ok, err := p.casBoth(ctx, from, to, b[0]-amount, b[1]+amount, ver)
		if err != nil || ok {
			return err
		}
		if err := backoff(ctx, attempt); err != nil {
			return fmt.Errorf("%w: %w", ErrAborted, err)
		}
	}
	return fmt.Errorf("%w: %d optimistic conflicts", ErrAborted, p.cfg.Retries)
}

// casBoth writes both balances if both versions are unchanged, in one
// transaction; false means a conflict and nothing written.
func (p *PGLock) casBoth(ctx context.Context, from, to int, bf, bt int64, ver [2]int64) (bool, error) {
	tx, err := p.pool.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("%w: begin: %w", ErrAborted, err)
	}
	defer rollback(ctx, tx)
	// In id order, like the lock designs, so that two writers never
	// deadlock on each other's rows.
	writes := [][3]int64{{int64(from), bf, ver[0]}, {int64(to), bt, ver[1]}}
	if to < from {
		writes[0], writes[1] = writes[1], writes[0]
	}
	for _, w := range writes {
		tag, err := tx.Exec(ctx, `UPDATE `+p.table+` SET balance = $2, version = version + 1 WHERE id = $1 AND version = $3`, w[0], w[1], w[2])
		if err != nil {
			return false, fmt.Errorf("%w: write: %w", ErrAborted, err)
		}
		if tag.RowsAffected() != 1 {
			return false, nil // rolled back by the deferred call
		}
	}
	return true, commit(ctx, tx)
}

func rollback(ctx context.Context, tx pgx.Tx) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	_ = tx.Rollback(ctx) // a no-op after Commit; otherwise the server rolls back a dead session anyway
}

// commit commits; a refused commit (the transaction had failed) had no
// effect, any other commit error leaves the outcome unknown.
func commit(ctx context.Context, tx pgx.Tx) error {
	err := tx.Commit(ctx)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, pgx.ErrTxCommitRollback):
		return fmt.Errorf("%w: commit rolled back: %w", ErrAborted, err)
	default:
		return fmt.Errorf("lab: pg: commit: %w", err)
	}
}

// WALPosition implements WALReader.
func (p *PGLock) WALPosition(ctx context.Context) (uint64, bool, error) {
	pos, err := PGWALPosition(ctx, p.pool)
	return pos, true, err
}

// Checkpoint implements WALReader.
func (p *PGLock) Checkpoint(ctx context.Context) error {
	if _, err := p.pool.Exec(ctx, "CHECKPOINT"); err != nil {
		return fmt.Errorf("lab: pg: %w", err)
	}
	return nil
}

// PGWALPosition reads the server's write-ahead log insert position, in
// bytes (pg_current_wal_lsn), through q.
func PGWALPosition(ctx context.Context, q interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}) (uint64, error) {
	var pos int64
	if err := q.QueryRow(ctx, `SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint`).Scan(&pos); err != nil {
		return 0, fmt.Errorf("lab: pg: %w", err)
	}
	if pos < 0 {
		return 0, fmt.Errorf("lab: pg: WAL position %d", pos)
	}
	return uint64(pos), nil
}

// Close implements Approach.
func (p *PGLock) Close() error {
	p.pool.Close()
	return nil
}
