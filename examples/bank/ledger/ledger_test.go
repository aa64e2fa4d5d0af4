package ledger_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/examples/bank/ledger"
	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/ordo-actors/ordo/persistence/memory"
	"github.com/ordo-actors/ordo/proto/bankpb"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newHost(t *testing.T) *actors.Host {
	t.Helper()
	cfg := actors.DefaultLocalConfig()
	cfg.Shards = 16
	h, err := actors.NewHost(cfg, actors.HostDeps{Store: memory.New()}, ledger.Account, ledger.Transfer)
	require.NoError(t, err)
	require.NoError(t, h.Start(context.Background()))
	for s := range cfg.Shards {
		require.NoError(t, h.Own(uint32(s), 1))
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, h.Shutdown(ctx))
	})
	return h
}

// hostWithAB returns a host with accounts a (100) and b (0) open, and a
// context for the test's calls, ended 30 s on or with the test.
func hostWithAB(t *testing.T) (*actors.Host, context.Context) {
	t.Helper()
	h := newHost(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	open(t, h, "a", 100)
	open(t, h, "b", 0)
	return h, ctx
}

func open(t *testing.T, h *actors.Host, id string, initial int64) {
	t.Helper()
	_, err := bankpb.NewAccountServiceClient(h).Open(context.Background(), id, &bankpb.Open{Initial: initial})
	require.NoError(t, err)
}

func balance(t *testing.T, h *actors.Host, id string) int64 {
	t.Helper()
	b, err := bankpb.NewAccountServiceClient(h).GetBalance(context.Background(), id, &bankpb.GetBalance{})
	require.NoError(t, err)
	return b.Amount
}

func TestTransferOutcomes(t *testing.T) {
	h, ctx := hostWithAB(t)

	st, err := ledger.SubmitAndWait(ctx, h, "t1", "a", "b", 30)
	require.NoError(t, err)
	require.Equal(t, bankpb.TransferStatus_TRANSFER_STATUS_COMPLETED, st.Status)
	require.EqualValues(t, 70, balance(t, h, "a"))
	require.EqualValues(t, 30, balance(t, h, "b"))

	// Resubmitting the same transfer applies nothing more.
	st, err = ledger.SubmitAndWait(ctx, h, "t1", "a", "b", 30)
	require.NoError(t, err)
	require.Equal(t, bankpb.TransferStatus_TRANSFER_STATUS_COMPLETED, st.Status)
	require.EqualValues(t, 70, balance(t, h, "a"))

	// Same ID, other parameters: refused.
	_, err = ledger.SubmitAndWait(ctx, h, "t1", "a", "b", 31)
	require.ErrorIs(t, err, actors.ErrBadRequest)
	_, err = bankpb.NewTransferServiceClient(h).SubmitTransfer(ctx, ledger.TransferID("a", "t1"),
		&bankpb.SubmitTransfer{From: "a", To: "b", Amount: 31}, actors.WithRequestID("another-id"))
	requireCode(t, err, ledger.CodeConflict)

	// Insufficient funds, unknown source: rejected, no effect. Unknown
	// destination: debited, then refunded (compensated), no net effect.
	for _, c := range []struct {
		id, from, to string
		amount       int64
		status       bankpb.TransferStatus
		code         string
	}{
		{"t2", "a", "b", 1000, bankpb.TransferStatus_TRANSFER_STATUS_REJECTED, ledger.CodeInsufficientFunds},
		{"t3", "a", "nobody", 10, bankpb.TransferStatus_TRANSFER_STATUS_COMPENSATED, ledger.CodeUnknownAccount},
		{"t4", "nobody", "b", 10, bankpb.TransferStatus_TRANSFER_STATUS_REJECTED, ledger.CodeUnknownAccount},
	} {
		st, err := ledger.SubmitAndWait(ctx, h, c.id, c.from, c.to, c.amount)
		require.NoError(t, err)
		require.Equal(t, c.status, st.Status, c.id)
		require.Equal(t, c.code, st.Error, c.id)
	}
	_, err = ledger.SubmitAndWait(ctx, h, "t5", "a", "a", 10)
	requireCode(t, err, ledger.CodeSameAccount)
	_, err = ledger.SubmitAndWait(ctx, h, "t6", "a", "b", 0)
	requireCode(t, err, ledger.CodeInvalidAmount)
	_, err = ledger.SubmitAndWait(ctx, h, "t7", "a", "b", -5)
	requireCode(t, err, ledger.CodeInvalidAmount)
	require.EqualValues(t, 70, balance(t, h, "a"))
	require.EqualValues(t, 30, balance(t, h, "b"))

	// Account operations validate too.
	accounts := bankpb.NewAccountServiceClient(h)
	_, err = accounts.Withdraw(ctx, "a", &bankpb.Withdraw{Amount: 71})
	requireCode(t, err, ledger.CodeInsufficientFunds)
	_, err = accounts.Deposit(ctx, "a", &bankpb.Deposit{Amount: 0})
	requireCode(t, err, ledger.CodeInvalidAmount)
	_, err = accounts.GetBalance(ctx, "zz", &bankpb.GetBalance{})
	requireCode(t, err, ledger.CodeUnknownAccount)
	_, err = bankpb.NewTransferServiceClient(h).GetTransfer(ctx, ledger.TransferID("a", "never"), &bankpb.GetTransfer{})
	requireCode(t, err, ledger.CodeUnknownTransfer)
}

// A settled transfer does not stay in memory: its saga passivates once
// its outcome is durable (completed, rejected or compensated), leaving the
// accounts active, and a resubmission activates it again with the same
// outcome.
func TestSettledTransfersPassivate(t *testing.T) {
	h, ctx := hostWithAB(t)
	submitEachOutcome(ctx, t, h, "p")
	// The accounts a, b and nobody (activated by the credit it refused)
	// stay; the three sagas go, with no message and no idle timeout.
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if st := h.Stats(); st.Active != 3 || st.Passivations != 3 {
			return fmt.Errorf("%d active, %d passivated; want 3 and 3", st.Active, st.Passivations)
		}
		return nil
	})
	activations := h.Stats().Activations
	st, err := ledger.SubmitAndWait(ctx, h, "p1", "a", "b", 30)
	require.NoError(t, err)
	require.Equal(t, bankpb.TransferStatus_TRANSFER_STATUS_COMPLETED, st.Status)
	require.Equal(t, activations+1, h.Stats().Activations, "the resubmission did not activate the saga again")
	require.EqualValues(t, 70, balance(t, h, "a"))
	require.EqualValues(t, 30, balance(t, h, "b"))
}

// submitEachOutcome submits, from account a (100 or more), a transfer of
// each outcome under the IDs prefix1 to prefix3: completed (30 to b),
// rejected (1000 to b) and compensated (10 to the unknown account nobody).
func submitEachOutcome(ctx context.Context, t *testing.T, h *actors.Host, prefix string) {
	t.Helper()
	for i, c := range []struct {
		to     string
		amount int64
		status bankpb.TransferStatus
	}{
		{"b", 30, bankpb.TransferStatus_TRANSFER_STATUS_COMPLETED},
		{"b", 1000, bankpb.TransferStatus_TRANSFER_STATUS_REJECTED},
		{"nobody", 10, bankpb.TransferStatus_TRANSFER_STATUS_COMPENSATED},
	} {
		id := fmt.Sprintf("%s%d", prefix, i+1)
		st, err := ledger.SubmitAndWait(ctx, h, id, "a", c.to, c.amount)
		require.NoError(t, err)
		require.Equal(t, c.status, st.Status, id)
	}
}

// The kind names are part of every stored entity's key, and a transfer's
// entity ID places it with its source account.
func TestKindNamesAndTransferID(t *testing.T) {
	require.Equal(t, "account", ledger.Account.Name())
	require.Equal(t, "transfer", ledger.Transfer.Name())
	require.Equal(t, "{account/a}t1", ledger.TransferID("a", "t1"))
	require.Equal(t, actors.Ref{Kind: "transfer", ID: "{account/a}t1"}, ledger.TransferRef("a", "t1"))
	require.Equal(t, "", ledger.TransferID("a}b", "t1"))
	require.Error(t, ledger.TransferRef("a}b", "t1").Validate())
}

func requireCode(t *testing.T, err error, code string) {
	t.Helper()
	var ae *actors.Error
	require.ErrorAs(t, err, &ae)
	require.Equal(t, code, ae.HandlerCode, "%v", err)
}

// Concurrent transfers among few accounts conserve money, never go
// negative, and account for every completed transfer exactly once.
func TestConcurrentTransfersConserveMoney(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	h := newHost(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const accounts, initial, clients, perClient = 5, 100, 8, 40
	for i := 0; i < accounts; i++ {
		open(t, h, fmt.Sprintf("acct-%d", i), initial)
	}
	var mu sync.Mutex
	delta := make([]int64, accounts)
	var wg sync.WaitGroup
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(c)))
			for i := 0; i < perClient; i++ {
				from, to := rng.IntN(accounts), rng.IntN(accounts)
				if from == to {
					continue
				}
				amount := int64(1 + rng.IntN(60))
				st, err := ledger.SubmitAndWait(ctx, h, fmt.Sprintf("t-%d-%d", c, i),
					fmt.Sprintf("acct-%d", from), fmt.Sprintf("acct-%d", to), amount)
				if err != nil {
					t.Errorf("seed %d: %v", seed, err)
					return
				}
				if st.Status == bankpb.TransferStatus_TRANSFER_STATUS_COMPLETED {
					mu.Lock()
					delta[from] -= amount
					delta[to] += amount
					mu.Unlock()
				}
			}
		}(c)
	}
	wg.Wait()
	total := int64(0)
	for i := 0; i < accounts; i++ {
		b := balance(t, h, fmt.Sprintf("acct-%d", i))
		require.GreaterOrEqual(t, b, int64(0), "seed %d", seed)
		require.Equal(t, initial+delta[i], b, "seed %d: account %d", seed, i)
		total += b
	}
	require.EqualValues(t, accounts*initial, total, "seed %d", seed)
}
