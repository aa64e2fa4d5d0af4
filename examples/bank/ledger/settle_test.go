package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/examples/bank/ledger"
	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/ordo-actors/ordo/persistence"
	"github.com/ordo-actors/ordo/persistence/memory"
	"github.com/ordo-actors/ordo/proto/bankpb"
	"github.com/stretchr/testify/require"
)

// blockUntil holds back, with st.BlockSavesOf, the Saves carrying a
// record match accepts, and waits until one waits there: a test orders
// what that write lets out (the replies and messages held for it)
// against what happens meanwhile. The test's cleanup releases them,
// before the host stops.
func blockUntil(t *testing.T, ctx context.Context, st *memory.Store, match func(persistence.Record) bool) (wait func(), release func()) {
	t.Helper()
	reached, release := st.BlockSavesOf(match)
	t.Cleanup(release)
	return func() {
		t.Helper()
		select {
		case <-reached:
		case <-ctx.Done():
			t.Fatal("no Save reached the block")
		}
	}, release
}

// isTransfer reports whether r is a transfer's record in status s.
func isTransfer(s bankpb.TransferStatus) func(persistence.Record) bool {
	return func(r persistence.Record) bool { return r.Kind == ledger.Transfer.Name() && recordStatus(r) == s }
}

// waitForOut waits until ref, active on h, has (out) or no longer has
// (!out) a message out, not yet answered, whose request ID match accepts.
func waitForOut(t *testing.T, ctx context.Context, h *actors.Host, ref actors.Ref, out bool, match func(requestID string) bool) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		rt, err := h.Runtime(ctx, ref)
		if err != nil {
			return err
		}
		if rt.Actor == nil {
			return errors.New(rt.ActorError)
		}
		has := slices.ContainsFunc(rt.Actor.Outs, func(o actors.OutRuntime) bool { return match(o.RequestID) })
		if has != out {
			return fmt.Errorf("%s: message out: %v, want %v (outs %+v)", ref, has, out, rt.Actor.Outs)
		}
		return nil
	})
}

type transferAnswer struct {
	st  *bankpb.TransferState
	err error
}

func await(t *testing.T, ctx context.Context, c <-chan transferAnswer) transferAnswer {
	t.Helper()
	select {
	case a := <-c:
		return a
	case <-ctx.Done():
		t.Fatal("no answer")
		return transferAnswer{}
	}
}

// A saga asked to settle while DEBITING asks its source whether it has
// debited the transfer, and answers "undebited" only if it is still
// DEBITING when the source's answer comes back. Here the source refuses
// the debit for good just before it reads: the saga is rejected by the
// time the read's answer comes, and answers REJECTED, not undebited (the
// destination then waits for the rejection's Cancel, instead of taking
// the hold over as its own).
func TestSettleAnswersUndebitedOnlyWhileDebiting(t *testing.T) {
	st := memory.New()
	h, _, _ := reowningHost(t, st, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	open(t, h, "a", 10)
	open(t, h, "b", 0)
	startWaits, startGoes := blockUntil(t, ctx, st, isTransfer(bankpb.TransferStatus_TRANSFER_STATUS_DEBITING))

	submitted := make(chan transferAnswer, 1)
	go func() {
		s, err := ledger.SubmitNew(ctx, h, "t1", "a", "b", 50)
		submitted <- transferAnswer{s, err}
	}()
	// The saga has started and sent its debit, which a refuses (10 < 50).
	// Nothing is durable: neither the refusal nor the read below answers
	// before the start goes, and then they answer in a's order.
	startWaits()
	settled := make(chan transferAnswer, 1)
	go func() {
		s, err := bankpb.NewTransferServiceClient(h).Settle(ctx, ledger.TransferID("a", "t1"), &bankpb.Settle{})
		settled <- transferAnswer{s, err}
	}()
	waitForOut(t, ctx, h, ledger.TransferRef("a", "t1"), true, func(id string) bool { return strings.HasSuffix(id, ":has-debit") })
	startGoes()

	got := await(t, ctx, submitted)
	require.NoError(t, got.err)
	require.Equal(t, bankpb.TransferStatus_TRANSFER_STATUS_REJECTED, got.st.Status)
	require.Equal(t, ledger.CodeInsufficientFunds, got.st.Error)
	s := await(t, ctx, settled)
	require.NoError(t, s.err)
	require.Equal(t, bankpb.TransferStatus_TRANSFER_STATUS_REJECTED, s.st.Status)
	require.False(t, s.st.Undebited, "a rejected transfer is not answered as undebited")
}

// A destination that holds in doubt the credit of a saga whose start was
// lost asks the saga's shard to settle it on activation, and drops the
// hold when told that no such transfer started, unless the transfer was
// submitted again meanwhile and its new saga holds the credit: the late
// "unknown transfer" answers the old saga's hold, not the new one's.
// Here the answer is held back (its write is blocked) until the new saga's
// hold is durable at the destination, and the new saga is held back
// (its start is blocked) until the destination has taken the answer: the
// destination still holds the credit in doubt, and shows its balance
// only once the new saga releases it.
func TestLateUnknownTransferKeepsTheNewSagasHold(t *testing.T) {
	mem := memory.New()
	loss := &startLossStore{Store: mem}
	// Two Saves at once: the destination's writes go while the saga's
	// shard waits.
	h, reown, _ := reowningHost(t, loss, func(c *actors.HostConfig) { c.BatchMaxInFlight = 2 })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const shards = 16 // reowningHost's
	b := otherShard(t, "a", shards)
	open(t, h, "a", 100)
	open(t, h, b, 0)

	first := loseStart(t, ctx, h, loss, b) // the lost saga's activation

	unknownWaits, unknownGoes := blockUntil(t, ctx, mem, isTransfer(bankpb.TransferStatus_TRANSFER_STATUS_UNSPECIFIED))
	_, restartGoes := blockUntil(t, ctx, mem, isTransfer(bankpb.TransferStatus_TRANSFER_STATUS_DEBITING))
	h.DropAll(fmt.Errorf("%w: restarted", actors.ErrNotHere))
	reown()
	// The destination activates, holding the credit in doubt, and asks
	// the saga's shard, which answers that t1 never started: an answer
	// that leaves once its write is durable.
	accounts := bankpb.NewAccountServiceClient(h)
	_, err := accounts.GetBalance(ctx, b, &bankpb.GetBalance{})
	require.ErrorIs(t, err, actors.ErrUnavailable, "the credit is in doubt")
	unknownWaits()

	// Submitted again, the transfer's new saga holds the credit.
	submitted := make(chan transferAnswer, 1)
	go func() {
		s, err := ledger.SubmitAndWait(ctx, h, "t1", "a", b, 30)
		submitted <- transferAnswer{s, err}
	}()
	testutil.Eventually(t, 10*time.Second, 5*time.Millisecond, func() error {
		if held := storedAccount(t, h, b).Held["t1"]; held.GetSaga() == first {
			return fmt.Errorf("%s holds t1 for the lost saga %x", b, first)
		}
		return nil
	})

	// The answer reaches the destination, which keeps the new saga's
	// hold: the credit is still in doubt.
	unknownGoes()
	asked := func(id string) bool { return strings.HasPrefix(id, "activate-") && strings.HasSuffix(id, "/t1") }
	waitForOut(t, ctx, h, ledger.AccountRef(b), false, asked)
	_, err = accounts.GetBalance(ctx, b, &bankpb.GetBalance{})
	require.ErrorIs(t, err, actors.ErrUnavailable, "the new saga's hold is kept, in doubt")

	restartGoes()
	got := await(t, ctx, submitted)
	require.NoError(t, got.err)
	require.Equal(t, bankpb.TransferStatus_TRANSFER_STATUS_COMPLETED, got.st.Status)
	inv := retrying{h: h, reown: reown}
	require.EqualValues(t, 70, balanceVia(t, ctx, inv, "a"))
	require.EqualValues(t, 30, balanceVia(t, ctx, inv, b))
}
