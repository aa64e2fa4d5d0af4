package ledger_test

// Tests of the bank's own idempotency guards (beyond the runtime's dedup
// window), each written so that the guard's mutation in tools/mutants
// fails it.

import (
	"context"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/proto/bankpb"
	"github.com/stretchr/testify/require"
)

// S5: an account applies a transfer's debit and its credit once per
// transfer ID, even when they come under different request IDs (a saga
// step resent after the dedup window forgot the first, or by a new owner
// of the saga).
func TestGuardTransferStepsApplyOncePerTransferID(t *testing.T) {
	h := newHost(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	accounts := bankpb.NewAccountServiceClient(h)
	call := func(id string, msg *bankpb.Debit, requestID string) int64 {
		t.Helper()
		b, err := accounts.Debit(ctx, id, msg, actors.WithRequestID(requestID))
		require.NoError(t, err)
		return b.Amount
	}
	for _, id := range []string{"a", "b"} {
		_, err := accounts.Open(ctx, id, &bankpb.Open{Initial: 100})
		require.NoError(t, err)
	}

	require.EqualValues(t, 70, call("a", &bankpb.Debit{TransferId: "t1", Amount: 30}, "debit-1"))
	require.EqualValues(t, 70, call("a", &bankpb.Debit{TransferId: "t1", Amount: 30}, "debit-2"),
		"the same transfer's debit under another request ID moved money again")

	credit := func(requestID string) int64 {
		t.Helper()
		b, err := accounts.Credit(ctx, "b",
			&bankpb.Credit{TransferId: "t1", Amount: 30}, actors.WithRequestID(requestID))
		require.NoError(t, err)
		return b.Amount
	}
	require.EqualValues(t, 130, credit("credit-1"))
	require.EqualValues(t, 130, credit("credit-2"),
		"the same transfer's credit under another request ID moved money again")

	for id, want := range map[string]int64{"a": 70, "b": 130} {
		b, err := accounts.GetBalance(ctx, id, &bankpb.GetBalance{})
		require.NoError(t, err)
		require.EqualValues(t, want, b.Amount, "balance of %s", id)
	}
}
