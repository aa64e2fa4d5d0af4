package ledger

import (
	"context"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/proto/bankpb"
)

// SubmitAndWait submits transfer id from account from and returns its
// final state: one call, answered when the saga ends (the request ID is
// derived from the transfer ID, so a resubmission, or a retry after a
// failover, waits for the same outcome and never applies the transfer
// twice). A rejected or compensated transfer is a final state, not an
// error. Errors are call failures (ctx ended, invalid input: the outcome
// may then be unknown; submitting again resolves it).
func SubmitAndWait(ctx context.Context, inv actors.Invoker, id, from, to string, amount int64) (*bankpb.TransferState, error) {
	return bankpb.NewTransferServiceClient(inv).SubmitTransfer(ctx, TransferID(from, id),
		&bankpb.SubmitTransfer{From: from, To: to, Amount: amount}, actors.WithRequestID(id+":submit"))
}

// SubmitNew is SubmitAndWait for a transfer ID the caller has just
// minted and never submitted before: the saga starts without reading the
// store (actors.AsNew). Resubmit with SubmitAndWait: a wrong hint loses
// nothing, but it costs the saga's shard a restart.
func SubmitNew(ctx context.Context, inv actors.Invoker, id, from, to string, amount int64) (*bankpb.TransferState, error) {
	return bankpb.NewTransferServiceClient(inv).SubmitTransfer(ctx, TransferID(from, id),
		&bankpb.SubmitTransfer{From: from, To: to, Amount: amount}, actors.WithRequestID(id+":submit"), actors.AsNew())
}

// Schedule schedules transfer id from account from to start at start and
// returns its state (SCHEDULED until it starts; a transfer scheduled again
// with the same parameters returns its state as it stands). The request ID
// is derived from the transfer ID, like SubmitAndWait's.
func Schedule(ctx context.Context, inv actors.Invoker, id, from, to string, amount int64, start time.Time) (*bankpb.TransferState, error) {
	return bankpb.NewTransferServiceClient(inv).ScheduleTransfer(ctx, TransferID(from, id),
		&bankpb.ScheduleTransfer{From: from, To: to, Amount: amount, StartUnixNano: start.UnixNano()},
		actors.WithRequestID(id+":schedule"))
}
