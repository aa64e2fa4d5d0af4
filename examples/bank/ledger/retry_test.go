package ledger_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/examples/bank/ledger"
	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/ordo-actors/ordo/persistence/memory"
	"github.com/ordo-actors/ordo/proto/bankpb"
	"github.com/ordo-actors/ordo/proto/ordopb"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
)

// A step that fails for a retryable reason (here: no node serves the
// destination's shard) is retried after a growing backoff, through a
// timer, and the transfer completes once the destination is served.
func TestSagaRetriesThroughATimer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg := actors.DefaultLocalConfig()
	cfg.Shards = 16
	cfg.Retry = actors.RetryPolicy{Initial: time.Millisecond, Max: time.Millisecond, Multiplier: 1, MaxAttempts: 1}
	store := memory.New()
	h, err := actors.NewHost(cfg, actors.HostDeps{Store: store}, ledger.Account, ledger.Transfer)
	require.NoError(t, err)
	require.NoError(t, h.Start(ctx))
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		require.NoError(t, h.Shutdown(sctx))
	})
	dst := "b"
	dstShard := actors.ShardOf(ledger.AccountRef(dst), cfg.Shards)
	for s := range cfg.Shards {
		require.NoError(t, h.Own(uint32(s), 1))
	}
	open(t, h, "a", 100)
	open(t, h, dst, 0)
	h.Drop(dstShard, actors.ErrFenced) // nobody serves the destination now

	start := time.Now()
	done := make(chan *bankpb.TransferState, 1)
	go func() {
		st, err := ledger.SubmitAndWait(ctx, h, "t-retry", "a", dst, 30)
		if err != nil {
			t.Errorf("submit: %v", err)
		}
		done <- st
	}()
	retries := func() uint32 {
		rec, err := store.Load(ctx, ledger.Transfer.Name(), ledger.TransferRef("a", "t-retry").ID)
		if err != nil {
			return 0
		}
		var er ordopb.EntityRecord
		require.NoError(t, proto.Unmarshal(rec.Data, &er))
		var tr bankpb.Transfer
		require.NoError(t, proto.Unmarshal(er.State, &tr))
		return tr.Retries
	}
	testutil.Eventually(t, 30*time.Second, 5*time.Millisecond, func() error {
		if n := retries(); n < 3 {
			return errors.New("fewer than 3 retries")
		}
		return nil
	})
	// Three retries waited 50 + 100 ms at least before the third failed.
	require.GreaterOrEqual(t, time.Since(start), 150*time.Millisecond)

	require.NoError(t, h.Own(dstShard, 2))
	st := <-done
	require.Equal(t, bankpb.TransferStatus_TRANSFER_STATUS_COMPLETED, st.GetStatus())
	require.EqualValues(t, 70, balance(t, h, "a"))
	require.EqualValues(t, 30, balance(t, h, dst))
}
