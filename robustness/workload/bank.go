package workload

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/examples/bank/ledger"
	"github.com/ordo-actors/ordo/persistence"
	"github.com/ordo-actors/ordo/proto/bankpb"
	"github.com/ordo-actors/ordo/robustness/check"
	"github.com/ordo-actors/ordo/robustness/history"
)

// parallel runs f(i) for i in [0, n) on up to workers goroutines and
// returns the errors joined. It stops handing out work once ctx ends.
func parallel(ctx context.Context, n, workers int, f func(i int) error) error {
	var (
		mu   sync.Mutex
		errs []error
		next int
		wg   sync.WaitGroup
	)
	for range min(workers, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				i := next
				next++
				stop := i >= n || len(errs) > 0 || ctx.Err() != nil
				mu.Unlock()
				if stop {
					return
				}
				if err := f(i); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if len(errs) == 0 && ctx.Err() != nil && next < n {
		return ctx.Err()
	}
	return errors.Join(errs...)
}

// Open opens accounts 0..accounts-1 with the initial balance, workers at a
// time, and returns how many already existed with another balance (Open is
// idempotent: an open account keeps its balance). Each call is retried by
// the cluster until ctx ends.
func Open(ctx context.Context, inv actors.Invoker, accounts int, initial int64, workers int) (mismatched int, err error) {
	var mu sync.Mutex
	client := bankpb.NewAccountServiceClient(inv)
	err = parallel(ctx, accounts, workers, func(i int) error {
		name := history.AccountName(i)
		b, err := client.Open(ctx, name, &bankpb.Open{Initial: initial},
			actors.WithRequestID(fmt.Sprintf("open:%s:%d", name, initial)))
		if err != nil {
			return fmt.Errorf("open %s: %w", name, err)
		}
		if b.Amount != initial {
			mu.Lock()
			mismatched++
			mu.Unlock()
		}
		return nil
	})
	return mismatched, err
}

// Balances reads the balance of accounts 0..accounts-1, workers at a time.
func Balances(ctx context.Context, inv actors.Invoker, accounts, workers int) (map[string]int64, error) {
	var mu sync.Mutex
	out := make(map[string]int64, accounts)
	client := bankpb.NewAccountServiceClient(inv)
	err := parallel(ctx, accounts, workers, func(i int) error {
		name := history.AccountName(i)
		b, err := client.GetBalance(ctx, name, &bankpb.GetBalance{})
		if err != nil {
			return fmt.Errorf("balance of %s: %w", name, err)
		}
		mu.Lock()
		out[name] = b.Amount
		mu.Unlock()
		return nil
	})
	return out, err
}

// Resolve re-submits every transfer ops recorded as unknown, with its same
// ID, until each has a definite outcome (check.Resolve's loop, workers
// loops at a time), each attempt bounded by attempt.
func Resolve(ctx context.Context, inv actors.Invoker, ops []history.Op, workers int, attempt time.Duration) (map[string]history.Outcome, error) {
	pending := check.Unresolved(ops, nil)
	submit := func(ctx context.Context, op history.Op) (history.Outcome, error) {
		actx, cancel := context.WithTimeout(ctx, attempt)
		defer cancel()
		st, err := ledger.SubmitAndWait(actx, inv, op.ID, op.From, op.To, op.Amount)
		outcome, _ := TransferOutcome(st, err)
		if outcome == history.Unknown {
			if err == nil {
				err = errors.New("not final yet")
			}
			return history.Unknown, err
		}
		return outcome, nil
	}
	resolved := make(map[string]history.Outcome, len(pending))
	if len(pending) == 0 {
		return resolved, nil
	}
	workers = max(1, min(workers, len(pending)))
	parts := make([][]history.Op, workers)
	for i, op := range pending {
		parts[i%workers] = append(parts[i%workers], op)
	}
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for _, part := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := check.Resolve(ctx, part, submit)
			mu.Lock()
			defer mu.Unlock()
			for id, o := range r {
				resolved[id] = o
			}
			if err != nil {
				errs = append(errs, err)
			}
		}()
	}
	wg.Wait()
	return resolved, errors.Join(errs...)
}

// VerifyConfig configures Verify.
type VerifyConfig struct {
	// Accounts and InitialBalance describe the bank.
	Accounts       int
	InitialBalance int64
	// Workers bounds concurrent calls. Default 32.
	Workers int
	// Attempt bounds one resolving attempt. Default 5s.
	Attempt time.Duration
	// LinTimeout bounds the linearizability search; 0 is check's default.
	LinTimeout time.Duration
	// VisualizationPath is where porcupine's HTML goes on a
	// linearizability failure; "" writes none.
	VisualizationPath string
	// Journal, when set, is the store of the cluster's entities: every
	// account's statement is built from it (Statements) and checked
	// against the history and the balances (check's statements
	// invariant). Nil skips that invariant.
	Journal persistence.Journal
}

// Verify resolves the unknown transfers of ops, reads every balance (and,
// with cfg.Journal, every statement) and checks the history (check.Check).
// The error is about the steps before the check (resolving, reading); a
// check that fails is a Report that is not OK.
func Verify(ctx context.Context, inv actors.Invoker, ops []history.Op, cfg VerifyConfig) (check.Report, error) {
	if cfg.Workers <= 0 {
		cfg.Workers = 32
	}
	if cfg.Attempt <= 0 {
		cfg.Attempt = 5 * time.Second
	}
	resolved, err := Resolve(ctx, inv, ops, cfg.Workers, cfg.Attempt)
	if err != nil {
		return check.Report{}, err
	}
	final, err := Balances(ctx, inv, cfg.Accounts, cfg.Workers)
	if err != nil {
		return check.Report{}, err
	}
	var statements map[string][]check.Entry
	if cfg.Journal != nil {
		// Read after the balances: every transfer has its final outcome,
		// so no money moves any more (only forgets, which no statement
		// shows, may still come).
		if statements, err = Statements(ctx, cfg.Journal, cfg.Accounts, cfg.Workers); err != nil {
			return check.Report{}, err
		}
	}
	return check.Check(check.Input{Ops: ops, Accounts: cfg.Accounts, InitialBalance: cfg.InitialBalance,
		Final: final, Resolved: resolved, Timeout: cfg.LinTimeout, VisualizationPath: cfg.VisualizationPath,
		Statements: statements}), nil
}

// Statements builds the statement of accounts 0..accounts-1 from the
// account journal of j, workers accounts at a time, each with a projection
// of its own journal (ledger.BuildStatements), for check.Input.Statements.
// An account without events has no statement.
func Statements(ctx context.Context, j persistence.Journal, accounts, workers int) (map[string][]check.Entry, error) {
	model := ledger.NewStatements()
	offsets := &actors.MemoryOffsets{}
	err := parallel(ctx, accounts, workers, func(i int) error {
		name := history.AccountName(i)
		if _, err := ledger.BuildStatements(ctx, j, name, model, offsets); err != nil {
			return fmt.Errorf("statement of %s: %w", name, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make(map[string][]check.Entry, accounts)
	for _, name := range model.Accounts() {
		lines := model.Statement(name)
		es := make([]check.Entry, len(lines))
		for i, l := range lines {
			es[i] = check.Entry{Seq: l.Seq, Type: l.Type, TransferID: l.TransferID, Amount: l.Amount, Balance: l.Balance}
		}
		out[name] = es
	}
	return out, nil
}
