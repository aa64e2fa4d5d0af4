package chaos

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/proto/bankpb"
	"github.com/ordo-actors/ordo/robustness/history"
)

func TestWatchSagas(t *testing.T) {
	a, b := history.AccountName(0), history.AccountName(1)
	ops := []history.Op{
		{Op: history.OpTransfer, ID: "done", From: a, To: b, Amount: 1, Outcome: history.Unknown},
		{Op: history.OpTransfer, ID: "late", From: a, To: b, Amount: 1, Outcome: history.Unknown},
		{Op: history.OpTransfer, ID: "lost", From: a, To: b, Amount: 1, Outcome: history.Unknown},
		{Op: history.OpTransfer, ID: "ok", From: a, To: b, Amount: 1, Outcome: history.OK},
	}
	var reads atomic.Int32
	read := func(ctx context.Context, id, _ string) (*bankpb.TransferState, error) {
		reads.Add(1)
		switch id {
		case "done":
			return &bankpb.TransferState{Status: bankpb.TransferStatus_TRANSFER_STATUS_COMPLETED}, nil
		case "late":
			if reads.Load() < 6 {
				return &bankpb.TransferState{Status: bankpb.TransferStatus_TRANSFER_STATUS_CREDITING}, nil
			}
			return &bankpb.TransferState{Status: bankpb.TransferStatus_TRANSFER_STATUS_COMPENSATED}, nil
		case "lost":
			return nil, errors.New("handler error unknown_transfer: transfer lost was never submitted")
		}
		t.Errorf("read of %s, which the client knows", id)
		return nil, errors.New("no")
	}
	s := watchSagas(context.Background(), read, ops, 10*time.Second)
	if s.Unknown != 3 || s.SettledMS < 500 || len(s.Pending) != 0 ||
		s.ByStatus["completed"] != 1 || s.ByStatus["compensated"] != 1 || s.ByStatus["never submitted"] != 1 {
		t.Fatalf("%+v", s)
	}
	if !strings.Contains(s.String(), "settled") {
		t.Fatal(s.String())
	}

	stuck := func(ctx context.Context, id, _ string) (*bankpb.TransferState, error) {
		if id == "late" {
			return &bankpb.TransferState{Status: bankpb.TransferStatus_TRANSFER_STATUS_DEBITING}, nil
		}
		return nil, errors.New("unreachable")
	}
	s = watchSagas(context.Background(), stuck, ops, 600*time.Millisecond)
	if s.SettledMS != -1 || s.Pending["late"] != "debiting" || s.Pending["done"] != "unreadable" || len(s.Pending) != 3 {
		t.Fatalf("%+v", s)
	}
	if !strings.Contains(s.String(), "3 NOT settled") {
		t.Fatal(s.String())
	}
}
