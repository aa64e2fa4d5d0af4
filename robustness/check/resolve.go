package check

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/ordo-actors/ordo/robustness/history"
)

// Unresolved returns the transfers recorded as unknown whose ID resolved
// does not settle as history.OK or history.Rejected, in history order, one
// per ID. resolved may be nil.
func Unresolved(ops []history.Op, resolved map[string]history.Outcome) []history.Op {
	var out []history.Op
	seen := map[string]bool{}
	for _, op := range ops {
		if op.Op != history.OpTransfer || op.Outcome != history.Unknown || seen[op.ID] {
			continue
		}
		seen[op.ID] = true
		if r := resolved[op.ID]; r == history.OK || r == history.Rejected {
			continue
		}
		out = append(out, op)
	}
	return out
}

// SubmitFunc re-submits transfer op with its original ID, From, To and
// Amount and returns the outcome the bank answers: history.OK,
// history.Rejected, or history.Unknown (or an error) when the answer is
// still not definite. It must be safe to call again for the same op.
type SubmitFunc func(ctx context.Context, op history.Op) (history.Outcome, error)

// Resolve re-submits every unknown transfer of ops (see Unresolved) through
// submit until each has a definite outcome, and returns the outcomes by ID
// for Input.Resolved. Attempts that give no definite outcome are retried
// with exponential backoff and full jitter (10ms up to 1s). Transfers are
// resolved one at a time. When ctx ends first, Resolve returns the outcomes
// learned so far with an error wrapping ctx.Err() and naming how many are
// left.
func Resolve(ctx context.Context, ops []history.Op, submit SubmitFunc) (map[string]history.Outcome, error) {
	const (
		minBackoff = 10 * time.Millisecond
		maxBackoff = time.Second
	)
	pending := Unresolved(ops, nil)
	resolved := make(map[string]history.Outcome, len(pending))
	for i, op := range pending {
		backoff := minBackoff
		for {
			outcome, err := submit(ctx, op)
			if err == nil && (outcome == history.OK || outcome == history.Rejected) {
				resolved[op.ID] = outcome
				break
			}
			wait := time.Duration(rand.Int64N(int64(backoff)) + 1)
			backoff = min(2*backoff, maxBackoff)
			timer := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				timer.Stop()
				return resolved, fmt.Errorf("check: resolve: %d of %d unknown transfers unresolved: %w", len(pending)-i, len(pending), ctx.Err())
			case <-timer.C:
			}
		}
	}
	return resolved, nil
}
