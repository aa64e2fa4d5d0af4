package ledger_test

import (
	"context"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/examples/bank/ledger"
	"github.com/ordo-actors/ordo/persistence"
	"github.com/ordo-actors/ordo/persistence/memory"
	pgstore "github.com/ordo-actors/ordo/persistence/pgstore"
	"github.com/ordo-actors/ordo/persistence/pgstore/pgtest"
	"github.com/ordo-actors/ordo/proto/bankpb"
	"github.com/stretchr/testify/require"
)

// Statements built by a projection of the account journal: every money
// event with its running balance, which ends at the account's balance;
// delivered again, nothing changes; resumed, only what is new is added.
func TestStatements(t *testing.T) {
	store := memory.New()
	defer store.Close()
	testStatements(t, store)
}

// The same with the PostgreSQL store (its journal, its feed).
func TestStatementsPostgres(t *testing.T) {
	cfg := pgstore.DefaultConfig()
	cfg.URL, cfg.Schema = pgtest.URL(t), pgtest.Schema(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store, err := pgstore.Open(ctx, cfg)
	require.NoError(t, err)
	defer store.Close()
	testStatements(t, store)
}

func testStatements(t *testing.T, store persistence.Journal) {
	cfg := actors.DefaultLocalConfig()
	cfg.Shards = 16
	h, err := actors.NewHost(cfg, actors.HostDeps{Store: store}, ledger.Account, ledger.Transfer)
	require.NoError(t, err)
	require.NoError(t, h.Start(context.Background()))
	for s := range uint32(cfg.Shards) {
		require.NoError(t, h.Own(s, 1))
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, h.Shutdown(ctx))
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	open(t, h, "a", 100)
	open(t, h, "b", 0)
	open(t, h, "a", 100) // again: no event
	submitEachOutcome(ctx, t, h, "t")
	accounts := bankpb.NewAccountServiceClient(h)
	_, err = accounts.Deposit(ctx, "a", &bankpb.Deposit{Amount: 5})
	require.NoError(t, err)
	_, err = accounts.Withdraw(ctx, "b", &bankpb.Withdraw{Amount: 10})
	require.NoError(t, err)

	want := map[string][]ledger.Line{
		"a": {
			{Type: ledger.LineOpened, Amount: 100, Balance: 100},
			{Type: ledger.LineDebit, TransferID: "t1", Amount: -30, Balance: 70},
			{Type: ledger.LineDebit, TransferID: "t3", Amount: -10, Balance: 60},
			{Type: ledger.LineRefund, TransferID: "t3", Amount: 10, Balance: 70},
			{Type: ledger.LineDeposit, Amount: 5, Balance: 75},
		},
		"b": {
			{Type: ledger.LineOpened, Amount: 0, Balance: 0},
			{Type: ledger.LineCredit, TransferID: "t1", Amount: 30, Balance: 30},
			{Type: ledger.LineWithdrawal, Amount: -10, Balance: 20},
		},
	}
	lines := func(s *ledger.Statements, id string) []ledger.Line {
		out := s.Statement(id)
		for i := range out {
			require.NotZero(t, out[i].Seq)
			if i > 0 {
				require.Greater(t, out[i].Seq, out[i-1].Seq)
			}
			out[i].Seq = 0
		}
		return out
	}
	offsets := &actors.MemoryOffsets{}
	all, err := ledger.BuildStatements(ctx, store, "", nil, offsets)
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b"}, all.Accounts())
	for id, w := range want {
		require.Equal(t, w, lines(all, id), id)
		require.Equal(t, balance(t, h, id), w[len(w)-1].Balance, id)
		one, err := ledger.BuildStatements(ctx, store, id, nil, nil)
		require.NoError(t, err)
		require.Equal(t, w, lines(one, id), "%s alone", id)
	}

	// The same events again (a projection from the start): no change.
	again, err := ledger.BuildStatements(ctx, store, "", all, &actors.MemoryOffsets{})
	require.NoError(t, err)
	require.Equal(t, want["a"], lines(again, "a"))

	// Resumed from the stored offset: only the new events.
	_, err = accounts.Deposit(ctx, "b", &bankpb.Deposit{Amount: 1})
	require.NoError(t, err)
	resumed, err := ledger.BuildStatements(ctx, store, "", all, offsets)
	require.NoError(t, err)
	require.Equal(t, append(want["b"], ledger.Line{Type: ledger.LineDeposit, Amount: 1, Balance: 21}), lines(resumed, "b"))
}
