package ledger_test

import (
	"context"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/cluster"
	"github.com/ordo-actors/ordo/examples/bank/ledger"
	"github.com/ordo-actors/ordo/persistence/memory"
	"github.com/ordo-actors/ordo/proto/bankpb"
	"github.com/stretchr/testify/require"
)

// A transfer submitted as new starts without reading the store; the same
// ID submitted as new again, by mistake, after its saga stopped (a node
// restarted over the same store), gets the same outcome and applies
// nothing twice: the saga's creation is refused, its shard restarts, and
// the call's retry, without the hint, finds the stored saga.
func TestSubmitNewWrongHintLosesNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store := memory.New()
	t.Cleanup(func() { store.Close() })
	dev := func() *cluster.Dev {
		d, err := cluster.NewDev(ctx, cluster.DevConfig{Kinds: []actors.Kind{ledger.Account, ledger.Transfer}, Shards: 8, Store: store})
		require.NoError(t, err)
		return d
	}
	accounts := func(d *cluster.Dev) (int64, int64) {
		a, err := bankpb.NewAccountServiceClient(d).GetBalance(ctx, "a", &bankpb.GetBalance{})
		require.NoError(t, err)
		b, err := bankpb.NewAccountServiceClient(d).GetBalance(ctx, "b", &bankpb.GetBalance{})
		require.NoError(t, err)
		return a.Amount, b.Amount
	}

	d1 := dev()
	for id, initial := range map[string]int64{"a": 100, "b": 0} {
		_, err := bankpb.NewAccountServiceClient(d1).Open(ctx, id, &bankpb.Open{Initial: initial})
		require.NoError(t, err)
	}
	loads := d1.Stats().Loads
	st, err := ledger.SubmitNew(ctx, d1, "t1", "a", "b", 30)
	require.NoError(t, err)
	require.Equal(t, bankpb.TransferStatus_TRANSFER_STATUS_COMPLETED, st.Status)
	require.Equal(t, loads, d1.Stats().Loads, "a transfer submitted as new must not be read")
	require.NoError(t, d1.Close(ctx))

	d2 := dev()
	defer func() { require.NoError(t, d2.Close(ctx)) }()
	st, err = ledger.SubmitNew(ctx, d2, "t1", "a", "b", 30)
	require.NoError(t, err)
	require.Equal(t, bankpb.TransferStatus_TRANSFER_STATUS_COMPLETED, st.Status)
	a, b := accounts(d2)
	require.EqualValues(t, 70, a)
	require.EqualValues(t, 30, b)
	require.GreaterOrEqual(t, d2.Stats().Batch.Failed, uint64(1), "the wrong hint's creation must have been refused")
}
