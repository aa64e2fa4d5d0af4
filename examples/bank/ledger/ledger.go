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
//
// Accounts are event-sourced (actors.EventSourced): each handler checks
// its request against the account's state and emits what happened
// (bankpb.Opened, Debited, Credited, Refunded, ...), which ApplyAccount
// folds into the state. The events are the account's history: a
// projection of the account journal (Statements) turns them into each
// account's statement, with running balances.
package ledger

import (
	"fmt"
	"strings"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/proto/bankpb"
	"google.golang.org/protobuf/proto"
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

// Account is the account kind (bankpb.AccountService), event-sourced. The
// state type is spelled out: Go does not infer it from accounts{} in a
// package-level declaration placed before the type's methods
// (golang/go#77905).
var Account = bankpb.MustAccountServiceKind[*bankpb.Account](
	func() *bankpb.Account { return new(bankpb.Account) }, accounts{},
	actors.EventSourced(actors.EventSourcing[*bankpb.Account]{
		Events: AccountEvents,
		Apply:  ApplyAccount,
	}))

// AccountEvents are the account kind's event types.
var AccountEvents = []proto.Message{(*bankpb.Opened)(nil), (*bankpb.Deposited)(nil), (*bankpb.Withdrawn)(nil),
	(*bankpb.Debited)(nil), (*bankpb.Credited)(nil), (*bankpb.Refunded)(nil), (*bankpb.Forgotten)(nil)}

// ApplyAccount folds one account event into the account's state.
func ApplyAccount(a *bankpb.Account, ev proto.Message) error {
	switch ev := ev.(type) {
	case *bankpb.Opened:
		a.Opened, a.Balance = true, ev.Initial
	case *bankpb.Deposited:
		a.Balance += ev.Amount
	case *bankpb.Withdrawn:
		a.Balance -= ev.Amount
	case *bankpb.Debited:
		a.Balance -= ev.Amount
		if a.Debits == nil {
			a.Debits = make(map[string]int64)
		}
		a.Debits[ev.TransferId] = ev.Amount
	case *bankpb.Credited:
		a.Balance += ev.Amount
		if a.Credits == nil {
			a.Credits = make(map[string]int64)
		}
		a.Credits[ev.TransferId] = ev.Amount
		if ev.Source != "" {
			if a.CreditSources == nil {
				a.CreditSources = make(map[string]string)
			}
			a.CreditSources[ev.TransferId] = ev.Source
		}
	case *bankpb.Refunded:
		a.Balance += ev.Amount
		if a.Credits == nil {
			a.Credits = make(map[string]int64)
		}
		a.Credits[ev.RefundId] = ev.Amount
	case *bankpb.Forgotten:
		delete(a.Debits, ev.TransferId)
		delete(a.Credits, ev.TransferId)
		delete(a.CreditSources, ev.TransferId)
	default:
		return fmt.Errorf("ledger: unexpected account event %T", ev)
	}
	return nil
}

// accounts is the account kind's handlers.
type accounts struct{}

var _ bankpb.AccountServiceServer[*bankpb.Account] = accounts{}

func (accounts) Open(c *accountCtx, m *bankpb.Open) (*bankpb.Balance, error) {
	if m.Initial < 0 {
		return nil, actors.HandlerError(CodeInvalidAmount, "initial balance %d is negative", m.Initial)
	}
	if !c.State.Opened {
		c.Emit(&bankpb.Opened{Initial: m.Initial})
	}
	return &bankpb.Balance{Amount: c.State.Balance}, nil
}

func (accounts) Deposit(c *accountCtx, m *bankpb.Deposit) (*bankpb.Balance, error) {
	if err := checkAccount(c, m.Amount); err != nil {
		return nil, err
	}
	c.Emit(&bankpb.Deposited{Amount: m.Amount})
	return &bankpb.Balance{Amount: c.State.Balance}, nil
}

func (accounts) Withdraw(c *accountCtx, m *bankpb.Withdraw) (*bankpb.Balance, error) {
	if err := checkAccount(c, m.Amount); err != nil {
		return nil, err
	}
	if c.State.Balance < m.Amount {
		return nil, actors.HandlerError(CodeInsufficientFunds, "balance %d < %d", c.State.Balance, m.Amount)
	}
	c.Emit(&bankpb.Withdrawn{Amount: m.Amount})
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
	c.Emit(&bankpb.Debited{TransferId: m.TransferId, Amount: m.Amount})
	holding(c)
	return &bankpb.Balance{Amount: c.State.Balance}, nil
}

func (accounts) Credit(c *accountCtx, m *bankpb.Credit) (*bankpb.Balance, error) {
	if _, done := c.State.Credits[m.TransferId]; done {
		return &bankpb.Balance{Amount: c.State.Balance}, nil
	}
	if err := checkAccount(c, m.Amount); err != nil {
		return nil, err
	}
	if m.RefundOf != "" {
		c.Emit(&bankpb.Refunded{TransferId: m.RefundOf, Amount: m.Amount, RefundId: m.TransferId})
	} else {
		c.Emit(&bankpb.Credited{TransferId: m.TransferId, Amount: m.Amount, Source: m.Source})
	}
	holding(c)
	return &bankpb.Balance{Amount: c.State.Balance}, nil
}

// Forget drops a finished transfer from the account, written behind
// (actors.Context.WriteBehind): it saves no write of its own, and rides
// with the account's next one (its next debit or credit, its settle
// reminder's firing, its passivation). Lost with a crash before then, the
// account still holds the transfer, which is the safe side: its settle
// reminder asks the saga, which sends Forget again. The saga sends it
// one-way (actors.AtMostOnce), and a Forget lost on the way is repaired
// the same way.
func (accounts) Forget(c *accountCtx, m *bankpb.Forget) (*bankpb.Balance, error) {
	c.WriteBehind()
	_, debited := c.State.Debits[m.TransferId]
	_, credited := c.State.Credits[m.TransferId]
	if debited || credited {
		c.Emit(&bankpb.Forgotten{TransferId: m.TransferId})
	}
	if len(c.State.Debits) == 0 && len(c.State.Credits) == 0 {
		c.CancelReminder(settleReminder)
	}
	return &bankpb.Balance{Amount: c.State.Balance}, nil
}

// An account that holds transfers (debits, credits) keeps a periodic
// reminder, settleReminder, that asks their sagas to settle every
// settleEvery: a saga tells its accounts to forget a transfer once it has
// finished, but the node running it can lose the saga's shard just then
// (a pause, a partition), and the new owner does not run the saga again
// unless something activates it. The reminder is that something: without
// it the account would hold the transfer for good. It is set with the
// first held transfer and cancelled with the last, in the same writes.
const (
	settleReminder = "settle"
	settleEvery    = 10 * time.Second
)

// holding makes sure the account's settle reminder is set.
func holding(c *accountCtx) {
	if _, _, ok := c.Reminder(settleReminder); ok {
		return
	}
	// SetReminder fails only on a store without a reminder index (every
	// store of ordo's has one) or a misdeclared kind: the account still
	// works, and a lost Forget is re-sent when its saga next activates.
	_ = c.SetReminder(settleReminder, time.Now().Add(settleEvery), settleEvery, &bankpb.SettleHeld{})
}

// SettleHeld asks the saga of every transfer the account holds to settle
// (bankpb.Settle): a finished one tells its accounts to forget it again, a
// running one goes on (the message activates it if it was not active).
func (accounts) SettleHeld(c *accountCtx, _ *bankpb.SettleHeld) (*bankpb.Balance, error) {
	if len(c.State.Debits) == 0 && len(c.State.Credits) == 0 {
		c.CancelReminder(settleReminder)
		return &bankpb.Balance{Amount: c.State.Balance}, nil
	}
	self := c.Ref().ID
	settle := func(source, id string) {
		c.Send(TransferRef(source, id), &bankpb.Settle{}, c.RequestID()+"/"+id)
	}
	for id := range c.State.Debits {
		settle(self, id)
	}
	for id := range c.State.Credits {
		if tid, refund := strings.CutSuffix(id, refundSuffix); refund {
			settle(self, tid) // a refund is credited to the transfer's source
		} else if src := c.State.CreditSources[id]; src != "" {
			settle(src, id)
		}
	}
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
