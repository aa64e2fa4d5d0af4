package ledger

import (
	"errors"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/proto/bankpb"
)

type transferCtx = actors.Context[*bankpb.Transfer]

const (
	checking     = bankpb.TransferStatus_TRANSFER_STATUS_CHECKING
	debiting     = bankpb.TransferStatus_TRANSFER_STATUS_DEBITING
	crediting    = bankpb.TransferStatus_TRANSFER_STATUS_CREDITING
	completed    = bankpb.TransferStatus_TRANSFER_STATUS_COMPLETED
	rejected     = bankpb.TransferStatus_TRANSFER_STATUS_REJECTED
	compensating = bankpb.TransferStatus_TRANSFER_STATUS_COMPENSATING
	compensated  = bankpb.TransferStatus_TRANSFER_STATUS_COMPENSATED
	unspecified  = bankpb.TransferStatus_TRANSFER_STATUS_UNSPECIFIED
)

// Transfer is the transfer saga kind.
var Transfer = actors.MustKind("transfer", func() *bankpb.Transfer { return new(bankpb.Transfer) },
	actors.On(submit),
	actors.OnRead(func(c *transferCtx, m *bankpb.GetTransfer) (*bankpb.TransferState, error) {
		if c.State.Status == unspecified {
			return nil, actors.HandlerError(CodeUnknownTransfer, "transfer %s was never submitted", c.Ref().ID)
		}
		return state(c.State), nil
	}),
	actors.OnActivate(func(c *transferCtx) { step(c) }),
)

func state(t *bankpb.Transfer) *bankpb.TransferState {
	return &bankpb.TransferState{From: t.From, To: t.To, Amount: t.Amount, Status: t.Status, Error: t.Error}
}

func submit(c *transferCtx, m *bankpb.SubmitTransfer) (*bankpb.TransferState, error) {
	t := c.State
	if t.Status != unspecified {
		if t.From != m.From || t.To != m.To || t.Amount != m.Amount {
			return nil, actors.HandlerError(CodeConflict, "transfer %s was submitted with other parameters", c.Ref().ID)
		}
		return state(t), nil
	}
	if m.Amount <= 0 {
		return nil, actors.HandlerError(CodeInvalidAmount, "amount %d is not positive", m.Amount)
	}
	for _, id := range []string{m.From, m.To} {
		if err := AccountRef(id).Validate(); err != nil {
			return nil, actors.HandlerError(CodeUnknownAccount, "%v", err)
		}
	}
	if m.From == m.To {
		return nil, actors.HandlerError(CodeSameAccount, "source and destination are both %s", m.From)
	}
	t.From, t.To, t.Amount, t.Status = m.From, m.To, m.Amount, checking
	step(c)
	return state(t), nil
}

// step starts (or restarts) the saga from its durable status. While a
// transfer is in progress its stored status stays CHECKING: the check, the
// debit and the credit are each idempotent per transfer ID (accounts keep
// the IDs of the transfers they debited or credited until the saga tells
// them to forget), so a saga that restarts from the beginning after a
// crash repeats no effect. Only the outcome is written, which saves two
// durable writes per transfer.
func step(c *transferCtx) {
	t := c.State
	id := c.Ref().ID
	switch t.Status {
	case checking, debiting, crediting:
		actors.Request(c, AccountRef(t.To), &bankpb.CheckOpen{}, id+":check", afterCheck)
	case compensating:
		actors.Request(c, AccountRef(t.From), &bankpb.Credit{TransferId: id + ":refund", Amount: t.Amount}, id+":refund", afterRefund)
	}
}

func inProgress(t *bankpb.Transfer) bool {
	return t.Status == checking || t.Status == debiting || t.Status == crediting
}

// permanent reports whether err means the step can never succeed.
func permanent(err error) (code string, ok bool) {
	var ae *actors.Error
	if errors.As(err, &ae) && errors.Is(err, actors.ErrHandler) {
		return ae.HandlerCode, true
	}
	return "", false
}

func afterCheck(c *transferCtx, _ *bankpb.Balance, err error) {
	if !inProgress(c.State) {
		return
	}
	if err != nil {
		if code, ok := permanent(err); ok {
			c.State.Status, c.State.Error = rejected, code
			return
		}
		step(c) // not answered yet: resend
		return
	}
	debit(c)
}

func debit(c *transferCtx) {
	id := c.Ref().ID
	actors.Request(c, AccountRef(c.State.From), &bankpb.Debit{TransferId: id, Amount: c.State.Amount}, id+":debit", afterDebit)
}

func credit(c *transferCtx) {
	id := c.Ref().ID
	actors.Request(c, AccountRef(c.State.To), &bankpb.Credit{TransferId: id, Amount: c.State.Amount}, id+":credit", afterCredit)
}

func afterDebit(c *transferCtx, _ *bankpb.Balance, err error) {
	if !inProgress(c.State) {
		return
	}
	if err != nil {
		if code, ok := permanent(err); ok {
			c.State.Status, c.State.Error = rejected, code
			return
		}
		debit(c)
		return
	}
	credit(c)
}

func afterCredit(c *transferCtx, _ *bankpb.Balance, err error) {
	if !inProgress(c.State) {
		return
	}
	if err != nil {
		if code, ok := permanent(err); ok {
			c.State.Status, c.State.Error = compensating, code
			step(c)
			return
		}
		credit(c)
		return
	}
	c.State.Status = completed
	forget(c)
}

func afterRefund(c *transferCtx, _ *bankpb.Balance, err error) {
	if c.State.Status != compensating {
		return
	}
	if err != nil {
		step(c) // a refund to an open account cannot fail for good: resend
		return
	}
	c.State.Status = compensated
	forget(c)
}

// forget tells both accounts the saga is over; sent once the final status
// is durable (output gate), so no step of this transfer is resent after.
func forget(c *transferCtx) {
	id := c.Ref().ID
	c.Send(AccountRef(c.State.From), &bankpb.Forget{TransferId: id}, id+":forget-from")
	c.Send(AccountRef(c.State.To), &bankpb.Forget{TransferId: id}, id+":forget-to")
	if c.State.Status == compensated {
		c.Send(AccountRef(c.State.From), &bankpb.Forget{TransferId: id + ":refund"}, id+":forget-refund")
	}
}
