// Package ledger holds the bank example's entities: accounts and the
// transfer sagas that move money between them.
//
// A transfer is a saga entity keyed by its source account and transfer ID
// and placed in the source account's shard (actors.Colocated), so the saga
// and its debit exchange messages in memory and share one Save. It debits
// the source, then credits the destination, each step sent with a request
// ID derived from the transfer ID and resent (same ID) until answered.
// Accounts remember the transfers they debited or credited until the saga
// finishes and tells them to forget, so a resent step is recognised however
// late it comes. A transfer refused at the debit (unknown source,
// insufficient funds) has no effect; a credit that can never succeed
// (unknown destination) is compensated by a refund to the source.
// Submitting the same transfer again never applies it twice; the submit
// call is answered with the saga's outcome (a deferred reply). A transfer
// may also be scheduled (ScheduleTransfer): it waits as SCHEDULED, with a
// durable reminder, and its saga starts when the reminder fires.
package ledger

import (
	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/proto/bankpb"
)

// Handler error codes.
const (
	CodeInvalidAmount     = "invalid_amount"
	CodeUnknownAccount    = "unknown_account"
	CodeInsufficientFunds = "insufficient_funds"
	CodeSameAccount       = "same_account"
	CodeConflict          = "conflict"
	CodeUnknownTransfer   = "unknown_transfer"
	CodeInvalidStart      = "invalid_start"
)

type accountCtx = actors.Context[*bankpb.Account]

// Account is the account kind (bankpb.AccountService). The state type is
// spelled out: Go does not infer it from accounts{} in a package-level
// declaration placed before the type's methods (golang/go#77905).
var Account = bankpb.MustAccountServiceKind[*bankpb.Account](
	func() *bankpb.Account { return new(bankpb.Account) }, accounts{})

// accounts is the account kind's handlers.
type accounts struct{}

var _ bankpb.AccountServiceServer[*bankpb.Account] = accounts{}

func (accounts) Open(c *accountCtx, m *bankpb.Open) (*bankpb.Balance, error) {
	if m.Initial < 0 {
		return nil, actors.HandlerError(CodeInvalidAmount, "initial balance %d is negative", m.Initial)
	}
	if !c.State.Opened {
		c.State.Opened = true
		c.State.Balance = m.Initial
	}
	return &bankpb.Balance{Amount: c.State.Balance}, nil
}

func (accounts) Deposit(c *accountCtx, m *bankpb.Deposit) (*bankpb.Balance, error) {
	if err := checkAccount(c, m.Amount); err != nil {
		return nil, err
	}
	c.State.Balance += m.Amount
	return &bankpb.Balance{Amount: c.State.Balance}, nil
}

func (accounts) Withdraw(c *accountCtx, m *bankpb.Withdraw) (*bankpb.Balance, error) {
	if err := checkAccount(c, m.Amount); err != nil {
		return nil, err
	}
	if c.State.Balance < m.Amount {
		return nil, actors.HandlerError(CodeInsufficientFunds, "balance %d < %d", c.State.Balance, m.Amount)
	}
	c.State.Balance -= m.Amount
	return &bankpb.Balance{Amount: c.State.Balance}, nil
}

func (accounts) GetBalance(c *accountCtx, _ *bankpb.GetBalance) (*bankpb.Balance, error) {
	if !c.State.Opened {
		return nil, actors.HandlerError(CodeUnknownAccount, "account %s is not open", c.Ref().ID)
	}
	return &bankpb.Balance{Amount: c.State.Balance}, nil
}

func (accounts) CheckOpen(c *accountCtx, _ *bankpb.CheckOpen) (*bankpb.Balance, error) {
	if !c.State.Opened {
		return nil, actors.HandlerError(CodeUnknownAccount, "account %s is not open", c.Ref().ID)
	}
	return &bankpb.Balance{}, nil // the balance is not part of the answer
}

func (accounts) Debit(c *accountCtx, m *bankpb.Debit) (*bankpb.Balance, error) {
	if _, done := c.State.Debits[m.TransferId]; done {
		return &bankpb.Balance{Amount: c.State.Balance}, nil
	}
	if err := checkAccount(c, m.Amount); err != nil {
		return nil, err
	}
	if c.State.Balance < m.Amount {
		return nil, actors.HandlerError(CodeInsufficientFunds, "balance %d < %d", c.State.Balance, m.Amount)
	}
	c.State.Balance -= m.Amount
	if c.State.Debits == nil {
		c.State.Debits = make(map[string]int64)
	}
	c.State.Debits[m.TransferId] = m.Amount
	return &bankpb.Balance{Amount: c.State.Balance}, nil
}

func (accounts) Credit(c *accountCtx, m *bankpb.Credit) (*bankpb.Balance, error) {
	if _, done := c.State.Credits[m.TransferId]; done {
		return &bankpb.Balance{Amount: c.State.Balance}, nil
	}
	if err := checkAccount(c, m.Amount); err != nil {
		return nil, err
	}
	c.State.Balance += m.Amount
	if c.State.Credits == nil {
		c.State.Credits = make(map[string]int64)
	}
	c.State.Credits[m.TransferId] = m.Amount
	return &bankpb.Balance{Amount: c.State.Balance}, nil
}

func (accounts) Forget(c *accountCtx, m *bankpb.Forget) (*bankpb.Balance, error) {
	delete(c.State.Debits, m.TransferId)
	delete(c.State.Credits, m.TransferId)
	return &bankpb.Balance{Amount: c.State.Balance}, nil
}

func checkAccount(c *accountCtx, amount int64) error {
	if amount <= 0 {
		return actors.HandlerError(CodeInvalidAmount, "amount %d is not positive", amount)
	}
	if !c.State.Opened {
		return actors.HandlerError(CodeUnknownAccount, "account %s is not open", c.Ref().ID)
	}
	return nil
}

// AccountRef returns the ref of account id.
func AccountRef(id string) actors.Ref { return Account.Ref(id) }

// TransferRef returns the ref of transfer id from account from: the
// transfer lives in its source account's shard ({account/from}id). A
// transfer is identified by its source and its ID. An invalid from gives
// a ref that fails validation.
func TransferRef(from, id string) actors.Ref { return Transfer.Ref(TransferID(from, id)) }

// TransferID returns the entity ID of transfer id from account from, the
// ID of TransferRef(from, id): what a bankpb.TransferServiceClient takes.
// An invalid from gives "", an ID that fails validation.
func TransferID(from, id string) string {
	r, err := actors.Colocated(Transfer.Name(), AccountRef(from), id)
	if err != nil {
		return "" // invalid: the call that uses it says so
	}
	return r.ID
}

// Terminal reports whether a transfer status is final.
func Terminal(s bankpb.TransferStatus) bool {
	switch s {
	case bankpb.TransferStatus_TRANSFER_STATUS_COMPLETED, bankpb.TransferStatus_TRANSFER_STATUS_REJECTED,
		bankpb.TransferStatus_TRANSFER_STATUS_COMPENSATED:
		return true
	}
	return false
}
