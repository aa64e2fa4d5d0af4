package lab

import (
	"context"
	"errors"
	"time"
)

// ErrInsufficientFunds is returned (possibly wrapped) by Transfer when the
// source account cannot cover the amount. The transfer had no effect.
var ErrInsufficientFunds = errors.New("lab: insufficient funds")

// ErrAborted is returned (possibly wrapped) by Transfer when the transfer
// certainly had no effect: a fenced write was refused, a lock was lost
// before anything was written, an optimistic retry budget ran out. Any other
// error means the outcome is unknown.
var ErrAborted = errors.New("lab: transfer aborted")

// Approach is one way of transferring money between accounts, with the
// balances stored in its own system. Accounts are numbered 0..accounts-1.
//
// Transfer must be safe for concurrent use; Setup, Balances and Close are
// called with no Transfer in flight.
type Approach interface {
	// Name identifies the approach in results, e.g. "redis".
	Name() string
	// Setup creates or resets the accounts, each with the initial balance,
	// and releases any lock left behind by an earlier run.
	Setup(ctx context.Context, accounts int, initial int64) error
	// Transfer moves amount from one account to another (from != to,
	// amount > 0). nil means done; an error matching ErrInsufficientFunds
	// means rejected with no effect; an error matching ErrAborted means
	// failed with no effect; any other error means the outcome is unknown.
	// A lock-based approach calls Stall (or Pausing) after taking
	// its locks and reading, before writing.
	Transfer(ctx context.Context, from, to int, amount int64) error
	// Balances reads every account's balance, indexed by account.
	Balances(ctx context.Context) ([]int64, error)
	// Close releases the approach's clients. It does not stop servers it
	// did not start.
	Close() error
}

// WALReader is implemented by approaches that keep their data in
// PostgreSQL. WALPosition returns the server's write-ahead log insert
// position in bytes (pg_current_wal_lsn), from which Run reports the WAL
// each run wrote (Result.WALBytes); ok is false when this instance of
// the approach keeps no data in PostgreSQL. Checkpoint makes the server
// write a checkpoint (CHECKPOINT; a superuser or a member of
// pg_checkpoint may): Run has one written before each measured run, so
// that no run pays for a checkpoint the setup or the run before it made
// due, and each starts from the same state of the log (the first change
// to each page after a checkpoint logs the whole page).
type WALReader interface {
	WALPosition(ctx context.Context) (pos uint64, ok bool, err error)
	Checkpoint(ctx context.Context) error
}

// WorkCounter is implemented by approaches that count their own work
// (ordo: its store Saves and records, the calls its processes send each
// other). WorkCounts returns running totals, always the same names in the
// same order; Run reads them before and after the measured window and
// reports each difference per acknowledged transfer (Result.Work). It is
// called while no transfer runs, and must be cheap and never block.
type WorkCounter interface {
	WorkCounts() []Count
}

// Count is one running total of an approach's work (WorkCounter), or,
// in Result.Work, its growth over a run.
type Count struct {
	Name string // a few lower-case words, e.g. "store saves"
	N    uint64
	// PerTransfer is N per acknowledged transfer (in Result.Work; 0 when
	// none was).
	PerTransfer float64 `json:",omitempty"`
}

type pauseKey struct{}

type pause struct {
	d       time.Duration
	started func()
}

// WithPause returns a context carrying a simulated process pause of d for
// the transfer it is passed to. Run calls it; a test of an approach may too.
func WithPause(ctx context.Context, d time.Duration) context.Context {
	return WithPauseFunc(ctx, d, nil)
}

// WithPauseFunc is WithPause with a function called when the pause starts
// (from the transfer's goroutine), so a test can act while the transfer is
// paused with its locks taken.
func WithPauseFunc(ctx context.Context, d time.Duration, started func()) context.Context {
	if d <= 0 {
		return ctx
	}
	return context.WithValue(ctx, pauseKey{}, pause{d: d, started: started})
}

// Pausing is called by an approach at its pause point: it returns the pause
// attached to ctx (0 when none) and reports the start of the pause. The
// approach then pauses for that long, stopping whatever a real process
// pause would stop; Stall does both for approaches with nothing to stop.
func Pausing(ctx context.Context) time.Duration {
	p, ok := ctx.Value(pauseKey{}).(pause)
	if !ok {
		return 0
	}
	if p.started != nil {
		p.started()
	}
	return p.d
}

// Stall calls Pausing and sleeps for the pause, if any, and reports how
// long. Like a real pause it ignores ctx's cancellation: the process that
// was paused does not know it was.
func Stall(ctx context.Context) time.Duration {
	d := Pausing(ctx)
	if d > 0 {
		time.Sleep(d)
	}
	return d
}
