package ledger

import (
	"context"
	"fmt"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/proto/bankpb"
)

// SubmitAndWait submits transfer id (request ID derived from it, so a
// resubmission is recognised) and polls its status until it is final or
// ctx ends. It returns the final state; a rejected or compensated transfer
// is a final state, not an error. Errors are call failures (ctx ended,
// invalid input: the outcome may then be unknown).
func SubmitAndWait(ctx context.Context, inv actors.Invoker, id, from, to string, amount int64) (*bankpb.TransferState, error) {
	st, err := actors.Call[*bankpb.TransferState](ctx, inv, TransferRef(id),
		&bankpb.SubmitTransfer{From: from, To: to, Amount: amount}, actors.WithRequestID(id+":submit"))
	if err != nil {
		return nil, err
	}
	return Await(ctx, inv, id, st)
}

// Await polls transfer id until its status is final, starting from st
// (nil to read it first). Polls back off from 1ms to 50ms.
func Await(ctx context.Context, inv actors.Invoker, id string, st *bankpb.TransferState) (*bankpb.TransferState, error) {
	wait := time.Millisecond
	for st == nil || !Terminal(st.Status) {
		if st != nil {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, fmt.Errorf("ledger: transfer %s still %s: %w", id, st.Status, ctx.Err())
			case <-t.C:
			}
			if wait < 10*time.Millisecond {
				wait *= 2
			}
		}
		var err error
		st, err = actors.Call[*bankpb.TransferState](ctx, inv, TransferRef(id), &bankpb.GetTransfer{})
		if err != nil {
			return nil, err
		}
	}
	return st, nil
}
