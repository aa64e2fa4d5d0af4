package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/cluster/clustertest"
	"github.com/ordo-actors/ordo/examples/bank/ledger"
	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/ordo-actors/ordo/persistence"
	"github.com/ordo-actors/ordo/persistence/memory"
	"github.com/ordo-actors/ordo/proto/bankpb"
	"github.com/ordo-actors/ordo/proto/ordopb"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
)

// fault is what happens to the armed Save.
type fault int

const (
	crashAfter fault = iota // acknowledged, then the node crashes before anything else runs
	loseAck                 // the write lands, its acknowledgement is lost
	loseWrite               // nothing is written, and the outcome is unknown
)

func (f fault) String() string {
	return [...]string{"crash-after-save", "lost-ack-of-save", "lost-save"}[f]
}

// crashStore counts Saves once armed and applies its fault to Save
// number at.
type crashStore struct {
	*memory.Store
	armed atomic.Bool
	saves atomic.Int64
	at    int64
	fault fault
	crash func() // called with the host frozen; must not block on it
}

func (s *crashStore) Save(ctx context.Context, recs []persistence.Record) (map[uint32]error, error) {
	if !s.armed.Load() {
		return s.Store.Save(ctx, recs)
	}
	n := s.saves.Add(1)
	if n == s.at {
		switch s.fault {
		case loseAck:
			s.Store.LoseNextAcks(1, nil)
		case loseWrite:
			s.Store.FailNextSaves(1, nil)
		}
	}
	out, err := s.Store.Save(ctx, recs)
	if n == s.at && s.fault == crashAfter {
		s.crash()
	}
	return out, err
}

// A transfer crashed between any two of its steps, or losing any Save's
// acknowledgement, settles exactly once: the client's retries (same
// request ID) get its outcome, money is conserved, and the accounts end
// up forgetting it.
func TestTransferSurvivesACrashAtEveryStep(t *testing.T) {
	for _, f := range []fault{crashAfter, loseAck, loseWrite} {
		// A transfer makes two or three Saves: its start with the debit
		// and the hold (in the same Save or the next), its outcome. The
		// destination releases it behind, and the accounts forget it
		// behind (with an account's next write): reading them makes the
		// rest, up to five.
		for at := int64(1); at <= 5; at++ {
			t.Run(fmt.Sprintf("%v-%d", f, at), func(t *testing.T) { crashAt(t, at, f) })
		}
	}
}

func crashAt(t *testing.T, at int64, f fault) {
	st := &crashStore{Store: memory.New(), at: at, fault: f}
	h, reown, gate := reowningHost(t, st, nil)
	var crashed atomic.Bool
	st.crash = func() {
		crashed.Store(true)
		gate.Pause() // nothing runs after this acknowledgement until the crash
		go func() {
			h.DropAll(fmt.Errorf("%w: crashed", actors.ErrNotHere))
			reown() // the node is back, under new epochs
			gate.Resume()
		}()
	}
	inv := retrying{h: h, reown: reown}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, a := range []struct {
		id      string
		initial int64
	}{{"a", 100}, {"b", 0}} {
		_, err := bankpb.NewAccountServiceClient(inv).Open(ctx, a.id, &bankpb.Open{Initial: a.initial})
		require.NoError(t, err)
	}

	st.armed.Store(true)
	got, err := ledger.SubmitAndWait(ctx, inv, "t1", "a", "b", 30)
	require.NoError(t, err)
	require.Equal(t, bankpb.TransferStatus_TRANSFER_STATUS_COMPLETED, got.Status)
	testutil.Eventually(t, 20*time.Second, time.Millisecond, func() error {
		if n := st.saves.Load(); n < at {
			if n >= 3 {
				// Reads save what the accounts forgot behind.
				for _, id := range []string{"a", "b"} {
					if _, err := bankpb.NewAccountServiceClient(inv).GetBalance(ctx, id, &bankpb.GetBalance{}); err != nil {
						return err
					}
				}
			}
			return fmt.Errorf("the transfer made %d Saves, want %d", n, at)
		}
		if f == crashAfter && !crashed.Load() {
			return errors.New("not crashed yet")
		}
		return nil
	})
	reown()

	require.EqualValues(t, 70, balanceVia(t, ctx, inv, "a"))
	require.EqualValues(t, 30, balanceVia(t, ctx, inv, "b"))
	again, err := ledger.SubmitAndWait(ctx, inv, "t1", "a", "b", 30)
	require.NoError(t, err)
	require.Equal(t, bankpb.TransferStatus_TRANSFER_STATUS_COMPLETED, again.Status)
	require.EqualValues(t, 70, balanceVia(t, ctx, inv, "a"))
	require.EqualValues(t, 30, balanceVia(t, ctx, inv, "b"))

	// The saga ends by making both accounts forget it.
	testutil.Eventually(t, 20*time.Second, 5*time.Millisecond, func() error {
		reown()
		// Reading the transfer activates it, if a crash stopped it: it
		// sends its forgets again.
		if _, err := bankpb.NewTransferServiceClient(inv).GetTransfer(ctx, ledger.TransferID("a", "t1"), &bankpb.GetTransfer{}); err != nil {
			return err
		}
		for _, id := range []string{"a", "b"} {
			// An account forgets behind (Forget writes with its next
			// write): a read of it saves what it forgot.
			if _, err := bankpb.NewAccountServiceClient(inv).GetBalance(ctx, id, &bankpb.GetBalance{}); err != nil {
				return err
			}
			acct := storedAccount(t, h, id)
			if len(acct.Debits)+len(acct.Credits)+len(acct.Held) != 0 {
				return fmt.Errorf("account %s still holds %v %v %v", id, acct.Debits, acct.Credits, acct.Held)
			}
		}
		return nil
	})
}

// reowningHost starts a host with the ledger's kinds over st, owning every
// shard; reown owns again, under new epochs, the shards it gave up (as
// placement would), and runs by itself when a lost write drops a shard
// (in a goroutine of its own, which the test's cleanup waits for before
// it stops the host).
func reowningHost(t *testing.T, st persistence.Store, tweak func(*actors.HostConfig)) (*actors.Host, func(), *clustertest.Faults) {
	t.Helper()
	cfg := actors.DefaultLocalConfig()
	cfg.Shards = 16
	if tweak != nil {
		tweak(&cfg)
	}
	var h *actors.Host
	var epoch atomic.Int64
	epoch.Store(1)
	var ownMu sync.Mutex
	ownMissing := func() error {
		ownMu.Lock()
		defer ownMu.Unlock()
		owned := h.Owned()
		for s := range cfg.Shards {
			if _, ok := owned[uint32(s)]; !ok {
				if err := h.Own(uint32(s), epoch.Add(1)); err != nil {
					return fmt.Errorf("owning shard %d again: %w", s, err)
				}
			}
		}
		return nil
	}
	reown := func() { require.NoError(t, ownMissing()) }
	var (
		lostMu  sync.Mutex
		closing bool
		lost    sync.WaitGroup // re-owners started by ShardLost
	)
	shardLost := func(uint32, int64, error) {
		lostMu.Lock()
		defer lostMu.Unlock()
		if closing {
			return
		}
		lost.Add(1)
		go func() {
			defer lost.Done()
			if err := ownMissing(); err != nil {
				t.Error(err)
			}
		}()
	}
	f := &clustertest.Faults{} // the host's fault seam: only its Pause of the entities matters here
	h, err := actors.NewHost(cfg, actors.HostDeps{Store: st, ShardLost: shardLost, Faults: f},
		ledger.Account, ledger.Transfer)
	require.NoError(t, err)
	require.NoError(t, h.Start(context.Background()))
	for s := range cfg.Shards {
		require.NoError(t, h.Own(uint32(s), 1))
	}
	t.Cleanup(func() {
		lostMu.Lock()
		closing = true
		lostMu.Unlock()
		lost.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, h.Shutdown(ctx))
		st.Close()
	})
	return h, reown, f
}

// retrying is a client: it retries retryable answers with the same
// envelope, re-owning shards a crash or a lost write gave up.
type retrying struct {
	h     *actors.Host
	reown func()
}

func (r retrying) Invoke(ctx context.Context, env *ordopb.Envelope) (*ordopb.Reply, error) {
	for {
		rep, err := r.h.Invoke(ctx, env)
		if err != nil {
			return nil, err
		}
		if e := actors.ErrorFromProto(rep.GetError()); e == nil || !actors.Retryable(e) {
			return rep, nil
		}
		r.reown()
		t := time.NewTimer(2 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

func balanceVia(t *testing.T, ctx context.Context, inv actors.Invoker, id string) int64 {
	t.Helper()
	b, err := bankpb.NewAccountServiceClient(inv).GetBalance(ctx, id, &bankpb.GetBalance{})
	require.NoError(t, err)
	return b.Amount
}

func storedAccount(t *testing.T, h *actors.Host, id string) *bankpb.Account {
	t.Helper()
	rec, err := h.LoadRecord(context.Background(), ledger.AccountRef(id))
	require.NoError(t, err)
	return rec.State.(*bankpb.Account)
}

// A rejection is answered only once it is durable: were it answered
// earlier and its write lost, a replay of the saga after the source's
// dedup window rolled past the refused debit (and funds arrived) would
// debit after all, and the client would have been told "rejected" about
// a transfer that moved money.
func TestRejectionIsAnsweredOnlyOnceDurable(t *testing.T) {
	st := &rejectionLossStore{Store: memory.New()}
	h, reown, _ := reowningHost(t, st, func(c *actors.HostConfig) { c.DedupWindow = 2 })
	inv := retrying{h: h, reown: reown}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	accounts := bankpb.NewAccountServiceClient(inv)
	_, err := accounts.Open(ctx, "a", &bankpb.Open{Initial: 100})
	require.NoError(t, err)
	_, err = accounts.Open(ctx, "b", &bankpb.Open{Initial: 0})
	require.NoError(t, err)

	// The start is written with the refused debit; the Save of the
	// rejection is lost (nothing written, outcome unknown).
	st.armed.Store(true)
	told, err := ledger.SubmitAndWait(ctx, inv, "t-r", "a", "b", 200)
	require.NoError(t, err)
	require.True(t, st.lost.Load(), "the rejection's Save was lost")
	// Funds arrive and roll the source's dedup window past the refused
	// debit; then the transfer is activated (and replayed if not final).
	for i := 0; i < 2; i++ {
		_, err = accounts.Deposit(ctx, "a", &bankpb.Deposit{Amount: 500})
		require.NoError(t, err)
	}
	var final *bankpb.TransferState
	testutil.Eventually(t, 20*time.Second, 5*time.Millisecond, func() error {
		final, err = bankpb.NewTransferServiceClient(inv).GetTransfer(ctx, ledger.TransferID("a", "t-r"), &bankpb.GetTransfer{})
		if err != nil {
			return err
		}
		if !ledger.Terminal(final.Status) {
			return fmt.Errorf("transfer still %v", final.Status)
		}
		return nil
	})
	require.Equal(t, told.Status, final.Status, "the client was told %v; the transfer ended %v", told.Status, final.Status)
	a, b := balanceVia(t, ctx, inv, "a"), balanceVia(t, ctx, inv, "b")
	require.EqualValues(t, 1100, a+b)
	if told.Status == bankpb.TransferStatus_TRANSFER_STATUS_REJECTED {
		require.EqualValues(t, 0, b, "a rejected transfer moved money")
	} else {
		require.EqualValues(t, 200, b)
	}
}

// rejectionLossStore, once armed, loses the first Save that carries a
// transfer's rejection: nothing of it is written, and its outcome is
// unknown.
type rejectionLossStore struct {
	*memory.Store
	armed, lost atomic.Bool
}

func (s *rejectionLossStore) Save(ctx context.Context, recs []persistence.Record) (map[uint32]error, error) {
	if s.armed.Load() && !s.lost.Load() {
		for _, r := range recs {
			if recordStatus(r) == bankpb.TransferStatus_TRANSFER_STATUS_REJECTED {
				s.lost.Store(true)
				s.Store.FailNextSaves(1, nil)
				break
			}
		}
	}
	return s.Store.Save(ctx, recs)
}

// A transfer whose node crashes just as its outcome is durable, before it
// told its accounts to forget it and before its client got the answer, is
// not run again by anything when its client does not ask again. Its
// accounts' settle reminders activate it, and it tells them to forget it.
func TestLostForgetIsSettled(t *testing.T) {
	st := &outcomeCrashStore{Store: memory.New()}
	h, reown, gate := reowningHost(t, st, nil)
	var crashed <-chan struct{}
	st.crash, crashed = crashAndRecover(h, reown, gate)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, a := range []struct {
		id      string
		initial int64
	}{{"a", 100}, {"b", 0}} {
		_, err := bankpb.NewAccountServiceClient(h).Open(ctx, a.id, &bankpb.Open{Initial: a.initial})
		require.NoError(t, err)
	}
	// The client's one attempt: its answer may die with the crash, and it
	// does not ask again.
	_, _ = ledger.SubmitAndWait(ctx, h, "t1", "a", "b", 30)
	<-crashed
	// The destination holds the transfer after the crash: credited, or
	// still held if its release, written behind, was lost.
	stored := storedAccount(t, h, "b")
	require.Equal(t, 1, len(stored.Credits)+len(stored.Held), "the destination holds the transfer after the crash: %v %v", stored.Credits, stored.Held)

	// Nobody asks about the transfer: the reminders settle it.
	testutil.Eventually(t, 40*time.Second, 20*time.Millisecond, func() error {
		for _, id := range []string{"a", "b"} {
			acct := storedAccount(t, h, id)
			if len(acct.Debits)+len(acct.Credits)+len(acct.Held) != 0 {
				return fmt.Errorf("account %s still holds %v %v %v", id, acct.Debits, acct.Credits, acct.Held)
			}
		}
		return nil
	})
	require.EqualValues(t, 70, balance(t, h, "a"))
	require.EqualValues(t, 30, balance(t, h, "b"))
}

// crashAndRecover returns a crash for a store to call from a Save, with
// the host frozen after the Save's acknowledgement: the node crashes
// (every shard dropped, the entities' memory lost) and comes back under
// new epochs; crashed closes once it is back.
func crashAndRecover(h *actors.Host, reown func(), gate *clustertest.Faults) (crash func(), crashed <-chan struct{}) {
	done := make(chan struct{})
	return func() {
		gate.Pause() // nothing runs after this acknowledgement until the crash
		go func() {
			h.DropAll(fmt.Errorf("%w: crashed", actors.ErrNotHere))
			reown() // the node is back, under new epochs
			gate.Resume()
			close(done)
		}()
	}, done
}

// outcomeCrashStore calls crash once, after the Save that makes a
// transfer's completion durable returns.
type outcomeCrashStore struct {
	*memory.Store
	once  sync.Once
	crash func()
}

func (s *outcomeCrashStore) Save(ctx context.Context, recs []persistence.Record) (map[uint32]error, error) {
	out, err := s.Store.Save(ctx, recs)
	for _, r := range recs {
		if recordStatus(r) == bankpb.TransferStatus_TRANSFER_STATUS_COMPLETED {
			s.once.Do(s.crash)
		}
	}
	return out, err
}

// recordStatus returns the status of a transfer's record, UNSPECIFIED
// for a record of another kind or one that does not decode.
func recordStatus(r persistence.Record) bankpb.TransferStatus {
	var er ordopb.EntityRecord
	var tr bankpb.Transfer
	if r.Kind != ledger.Transfer.Name() || proto.Unmarshal(r.Data, &er) != nil || proto.Unmarshal(er.State, &tr) != nil {
		return bankpb.TransferStatus_TRANSFER_STATUS_UNSPECIFIED
	}
	return tr.Status
}
