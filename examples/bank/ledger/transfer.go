package ledger

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/proto/bankpb"
)

type transferCtx = actors.Context[*bankpb.Transfer]

const (
	debiting     = bankpb.TransferStatus_TRANSFER_STATUS_DEBITING
	completed    = bankpb.TransferStatus_TRANSFER_STATUS_COMPLETED
	rejected     = bankpb.TransferStatus_TRANSFER_STATUS_REJECTED
	compensating = bankpb.TransferStatus_TRANSFER_STATUS_COMPENSATING
	compensated  = bankpb.TransferStatus_TRANSFER_STATUS_COMPENSATED
	scheduled    = bankpb.TransferStatus_TRANSFER_STATUS_SCHEDULED
	unspecified  = bankpb.TransferStatus_TRANSFER_STATUS_UNSPECIFIED
)

// outcome is the key under which Submit requests wait for the saga's end.
const outcome = "outcome"

// Transfer is the transfer saga kind (bankpb.TransferService). A transfer
// lives in its source account's shard (TransferRef), so the saga and its
// debit talk in memory and their writes share one Save. It trusts its
// callers' AsNew hints (SubmitNew): a transfer whose client has just
// minted its ID starts without a store read.
var Transfer = bankpb.MustTransferServiceKind[*bankpb.Transfer](
	func() *bankpb.Transfer { return new(bankpb.Transfer) }, transfers{},
	actors.OnActivate(func(c *transferCtx) { step(c) }),
	actors.TrustAsNew[*bankpb.Transfer]())

// transfers is the transfer kind's handlers.
type transfers struct{}

var _ bankpb.TransferServiceServer[*bankpb.Transfer] = transfers{}

// toAccount sends a saga's steps to accounts.
var toAccount bankpb.AccountServiceRequester[*bankpb.Transfer]

func (transfers) GetTransfer(c *transferCtx, _ *bankpb.GetTransfer) (*bankpb.TransferState, error) {
	if c.State.Status == unspecified {
		return nil, actors.HandlerError(CodeUnknownTransfer, "transfer %s was never submitted", c.Ref().ID)
	}
	return state(c.State), nil
}

func state(t *bankpb.Transfer) *bankpb.TransferState {
	return &bankpb.TransferState{From: t.From, To: t.To, Amount: t.Amount, Status: t.Status, Error: t.Error,
		StartUnixNano: t.StartUnixNano}
}

// SubmitTransfer starts the saga, or joins it, and answers with its final
// state (a deferred reply): one call from the client, no polling. A
// transfer scheduled with the same parameters is joined too: the answer
// waits for it to start and end (within the call's deadline).
func (transfers) SubmitTransfer(c *transferCtx, m *bankpb.SubmitTransfer) (*bankpb.TransferState, error) {
	t := c.State
	if t.Status != unspecified {
		if t.From != m.From || t.To != m.To || t.Amount != m.Amount {
			return nil, actors.HandlerError(CodeConflict, "transfer %s was submitted with other parameters", transferID(c))
		}
		if Terminal(t.Status) {
			c.Passivate()
			return state(t), nil
		}
		c.Defer(outcome)
		return nil, nil
	}
	if err := validate(c, m.From, m.To, m.Amount); err != nil {
		return nil, err
	}
	t.From, t.To, t.Amount, t.Status = m.From, m.To, m.Amount, debiting
	step(c)
	c.Defer(outcome)
	return nil, nil
}

// validate checks a new transfer's parameters.
func validate(c *transferCtx, from, to string, amount int64) error {
	if amount <= 0 {
		return actors.HandlerError(CodeInvalidAmount, "amount %d is not positive", amount)
	}
	for _, id := range []string{from, to} {
		if err := AccountRef(id).Validate(); err != nil {
			return actors.HandlerError(CodeUnknownAccount, "%v", err)
		}
	}
	if from == to {
		return actors.HandlerError(CodeSameAccount, "source and destination are both %s", from)
	}
	if with, ok := actors.PlacedWith(c.Ref()); !ok || with != AccountRef(from) {
		return actors.HandlerError(CodeConflict, "transfer %s is not placed with its source %s: use TransferRef", c.Ref().ID, from)
	}
	return nil
}

// startReminder is the name of a scheduled transfer's reminder.
const startReminder = "start"

// ScheduleTransfer records the transfer as SCHEDULED, with a durable
// reminder that starts its saga at the start time (StartTransfer), and
// answers at once. Nothing moves before then: the accounts are checked
// when it starts (a transfer from an account without the funds by then is
// rejected then). The reminder lives in the transfer's record: it fires
// on whichever node owns the transfer's shard at the time, after crashes
// and handoffs too, and the saga's steps are idempotent, so a transfer
// starts once however often its reminder fires.
func (transfers) ScheduleTransfer(c *transferCtx, m *bankpb.ScheduleTransfer) (*bankpb.TransferState, error) {
	t := c.State
	if t.Status != unspecified {
		if t.From != m.From || t.To != m.To || t.Amount != m.Amount || t.StartUnixNano != m.StartUnixNano {
			return nil, actors.HandlerError(CodeConflict, "transfer %s was submitted with other parameters", transferID(c))
		}
		return state(t), nil
	}
	if m.StartUnixNano <= 0 {
		return nil, actors.HandlerError(CodeInvalidStart, "start time %d is not after 1970", m.StartUnixNano)
	}
	if err := validate(c, m.From, m.To, m.Amount); err != nil {
		return nil, err
	}
	t.From, t.To, t.Amount, t.Status, t.StartUnixNano = m.From, m.To, m.Amount, scheduled, m.StartUnixNano
	if err := c.SetReminder(startReminder, time.Unix(0, m.StartUnixNano), 0, &bankpb.StartTransfer{}); err != nil {
		return nil, fmt.Errorf("scheduling transfer %s: %w", transferID(c), err)
	}
	return state(t), nil
}

// StartTransfer starts a scheduled transfer's saga: its reminder's
// firing. Waiting submitters (SubmitTransfer joined it) are answered when
// the saga ends, as for a transfer submitted at once.
func (transfers) StartTransfer(c *transferCtx, _ *bankpb.StartTransfer) (*bankpb.TransferState, error) {
	if c.State.Status == scheduled {
		c.State.Status = debiting
		step(c)
	}
	return state(c.State), nil
}

// step starts (or restarts) the saga from its durable status. While a
// transfer is in progress its stored status stays DEBITING: the debit, the
// hold and the release are each idempotent per transfer ID (accounts keep
// the IDs of the transfers they debited, held or credited until the saga
// tells them to forget), so a saga that restarts from the debit after a
// crash repeats no effect. Only the start and the outcome are written. The
// start shares its Save with the debit (the source account is
// co-located), the hold is written at the destination meanwhile, and the
// outcome is answered without waiting for its own write (see finish), so
// a completed transfer's critical path is one durable write at each
// account, made at the same time, and the release's round trip.
func step(c *transferCtx) {
	switch c.State.Status {
	case debiting:
		debitAndHold(c)
	case completed, compensated:
		// The forgets sent when it ended may have been lost with the node:
		// send them again (forgetting twice is harmless).
		forget(c)
	case compensating:
		id := transferID(c)
		toAccount.Credit(c, c.State.From, &bankpb.Credit{TransferId: id + refundSuffix, Amount: c.State.Amount, RefundOf: id, Source: c.State.From},
			id+":refund", afterRefund)
	}
}

// transferID is the transfer's own ID: its entity ID without the
// placement prefix.
func transferID(c *transferCtx) string {
	if _, ok := actors.PlacedWith(c.Ref()); ok {
		_, key, _ := strings.Cut(c.Ref().ID, "}")
		return key
	}
	return c.Ref().ID
}

// permanent reports whether err means the step can never succeed.
func permanent(err error) (code string, ok bool) {
	var ae *actors.Error
	if errors.As(err, &ae) && errors.Is(err, actors.ErrHandler) {
		return ae.HandlerCode, true
	}
	return "", false
}

// firstStep collects the answers to a saga's debit and hold, sent
// together, until both are in. It lives in the two continuations (an
// activation's memory): a saga that restarts sends both again.
type firstStep struct {
	debited, held     bool
	debitErr, holdErr error
}

// debitAndHold debits the source and holds the credit at the destination
// at once. The debit goes to the co-located source in memory; the hold
// leaves before the saga's start is durable (actors.BeforeDurable), so
// that the destination writes it while the source writes the debit: if
// the start and the debit are lost, the hold is left to a saga that never
// started, and the destination drops it when it asks the saga's shard and
// learns so (see settleHeld).
func debitAndHold(c *transferCtx) {
	id := transferID(c)
	s := new(firstStep)
	toAccount.Debit(c, c.State.From, &bankpb.Debit{TransferId: id, Amount: c.State.Amount}, id+":debit",
		func(c *transferCtx, _ *bankpb.Balance, err error) {
			s.debited, s.debitErr = true, err
			afterFirstStep(c, s)
		})
	// The hold names the saga's activation, and so does its request ID: a
	// saga restarted holds again under its new activation (the account
	// recognises the transfer by its ID, see Hold).
	hold := &bankpb.Hold{TransferId: id, Amount: c.State.Amount, Source: c.State.From, Saga: c.Activation()}
	actors.Request(c, AccountRef(c.State.To), hold, fmt.Sprintf("%s:hold-%x", id, hold.Saga),
		func(c *transferCtx, _ *bankpb.Balance, err error) {
			s.held, s.holdErr = true, err
			afterFirstStep(c, s)
		}, actors.BeforeDurable())
}

// afterFirstStep decides on each answer. A debit refused for good rejects
// the transfer at once (and cancels its hold, if the hold arrives first;
// one that arrives later is cancelled when the destination asks).
// Otherwise it waits for both answers: a hold refused for good (no such
// destination) after a debit compensates it with a refund; a step that
// gave up for now is retried, both steps again; otherwise the credit is
// released.
func afterFirstStep(c *transferCtx, s *firstStep) {
	if c.State.Status != debiting {
		return
	}
	if debitCode, debitRefused := permanent(s.debitErr); debitRefused {
		finish(c, rejected, debitCode)
		return
	}
	if !s.debited || !s.held {
		return
	}
	holdCode, holdRefused := permanent(s.holdErr)
	switch {
	case s.debitErr != nil:
		retryLater(c, s.debitErr) // not answered yet
	case holdRefused:
		c.State.Status, c.State.Error = compensating, holdCode
		step(c)
	case s.holdErr != nil:
		retryLater(c, s.holdErr)
	default:
		release(c)
	}
}

// release adds the held credit to the destination's balance; the
// transfer is answered once the release is. Its debit is durable (the
// debit's answer waited for it), and so is the hold.
func release(c *transferCtx) {
	id := transferID(c)
	toAccount.Release(c, c.State.To, &bankpb.Release{TransferId: id, Amount: c.State.Amount, Source: c.State.From}, id+":release", afterRelease)
}

// Backoff of a saga's retries: retryBase doubled per retry, up to retryMax.
const (
	retryBase = 50 * time.Millisecond
	retryMax  = 5 * time.Second
)

// retryLater re-drives the saga after a backoff, through a timer: a step
// whose Request gave up (its retries, HostConfig.Retry, all failed for a
// retryable reason: the account's node is down, overloaded or moving) is
// not resent at once. The count of retries is durable, so the backoff
// grows across activations; a timer does not outlive its activation, and
// a saga that activates again re-drives its step at once (OnActivate).
func retryLater(c *transferCtx, err error) {
	n := c.State.Retries
	c.State.Retries++
	d := retryMax
	if n < 7 {
		d = min(retryBase<<n, retryMax)
	}
	if terr := c.After(d, "retry", &bankpb.RetryStep{}); terr != nil {
		// The kind handles RetryStep and a saga sets one timer: a bug.
		panic(fmt.Sprintf("ledger: transfer %s: %v (after %v)", c.Ref().ID, terr, err))
	}
}

// refundSuffix ends the ID under which a refund is credited to the source.
const refundSuffix = ":refund"

// Settle tells the accounts of a finished transfer to forget it again: an
// account that still holds the transfer asks (see SettleHeld). A transfer
// still running goes on; this message activated it if it was not active,
// and activation re-drives its step.
//
// A transfer still DEBITING asks its source whether it has debited the
// transfer, and answers once it knows: a destination that holds the
// credit from an earlier activation cannot show its balance until it
// learns whether the credit was released (see settling), and without a
// debit it was not. A release follows a durable debit, and the source
// keeps the debit until the transfer's outcome is durable (its Forget
// leaves after that), so a source without the debit while the saga is
// still DEBITING never debited it. Both are read here, in the shard that
// owns them both, and the answer leaves only once durable, so from the
// shard's current owner. Without that answer accounts could wait on each
// other for good: the destination's credit is settled by a saga whose
// debit waits at a source that settles credits of its own.
func (transfers) Settle(c *transferCtx, _ *bankpb.Settle) (*bankpb.TransferState, error) {
	if c.State.Status == unspecified {
		// An account that holds a credit for a saga whose start was lost
		// drops it on this answer (settleHeld).
		return nil, actors.HandlerError(CodeUnknownTransfer, "transfer %s was never submitted", c.Ref().ID)
	}
	if c.State.Status == debiting {
		// Each Settle waits for a read of its own, made after it came: an
		// answer read before an account's activation asked would say
		// nothing of the releases sent to that account's earlier ones.
		id, key := transferID(c), "settle/"+c.RequestID()
		c.Defer(key)
		toAccount.HasDebit(c, c.State.From, &bankpb.HasDebit{TransferId: id}, key+":has-debit",
			func(c *transferCtx, d *bankpb.DebitState, err error) {
				st := state(c.State)
				st.Undebited = err == nil && d.Amount == 0 && c.State.Status == debiting
				c.Resolve(key, st, nil)
			})
		return nil, nil
	}
	if c.State.Status == completed || c.State.Status == compensated {
		forget(c)
	}
	if c.State.Status == rejected {
		cancelHold(c)
	}
	if Terminal(c.State.Status) {
		c.Passivate()
	}
	return state(c.State), nil
}

// RetryStep re-drives the saga from its durable status (see retryLater).
func (transfers) RetryStep(c *transferCtx, _ *bankpb.RetryStep) (*bankpb.TransferState, error) {
	if !Terminal(c.State.Status) && c.State.Status != unspecified {
		step(c)
	}
	return state(c.State), nil
}

// afterRelease completes the transfer. A release is never refused for
// good (the hold proved the destination open, and the amount valid): an
// error is retried like a retryable one, from the debit, whose repeat
// changes nothing.
func afterRelease(c *transferCtx, _ *bankpb.Balance, err error) {
	if c.State.Status != debiting {
		return
	}
	if err != nil {
		retryLater(c, err)
		return
	}
	finish(c, completed, "")
}

func afterRefund(c *transferCtx, _ *bankpb.Balance, err error) {
	if c.State.Status != compensating {
		return
	}
	if err != nil {
		retryLater(c, err) // a refund to an open account cannot fail for good
		return
	}
	finish(c, compensated, c.State.Error)
}

// finish records the outcome, answers every waiting Submit, tells the
// accounts to forget the transfer (sent once the outcome is durable, so no
// step of it is resent after), and lets the saga go: it passivates once
// the outcome is durable and the forgets have left (Context.Passivate),
// instead of staying in memory for the host's IdleTimeout. A late
// resubmission or Settle activates it again from its record.
//
// A completed or compensated transfer is answered at once (ResolveNow):
// its debit and hold (or refund) are durable, its release is durable or,
// lost with the destination's memory, left as a hold that a repeat
// releases, and until the outcome's write is durable the accounts still
// remember the transfer, so a saga restarted from DEBITING or COMPENSATING
// replays its idempotent steps to the same outcome. That keeps the
// critical path at one durable write at each account, made at the same
// time, and the release's round trip. A rejection waits for its write:
// replayed, the debit could succeed.
func finish(c *transferCtx, status bankpb.TransferStatus, code string) {
	c.State.Status, c.State.Error = status, code
	c.Passivate()
	if status == rejected {
		c.Resolve(outcome, state(c.State), nil)
		cancelHold(c) // the debit was refused: only the destination may hold the transfer
		return
	}
	c.ResolveNow(outcome, state(c.State), nil)
	forget(c)
}

// forget tells both accounts the transfer is over, each once and
// unacknowledged (actors.AtMostOnce): a Forget lost on the way (its
// account's node down, its shard moving) leaves the transfer with the
// account until the account's settle reminder asks this saga, which then
// sends it again (Settle). That repair is what lets a Forget cost no
// reply: no message back across the network, no run of the saga.
//
// The destination's Forget of a completed transfer carries the amount: a
// destination that lost the release with its memory still holds the
// credit, and releases it then.
func forget(c *transferCtx) {
	id := transferID(c)
	forgetOne(c, c.State.From, &bankpb.Forget{TransferId: id}, id+":forget-from")
	to := &bankpb.Forget{TransferId: id}
	if c.State.Status == completed {
		to.Amount, to.Source = c.State.Amount, c.State.From
	}
	forgetOne(c, c.State.To, to, id+":forget-to")
	if c.State.Status == compensated {
		forgetOne(c, c.State.From, &bankpb.Forget{TransferId: id + refundSuffix}, id+":forget-refund")
	}
}

func forgetOne(c *transferCtx, account string, m *bankpb.Forget, requestID string) {
	c.Send(AccountRef(account), m, requestID, actors.AtMostOnce())
}

// cancelHold tells the destination of a rejected transfer to drop the
// credit it may hold, once and unacknowledged like a Forget, and repaired
// the same way: the destination's settle reminder asks again (Settle).
func cancelHold(c *transferCtx) {
	id := transferID(c)
	c.Send(AccountRef(c.State.To), &bankpb.Cancel{TransferId: id}, id+":cancel", actors.AtMostOnce())
}
