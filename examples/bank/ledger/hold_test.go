package ledger_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
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

// A destination that loses a transfer's release with its memory (written
// behind, the node crashing just after the transfer's outcome is durable
// and its client answered) holds the credit again when it activates: it
// refuses to show its balance (retryably) until the saga settles the
// credit, and then shows it. It never shows a balance without the money
// its client was told had arrived.
func TestLostReleaseIsNeverShownMissing(t *testing.T) {
	st := &outcomeCrashStore{Store: memory.New()}
	h, reown, gate := reowningHost(t, st, nil)
	var crashed <-chan struct{}
	st.crash, crashed = crashAndRecover(h, reown, gate)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	open(t, h, "a", 100)
	open(t, h, "b", 0)
	got, err := ledger.SubmitAndWait(ctx, h, "t1", "a", "b", 30)
	require.NoError(t, err)
	require.Equal(t, bankpb.TransferStatus_TRANSFER_STATUS_COMPLETED, got.Status)
	<-crashed

	stored := storedAccount(t, h, "b")
	require.Contains(t, stored.Held, "t1", "the release, written behind, was lost with the crash")
	require.Empty(t, stored.Credits)

	// The read activates b, whose activation asks the saga to settle the
	// credit it holds: until then its balance is not shown.
	_, err = bankpb.NewAccountServiceClient(h).GetBalance(ctx, "b", &bankpb.GetBalance{})
	require.ErrorIs(t, err, actors.ErrUnavailable)
	require.True(t, actors.Retryable(err), "%v", err)
	require.Positive(t, actors.RetryAfter(err))
	// The transfer's debit is not held: a's balance shows.
	require.EqualValues(t, 70, balance(t, h, "a"))

	inv := retrying{h: h, reown: reown}
	require.EqualValues(t, 30, balanceVia(t, ctx, inv, "b"))
	// Settled: the saga's Forget released the credit and dropped it.
	testutil.Eventually(t, 10*time.Second, 5*time.Millisecond, func() error {
		balanceVia(t, ctx, inv, "b") // a read saves what b did behind
		if acct := storedAccount(t, h, "b"); len(acct.Held)+len(acct.Credits) != 0 {
			return fmt.Errorf("b still holds %v %v", acct.Held, acct.Credits)
		}
		return nil
	})
	require.EqualValues(t, 30, balanceVia(t, ctx, inv, "b"))
}

// startLossStore, once armed, loses the first Save of a transfer's start
// (status DEBITING): the shard of the start, with the debit, is not
// written and reports an unknown outcome; the batch's other shards are
// written, as a store does with a batch whose shards fail apart. If
// wait is set (before arming), that Save waits for it to close first.
type startLossStore struct {
	*memory.Store
	wait  <-chan struct{}
	armed atomic.Bool
	lost  atomic.Bool
}

func (s *startLossStore) Save(ctx context.Context, recs []persistence.Record) (map[uint32]error, error) {
	if !s.armed.Load() || s.lost.Load() {
		return s.Store.Save(ctx, recs)
	}
	drop := map[uint32]bool{}
	for _, r := range recs {
		if recordStatus(r) == bankpb.TransferStatus_TRANSFER_STATUS_DEBITING {
			drop[r.Shard] = true
		}
	}
	if len(drop) == 0 {
		return s.Store.Save(ctx, recs)
	}
	s.lost.Store(true)
	if s.wait != nil {
		select {
		case <-s.wait:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	var kept []persistence.Record
	for _, r := range recs {
		if !drop[r.Shard] {
			kept = append(kept, r)
		}
	}
	out := map[uint32]error{}
	if len(kept) > 0 {
		var err error
		if out, err = s.Store.Save(ctx, kept); err != nil {
			return nil, err
		}
	}
	for shard := range drop {
		out[shard] = fmt.Errorf("%w: the start of a transfer", memory.ErrInjected)
	}
	return out, nil
}

// otherShard returns an account ID whose shard is not from's.
func otherShard(t *testing.T, from string, shards uint32) string {
	t.Helper()
	for i := range 100 {
		id := fmt.Sprintf("b%d", i)
		if actors.ShardOf(ledger.AccountRef(id), shards) != actors.ShardOf(ledger.AccountRef(from), shards) {
			return id
		}
	}
	t.Fatal("no account of another shard")
	return ""
}

// A transfer whose start is lost with its debit, after its hold reached
// the destination (the hold leaves before the start is durable), leaves a
// hold without a saga. The destination asks the saga to settle it, finds
// no such transfer, and drops the hold: the balance never included it.
// The same transfer submitted again then completes once.
func TestLostStartCancelsItsHold(t *testing.T) {
	st := &startLossStore{Store: memory.New()}
	h, reown, _ := reowningHost(t, st, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const shards = 16 // reowningHost's
	b := otherShard(t, "a", shards)
	open(t, h, "a", 100)
	open(t, h, b, 0)

	loseStart(t, ctx, h, st, b)
	inv := retrying{h: h, reown: reown}
	require.EqualValues(t, 100, balanceVia(t, ctx, inv, "a"), "the debit was lost")
	require.EqualValues(t, 0, balanceVia(t, ctx, inv, b), "a hold is not part of the balance")

	// The destination restarts: the hold is now from an earlier
	// activation, and its saga, asked, cancels it.
	h.DropAll(fmt.Errorf("%w: restarted", actors.ErrNotHere))
	reown()
	testutil.Eventually(t, 10*time.Second, 5*time.Millisecond, func() error {
		if got := balanceVia(t, ctx, inv, b); got != 0 {
			return fmt.Errorf("%s shows %d", b, got)
		}
		if acct := storedAccount(t, h, b); len(acct.Held) != 0 {
			return fmt.Errorf("%s still holds %v", b, acct.Held)
		}
		return nil
	})

	// Submitted again, the transfer completes once.
	got, err := ledger.SubmitAndWait(ctx, inv, "t1", "a", b, 30)
	require.NoError(t, err)
	require.Equal(t, bankpb.TransferStatus_TRANSFER_STATUS_COMPLETED, got.Status)
	require.EqualValues(t, 70, balanceVia(t, ctx, inv, "a"))
	require.EqualValues(t, 30, balanceVia(t, ctx, inv, b))
}

// loseStart submits transfer t1 of 30 from a to b with s armed, so that
// its start is lost with its debit, and waits until b holds its credit
// (the hold left before the start was durable). It returns the lost
// saga's activation, which the hold names. The start is lost only once
// b has taken the hold: a node sends no message of a shard it has given
// up, so a start lost at once could take its hold with it.
func loseStart(t *testing.T, ctx context.Context, h *actors.Host, s *startLossStore, b string) (saga uint64) {
	t.Helper()
	taken := make(chan struct{})
	s.wait = taken
	s.armed.Store(true)
	submitted := make(chan error, 1)
	go func() {
		_, err := ledger.SubmitAndWait(ctx, h, "t1", "a", b, 30)
		submitted <- err
	}()
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if _, held := storedAccount(t, h, b).Held["t1"]; held {
			return nil // written already, by a second Save in flight
		}
		rt, err := h.Runtime(ctx, ledger.AccountRef(b))
		if err != nil {
			return err
		}
		if rt.Actor == nil || rt.Actor.Seq <= rt.Actor.Durable {
			return fmt.Errorf("%s has not taken the hold yet", b)
		}
		return nil // its write waits for the start's Save
	})
	close(taken)
	var err error
	select {
	case err = <-submitted:
	case <-ctx.Done():
		t.Fatal("the submit did not return")
	}
	require.Error(t, err, "the client's one attempt fails with its start")
	require.True(t, actors.Retryable(err), "%v", err)
	require.True(t, s.lost.Load())
	testutil.Eventually(t, 10*time.Second, 5*time.Millisecond, func() error {
		acct := storedAccount(t, h, b)
		held, ok := acct.Held["t1"]
		if !ok || len(acct.Held) != 1 {
			return fmt.Errorf("%s holds %v, want the transfer's hold", b, acct.Held)
		}
		saga = held.Saga
		return nil
	})
	return saga
}

// A rejected transfer's hold is cancelled: the destination holds nothing
// once the saga has answered, and its balance never changed.
func TestRejectedTransferCancelsItsHold(t *testing.T) {
	h, ctx := hostWithAB(t)
	got, err := ledger.SubmitAndWait(ctx, h, "t1", "a", "b", 500)
	require.NoError(t, err)
	require.Equal(t, bankpb.TransferStatus_TRANSFER_STATUS_REJECTED, got.Status)
	testutil.Eventually(t, 10*time.Second, 5*time.Millisecond, func() error {
		if b := balance(t, h, "b"); b != 0 { // a read saves what b did behind
			return fmt.Errorf("b shows %d", b)
		}
		if acct := storedAccount(t, h, "b"); len(acct.Held)+len(acct.Credits) != 0 {
			return fmt.Errorf("b holds %v %v", acct.Held, acct.Credits)
		}
		return nil
	})
	require.EqualValues(t, 100, balance(t, h, "a"))
}

// Two accounts that each hold, from an earlier activation, a credit whose
// saga must still debit the other do not wait on each other for good.
// Each refuses to show its balance, and refuses a debit that the credits
// in doubt could cover, until their sagas settle them; each saga's debit
// is at the other account. The sagas, asked, answer that their sources
// have not debited them, so no release was ever sent: the credits are not
// in doubt, the debits are refused for want of funds, the transfers are
// rejected and their holds cancelled.
func TestAccountsInDoubtDoNotWaitOnEachOther(t *testing.T) {
	h, reown, _ := reowningHost(t, memory.New(), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const shards = 16 // reowningHost's
	b := otherShard(t, "a", shards)
	open(t, h, "a", 0)
	open(t, h, b, 0)
	open(t, h, "z", 100)
	restart := func() {
		h.DropAll(fmt.Errorf("%w: restarted", actors.ErrNotHere))
		reown()
	}
	accounts := bankpb.NewAccountServiceClient(h)

	// First each account holds a credit in doubt whose saga settles
	// nothing for now: a transfer scheduled for later (the account's
	// hold is sent here as its saga would, Hold being internal to the
	// cluster, which the host's own process is).
	later := time.Now().Add(time.Hour).UnixNano()
	for _, to := range []string{"a", b} {
		id := "later-" + to
		_, err := bankpb.NewTransferServiceClient(h).ScheduleTransfer(ctx, ledger.TransferID("z", id),
			&bankpb.ScheduleTransfer{From: "z", To: to, Amount: 30, StartUnixNano: later})
		require.NoError(t, err)
		_, err = accounts.Hold(ctx, to, &bankpb.Hold{TransferId: id, Amount: 30, Source: "z", Saga: 1})
		require.NoError(t, err)
	}
	restart()

	// The transfers between the two: each debit is refused for now (the
	// credit in doubt could cover it), each hold is made.
	inv := retrying{h: h, reown: reown}
	var clients sync.WaitGroup
	defer clients.Wait()
	for _, tr := range []struct{ id, from, to string }{{"t1", b, "a"}, {"t2", "a", b}} {
		clients.Go(func() { _, _ = ledger.SubmitAndWait(ctx, h, tr.id, tr.from, tr.to, 30) }) // one attempt, which the restart ends
	}
	testutil.Eventually(t, 10*time.Second, 5*time.Millisecond, func() error {
		for _, tr := range []struct{ id, to string }{{"t1", "a"}, {"t2", b}} {
			if _, held := storedAccount(t, h, tr.to).Held[tr.id]; !held {
				return fmt.Errorf("%s does not hold %s yet", tr.to, tr.id)
			}
		}
		return nil
	})
	restart()
	for _, tr := range []struct{ id, from string }{{"t1", b}, {"t2", "a"}} {
		require.Equal(t, bankpb.TransferStatus_TRANSFER_STATUS_DEBITING, storedTransfer(t, h, tr.from, tr.id).Status)
		require.NotContains(t, storedAccount(t, h, tr.from).Debits, tr.id)
	}
	// The scheduled transfers' holds go: each account now holds in doubt
	// only the credit of a saga that waits for a debit at the other.
	for _, to := range []string{"a", b} {
		_, err := accounts.Cancel(ctx, to, &bankpb.Cancel{TransferId: "later-" + to})
		require.NoError(t, err)
	}

	testutil.Eventually(t, 30*time.Second, 5*time.Millisecond, func() error {
		for _, tr := range []struct{ from, id string }{{b, "t1"}, {"a", "t2"}} {
			got, err := bankpb.NewTransferServiceClient(inv).GetTransfer(ctx, ledger.TransferID(tr.from, tr.id), &bankpb.GetTransfer{})
			if err != nil {
				return err
			}
			if got.Status != bankpb.TransferStatus_TRANSFER_STATUS_REJECTED {
				return fmt.Errorf("transfer %s is %v", tr.id, got.Status)
			}
		}
		for _, id := range []string{"a", b} {
			balanceVia(t, ctx, inv, id) // a read saves what the account did behind
			if acct := storedAccount(t, h, id); len(acct.Held) != 0 {
				return fmt.Errorf("%s still holds %v", id, acct.Held)
			}
		}
		return nil
	})
	require.EqualValues(t, 0, balanceVia(t, ctx, inv, "a"))
	require.EqualValues(t, 0, balanceVia(t, ctx, inv, b))
}

// An account that holds a credit in doubt still answers the debits its
// balance decides: one the balance covers goes through, and one that the
// balance and the credit together could not cover is refused for good.
// A debit that the credit could cover is refused for now (retryably, not
// recorded), since the credit may have been released and its transfer
// acknowledged. The balance itself is not shown.
func TestDebitWhileACreditIsInDoubt(t *testing.T) {
	h, reown, _ := reowningHost(t, memory.New(), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	open(t, h, "b", 20)
	open(t, h, "z", 100)
	accounts := bankpb.NewAccountServiceClient(h)
	// A credit of 30 held, then in doubt after a restart; its saga, a
	// transfer scheduled for later, settles nothing during the test.
	_, err := bankpb.NewTransferServiceClient(h).ScheduleTransfer(ctx, ledger.TransferID("z", "later"),
		&bankpb.ScheduleTransfer{From: "z", To: "b", Amount: 30, StartUnixNano: time.Now().Add(time.Hour).UnixNano()})
	require.NoError(t, err)
	_, err = accounts.Hold(ctx, "b", &bankpb.Hold{TransferId: "later", Amount: 30, Source: "z", Saga: 1})
	require.NoError(t, err)
	h.DropAll(fmt.Errorf("%w: restarted", actors.ErrNotHere))
	reown()

	_, err = accounts.GetBalance(ctx, "b", &bankpb.GetBalance{})
	require.ErrorIs(t, err, actors.ErrUnavailable, "the balance is not shown while the credit is in doubt")

	_, err = accounts.Debit(ctx, "b", &bankpb.Debit{TransferId: "covered", Amount: 15})
	require.NoError(t, err, "the balance covers it")

	_, err = accounts.Debit(ctx, "b", &bankpb.Debit{TransferId: "beyond", Amount: 36})
	requireCode(t, err, ledger.CodeInsufficientFunds) // 5 + 30 in doubt < 36: refused for good

	for range 2 { // not recorded: asked again, it is refused for now again
		_, err = accounts.Debit(ctx, "b", &bankpb.Debit{TransferId: "maybe", Amount: 20})
		require.ErrorIs(t, err, actors.ErrUnavailable, "5 < 20 <= 5 + 30 in doubt: refused for now")
		require.True(t, actors.Retryable(err))
	}
	acct := storedAccount(t, h, "b")
	require.EqualValues(t, 5, acct.Balance)
	require.Contains(t, acct.Debits, "covered")
	require.NotContains(t, acct.Debits, "maybe")
	require.NotContains(t, acct.Debits, "beyond")
}

func storedTransfer(t *testing.T, h *actors.Host, from, id string) *bankpb.Transfer {
	t.Helper()
	rec, err := h.LoadRecord(context.Background(), ledger.TransferRef(from, id))
	require.NoError(t, err)
	return rec.State.(*bankpb.Transfer)
}
