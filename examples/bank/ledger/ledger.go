// Package ledger holds the bank example's entities: accounts and the
// transfer sagas that move money between them.
//
// A transfer is a saga entity keyed by its source account and transfer ID
// and placed in the source account's shard (actors.Colocated), so the saga
// and its debit exchange messages in memory and share one Save. It debits
// the source and, at the same time, holds the credit at the destination
// (a held credit is recorded there but is not part of the balance); once
// both are durable it releases the credit, which makes it part of the
// destination's balance, and answers. Each step is sent with a request ID
// derived from the transfer ID and resent (same ID) until answered.
// Accounts remember the transfers they debited, held or credited until
// the saga finishes and tells them to forget, so a resent step is
// recognised however late it comes. A transfer refused at the debit
// (unknown source, insufficient funds) has no effect: its hold is
// cancelled; a credit that can never succeed (unknown destination) is
// compensated by a refund to the source.
//
// The hold is what lets the two writes be made at once rather than one
// after the other (the saga sends it actors.BeforeDurable): if the debit's
// write is lost, the saga and its debit are lost with it, and the hold
// stays a hold until the saga, asked by the account, cancels it. The
// release is written behind (it rides with the account's next write): an
// account that loses it with its memory (a crash, a failed write) finds
// the credit still held, and until the saga settles it refuses, for now
// (actors.Unavailable), every answer that shows its balance, since the
// transfer may have been acknowledged (see settling).
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
	}),
	actors.OnActivate(func(c *accountCtx) { settleHeld(c, fmt.Sprintf("activate-%x", c.Activation())) }))

// AccountEvents are the account kind's event types.
var AccountEvents = []proto.Message{(*bankpb.Opened)(nil), (*bankpb.Deposited)(nil), (*bankpb.Withdrawn)(nil),
	(*bankpb.Debited)(nil), (*bankpb.Credited)(nil), (*bankpb.Refunded)(nil), (*bankpb.Forgotten)(nil),
	(*bankpb.CreditHeld)(nil), (*bankpb.HoldCancelled)(nil)}

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
		delete(a.Held, ev.TransferId)
	case *bankpb.CreditHeld:
		if a.Held == nil {
			a.Held = make(map[string]*bankpb.HeldCredit)
		}
		a.Held[ev.TransferId] = &bankpb.HeldCredit{Amount: ev.Amount, Source: ev.Source, Activation: ev.Activation, Saga: ev.Saga}
	case *bankpb.HoldCancelled:
		delete(a.Held, ev.TransferId)
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
	if err := settling(c); err != nil {
		return nil, err
	}
	return &bankpb.Balance{Amount: c.State.Balance}, nil
}

func (accounts) Deposit(c *accountCtx, m *bankpb.Deposit) (*bankpb.Balance, error) {
	if err := checkAccount(c, m.Amount); err != nil {
		return nil, err
	}
	if err := settling(c); err != nil {
		return nil, err
	}
	c.Emit(&bankpb.Deposited{Amount: m.Amount})
	return &bankpb.Balance{Amount: c.State.Balance}, nil
}

func (accounts) Withdraw(c *accountCtx, m *bankpb.Withdraw) (*bankpb.Balance, error) {
	if err := checkAccount(c, m.Amount); err != nil {
		return nil, err
	}
	if err := settling(c); err != nil {
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
	if err := settling(c); err != nil {
		return nil, err
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
		// Credits in doubt (see settling) may be part of the balance: a
		// debit that they could cover waits for them to settle. One that
		// the balance covers without them needs no answer about them,
		// and one that they could not cover either is refused for good.
		// Refusing every debit while any credit is in doubt would make
		// accounts wait on each other: the sagas that settle an account's
		// credits can need debits at accounts in doubt themselves.
		if n, doubt := inDoubt(c); n > 0 && c.State.Balance+doubt >= m.Amount {
			return nil, actors.Unavailable(settleRetry, "account %s is settling %d credits held before it restarted", c.Ref().ID, n)
		}
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

// Hold holds a transfer's credit: recorded with the activation that holds
// it and the saga's, not part of the balance, until Release adds it or
// Cancel drops it. The saga sends it while the debit at the source is not
// yet durable (actors.BeforeDurable), so a hold may belong to a saga that
// is lost with its debit: the account asks the saga (settleHeld), learns
// that no such transfer started, and drops the hold. A transfer already
// credited is not held again; one already held is held again only when
// another activation of the saga asks, under that saga's activation (the
// account's stays: a hold in doubt stays in doubt).
func (accounts) Hold(c *accountCtx, m *bankpb.Hold) (*bankpb.Balance, error) {
	if _, credited := c.State.Credits[m.TransferId]; credited {
		return &bankpb.Balance{}, nil
	}
	activation := c.Activation()
	if h, held := c.State.Held[m.TransferId]; held {
		if h.Saga == m.Saga {
			return &bankpb.Balance{}, nil
		}
		activation = h.Activation
	}
	if err := checkAccount(c, m.Amount); err != nil {
		return nil, err
	}
	c.Emit(&bankpb.CreditHeld{TransferId: m.TransferId, Amount: m.Amount, Source: m.Source, Activation: activation, Saga: m.Saga})
	holding(c)
	return &bankpb.Balance{}, nil // the balance is not part of the answer
}

// Release adds a transfer's credit to the balance: the saga sends it once
// the debit and the hold are durable, and answers its client once the
// release is answered. It is written behind (actors.Context.WriteBehind)
// and answered at once (actors.Context.ReplyBeforeDurable): the balance
// it changes is shown only by answers that wait for it to be durable (a
// read writes it first), and if it is lost with the account's memory the
// credit is still held, from an earlier activation, so the account
// refuses to show its balance until the saga settles it again
// (settling). The answer is empty: it states only that the credit is
// released in this activation. The transfer's amount comes with the
// release: a credit is released even if its hold was cancelled meanwhile
// (a stale Cancel, see Cancel), since its debit is durable.
func (accounts) Release(c *accountCtx, m *bankpb.Release) (*bankpb.Balance, error) {
	c.WriteBehind()
	c.ReplyBeforeDurable()
	if _, done := c.State.Credits[m.TransferId]; done {
		return &bankpb.Balance{}, nil
	}
	if err := checkAccount(c, m.Amount); err != nil {
		return nil, err
	}
	c.Emit(&bankpb.Credited{TransferId: m.TransferId, Amount: m.Amount, Source: m.Source})
	holding(c)
	return &bankpb.Balance{}, nil
}

// Cancel drops a held credit: its transfer was rejected, or its saga
// never started for good (the hold's saga was lost with its debit). It is
// written behind: a lost Cancel leaves the hold, which the settle reminder
// asks about again. A Cancel that arrives after the transfer's release
// (the saga of a lost start answering late while the client's resubmission
// ran) changes nothing.
func (accounts) Cancel(c *accountCtx, m *bankpb.Cancel) (*bankpb.Balance, error) {
	c.WriteBehind()
	if _, held := c.State.Held[m.TransferId]; held {
		c.Emit(&bankpb.HoldCancelled{TransferId: m.TransferId})
	}
	if !holdsAny(c.State) {
		c.CancelReminder(settleReminder)
	}
	return &bankpb.Balance{}, nil
}

// settling refuses, for now (actors.Unavailable, retried by the caller),
// an answer that shows or depends on the balance while the account holds
// credits held by an earlier activation: such a credit may have been
// released there, and its transfer acknowledged, in a write lost with
// that activation's memory, so the balance may lack money a client was
// told had arrived. The account's activation asked their sagas to settle
// (OnActivate); each answers with a Release, a Forget that releases, or a
// Cancel. Credits held by this activation are not in doubt: the account
// has not released them, so their transfers are not acknowledged, and a
// balance without them is one the account had.
func settling(c *accountCtx) error {
	if n, _ := inDoubt(c); n > 0 {
		return actors.Unavailable(settleRetry, "account %s is settling %d credits held before it restarted", c.Ref().ID, n)
	}
	return nil
}

// inDoubt counts the credits held by an earlier activation, and sums
// their amounts.
func inDoubt(c *accountCtx) (n int, amount int64) {
	for _, h := range c.State.Held {
		if h.Activation != c.Activation() {
			n++
			amount += h.Amount
		}
	}
	return n, amount
}

// HasDebit answers with the amount the account debited for a transfer it
// has not forgotten (0 if none): a saga asked to settle while DEBITING
// asks its source, co-located, whether a release can have been sent (see
// transfers.Settle). It reads nothing in doubt, so an account answers it
// while it settles its own credits.
func (accounts) HasDebit(c *accountCtx, m *bankpb.HasDebit) (*bankpb.DebitState, error) {
	return &bankpb.DebitState{Amount: c.State.Debits[m.TransferId]}, nil
}

// settleRetry is how long a caller refused by settling waits at least.
const settleRetry = 10 * time.Millisecond

// holdsAny reports whether the account holds any transfer.
func holdsAny(a *bankpb.Account) bool {
	return len(a.Debits) > 0 || len(a.Credits) > 0 || len(a.Held) > 0
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
	if _, held := c.State.Held[m.TransferId]; held && m.Amount > 0 {
		// The release was lost with the account's memory: the transfer
		// completed, so its credit is released now.
		c.Emit(&bankpb.Credited{TransferId: m.TransferId, Amount: m.Amount, Source: m.Source})
	}
	_, debited := c.State.Debits[m.TransferId]
	_, credited := c.State.Credits[m.TransferId]
	if debited || credited {
		c.Emit(&bankpb.Forgotten{TransferId: m.TransferId})
	}
	if !holdsAny(c.State) {
		c.CancelReminder(settleReminder)
	}
	return &bankpb.Balance{}, nil
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
	if !holdsAny(c.State) {
		c.CancelReminder(settleReminder)
		return &bankpb.Balance{}, nil
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
	// The activation is part of the request IDs: a saga's answer, recorded
	// under its request ID, speaks of the releases sent before it was
	// asked, and a firing handled again by a later activation asks again.
	settleHeld(c, fmt.Sprintf("%s@%x", c.RequestID(), c.Activation()))
	return &bankpb.Balance{}, nil
}

// settleHeld asks the saga of every credit the account holds to settle
// it, with request IDs under prefix: a saga that ended releases the
// credit (its Forget) or cancels it (a rejection), a running one releases
// it when it gets there, and a saga that never started for good (its
// start was lost with its debit; the hold had left before) answers that
// the transfer is unknown, and the account drops the hold, unless the
// transfer was submitted again and its new saga holds it meanwhile (the
// hold is then that saga's). Settle is a write at the saga, so that
// answer comes from the shard's current owner: a node that lost the shard
// cannot make it durable. An activation asks at once (OnActivate), so
// that the credits held before it, which keep its balance from being
// shown (settling), are settled without waiting for the settle reminder.
func settleHeld(c *accountCtx, prefix string) {
	for id, h := range c.State.Held {
		// The ref is built from the kinds' names, not TransferRef: this
		// runs in Account's OnActivate hook, which may not refer to the
		// Transfer kind (an initialization cycle).
		saga, err := actors.Colocated(bankpb.TransferServiceKindName, actors.Ref{Kind: bankpb.AccountServiceKindName, ID: h.Source}, id)
		if err != nil {
			continue // not a valid source: no saga sent it
		}
		asked := h.Saga
		actors.Request(c, saga, &bankpb.Settle{}, prefix+"/"+id, func(c *accountCtx, st *bankpb.TransferState, err error) {
			h, held := c.State.Held[id]
			if !held {
				return
			}
			if err == nil && st.Undebited && h.Activation != c.Activation() {
				// No release of the credit was ever sent: it is not in
				// doubt, and this activation holds it from now on (a
				// release that comes later comes to this activation).
				c.Emit(&bankpb.CreditHeld{TransferId: id, Amount: h.Amount, Source: h.Source, Activation: c.Activation(), Saga: h.Saga})
				return
			}
			if code, ok := permanent(err); ok && code == CodeUnknownTransfer && h.Saga == asked {
				c.Emit(&bankpb.HoldCancelled{TransferId: id})
			}
		})
	}
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
