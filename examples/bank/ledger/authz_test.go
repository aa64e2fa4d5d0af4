package ledger_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/cluster/clustertest"
	"github.com/ordo-actors/ordo/examples/bank/ledger"
	"github.com/ordo-actors/ordo/proto/bankpb"
	"github.com/stretchr/testify/require"
)

// On a TLS cluster, a client (client certificate) cannot move money with
// the saga's own steps: a direct Credit, Debit or Forget is refused with
// ErrPermissionDenied and changes nothing, not even an activation. The
// saga, whose steps travel between the nodes' entities, still moves it.
func TestClientCannotCreditDirectly(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := clustertest.Start(ctx, clustertest.Config{Kinds: []actors.Kind{ledger.Account, ledger.Transfer}, Nodes: 2, Dir: t.TempDir(), UnsafeNoFsync: true, Shards: 16})
	require.NoError(t, err)
	defer func() { require.NoError(t, cl.Close(ctx)) }()
	accounts := bankpb.NewAccountServiceClient(cl.Client())
	// b lives on the other node: the saga's Credit goes node to node.
	b := "b"
	for i := 0; cl.Owner(ledger.Account.Ref(b)) == cl.Owner(ledger.Account.Ref("a")); i++ {
		b = fmt.Sprint("b", i)
	}
	_, err = accounts.Open(ctx, "a", &bankpb.Open{Initial: 100})
	require.NoError(t, err)
	_, err = accounts.Open(ctx, b, &bankpb.Open{Initial: 0})
	require.NoError(t, err)

	activations := func() (n uint64) {
		for _, node := range cl.Nodes() {
			n += node.Status().Host.Activations
		}
		return n
	}
	before := activations()
	for _, id := range []string{"a", b, "never-touched"} {
		_, err = accounts.Credit(ctx, id, &bankpb.Credit{TransferId: "free-money", Amount: 1_000_000})
		require.ErrorIs(t, err, actors.ErrPermissionDenied, "Credit to %s", id)
		_, err = accounts.Debit(ctx, id, &bankpb.Debit{TransferId: "theft", Amount: 1})
		require.ErrorIs(t, err, actors.ErrPermissionDenied, "Debit of %s", id)
		_, err = accounts.Forget(ctx, id, &bankpb.Forget{TransferId: "t"})
		require.ErrorIs(t, err, actors.ErrPermissionDenied, "Forget at %s", id)
	}
	require.Equal(t, before, activations(), "a refused call activated an entity")
	for id, want := range map[string]int64{"a": 100, b: 0} {
		bal, err := accounts.GetBalance(ctx, id, &bankpb.GetBalance{})
		require.NoError(t, err)
		require.EqualValues(t, want, bal.Amount, "balance of %s", id)
	}

	st, err := ledger.SubmitAndWait(ctx, cl.Client(), "t1", "a", b, 30)
	require.NoError(t, err)
	require.Equal(t, bankpb.TransferStatus_TRANSFER_STATUS_COMPLETED, st.Status)
	for id, want := range map[string]int64{"a": 70, b: 30} {
		bal, err := accounts.GetBalance(ctx, id, &bankpb.GetBalance{})
		require.NoError(t, err)
		require.EqualValues(t, want, bal.Amount, "balance of %s", id)
	}
}
