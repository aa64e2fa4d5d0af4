package ledger_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/examples/bank/ledger"
	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/ordo-actors/ordo/persistence/memory"
	"github.com/ordo-actors/ordo/proto/bankpb"
	"github.com/ordo-actors/ordo/proto/ordopb"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/anypb"
)

const (
	statusScheduled = bankpb.TransferStatus_TRANSFER_STATUS_SCHEDULED
	statusCompleted = bankpb.TransferStatus_TRANSFER_STATUS_COMPLETED
	statusRejected  = bankpb.TransferStatus_TRANSFER_STATUS_REJECTED
)

// scheduleHost starts a host over store owning every shard at epoch, with
// a short reminder tick.
func scheduleHost(t *testing.T, store *memory.Store, epoch int64) *actors.Host {
	t.Helper()
	cfg := actors.DefaultLocalConfig()
	cfg.Shards = 16
	cfg.ReminderTick = 10 * time.Millisecond
	h, err := actors.NewHost(cfg, actors.HostDeps{Store: storeView{store}}, ledger.Account, ledger.Transfer)
	require.NoError(t, err)
	require.NoError(t, h.Start(context.Background()))
	for s := range cfg.Shards {
		require.NoError(t, h.Own(uint32(s), epoch))
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, h.Shutdown(ctx))
	})
	return h
}

// storeView shares a memory store between hosts: a host's Shutdown does
// not close it for the others.
type storeView struct{ *memory.Store }

func (storeView) Close() error { return nil }

func transferStatus(t *testing.T, h *actors.Host, from, id string) *bankpb.TransferState {
	t.Helper()
	st, err := bankpb.NewTransferServiceClient(h).GetTransfer(context.Background(), ledger.TransferID(from, id), &bankpb.GetTransfer{})
	require.NoError(t, err)
	return st
}

func waitStatus(t *testing.T, h *actors.Host, from, id string, want bankpb.TransferStatus) *bankpb.TransferState {
	t.Helper()
	var st *bankpb.TransferState
	testutil.Eventually(t, 30*time.Second, 5*time.Millisecond, func() error {
		if st = transferStatus(t, h, from, id); st.Status != want {
			return fmt.Errorf("transfer %s is %v, want %v", id, st.Status, want)
		}
		return nil
	})
	return st
}

// A scheduled transfer shows SCHEDULED, moves nothing until its start
// time, then runs as a submitted one; scheduling it again changes
// nothing, with other parameters is refused, and a submit of the same
// transfer waits for its outcome. Its funds are checked when it starts.
func TestScheduledTransfer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h := scheduleHost(t, memory.New(), 1)
	open(t, h, "a", 100)
	open(t, h, "b", 0)

	// Until its start time, it shows scheduled and nothing moves. (A
	// loaded machine may take longer than the time ahead to check: then
	// the checks are made of another transfer, further ahead.)
	var start time.Time
	var st *bankpb.TransferState
	id := ""
	for i, ahead := range []time.Duration{300 * time.Millisecond, 1200 * time.Millisecond, 4800 * time.Millisecond} {
		id, start = fmt.Sprint("s1-", i), time.Now().Add(ahead)
		var err error
		st, err = ledger.Schedule(ctx, h, id, "a", "b", 30, start)
		require.NoError(t, err)
		status, bal := transferStatus(t, h, "a", id).Status, balance(t, h, "a")
		if time.Now().Before(start) {
			require.Equal(t, statusScheduled, status)
			require.EqualValues(t, 100-30*i, bal, "nothing moved before the start time")
			break
		}
		waitStatus(t, h, "a", id, statusCompleted)
	}
	require.Equal(t, statusScheduled, st.Status)
	require.Equal(t, start.UnixNano(), st.StartUnixNano)
	moved := 100 - balance(t, h, "a") // by the transfers that started before their checks

	again, err := ledger.Schedule(ctx, h, id, "a", "b", 30, start)
	require.NoError(t, err)
	require.Equal(t, statusScheduled, again.Status)
	// Same transfer, other parameters: the request ID (derived from the
	// transfer ID) is refused for a different request; under another
	// request ID, the transfer refuses it.
	_, err = ledger.Schedule(ctx, h, id, "a", "b", 31, start)
	require.ErrorIs(t, err, actors.ErrBadRequest)
	_, err = bankpb.NewTransferServiceClient(h).ScheduleTransfer(ctx, ledger.TransferID("a", id),
		&bankpb.ScheduleTransfer{From: "a", To: "b", Amount: 30, StartUnixNano: start.Add(time.Second).UnixNano()},
		actors.WithRequestID("another-id"))
	requireCode(t, err, ledger.CodeConflict)

	// A submit of the same transfer waits for it to start and end.
	joined, err := ledger.SubmitAndWait(ctx, h, id, "a", "b", 30)
	require.NoError(t, err)
	require.Equal(t, statusCompleted, joined.Status)
	require.False(t, time.Now().Before(start), "completed before its start time")
	require.EqualValues(t, 70-moved, balance(t, h, "a"))
	require.EqualValues(t, 30+moved, balance(t, h, "b"))
	done := transferStatus(t, h, "a", id)
	require.Equal(t, statusCompleted, done.Status)
	require.Equal(t, start.UnixNano(), done.StartUnixNano)

	// Scheduled with more than the balance it will have: rejected when it
	// starts, nothing moved.
	_, err = ledger.Schedule(ctx, h, "s2", "a", "b", 500, time.Now())
	require.NoError(t, err)
	rej := waitStatus(t, h, "a", "s2", statusRejected)
	require.Equal(t, ledger.CodeInsufficientFunds, rej.Error)
	require.EqualValues(t, 70-moved, balance(t, h, "a"))

	// Invalid schedules are refused at once.
	_, err = ledger.Schedule(ctx, h, "s3", "a", "a", 5, time.Now())
	requireCode(t, err, ledger.CodeSameAccount)
	_, err = ledger.Schedule(ctx, h, "s4", "a", "b", 0, time.Now())
	requireCode(t, err, ledger.CodeInvalidAmount)
	_, err = ledger.Schedule(ctx, h, "s5", "a", "b", 5, time.Unix(0, 0))
	requireCode(t, err, ledger.CodeInvalidStart)
	// StartTransfer is internal: a client cannot start a transfer early.
	require.ErrorIs(t, startAsClient(t, h, "a", "s3"), actors.ErrPermissionDenied)
}

func startAsClient(t *testing.T, h *actors.Host, from, id string) error {
	t.Helper()
	payload, err := anypb.New(&bankpb.StartTransfer{})
	require.NoError(t, err)
	env := &ordopb.Envelope{Target: ledger.TransferRef(from, id).Proto(), RequestId: "start-early", Payload: payload}
	ch := make(chan error, 1)
	h.SubmitAs(actors.Caller{Class: actors.CallerClient, Name: "client"}, env, func(r *ordopb.Reply) {
		ch <- actors.ErrorFromProto(r.GetError())
	})
	return <-ch
}

// A scheduled transfer whose node crashes before its start time starts on
// the shard's next owner, once.
func TestScheduledTransferSurvivesCrash(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	store := memory.New()
	t.Cleanup(func() { store.Close() })
	a := scheduleHost(t, store, 1)
	open(t, a, "a", 100)
	open(t, a, "b", 0)
	start := time.Now().Add(200 * time.Millisecond)
	_, err := ledger.Schedule(ctx, a, "c1", "a", "b", 40, start)
	require.NoError(t, err)
	a.DropAll(actors.ErrFenced) // lost its lease: stops without a word

	b := scheduleHost(t, store, 2)
	if status := transferStatus(t, b, "a", "c1").Status; time.Now().Before(start) {
		require.Equal(t, statusScheduled, status)
	}
	waitStatus(t, b, "a", "c1", statusCompleted)
	require.EqualValues(t, 60, balance(t, b, "a"))
	require.EqualValues(t, 40, balance(t, b, "b"))
	require.Zero(t, a.Stats().RemindersFired)
}
