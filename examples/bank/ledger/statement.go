package ledger

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/persistence"
	"github.com/ordo-actors/ordo/proto/bankpb"
)

// Statement line types.
const (
	LineOpened     = "opened"
	LineDeposit    = "deposit"
	LineWithdrawal = "withdrawal"
	LineDebit      = "debit"
	LineCredit     = "credit"
	LineRefund     = "refund"
)

// Line is one line of an account's statement: a money event of the
// account and the balance after it.
type Line struct {
	// Seq is the event's position in the account's journal.
	Seq uint64 `json:"seq"`
	// Type is one of the Line* constants.
	Type string `json:"type"`
	// TransferID is the transfer of a debit, credit or refund.
	TransferID string `json:"transfer_id,omitempty"`
	// Amount is what the event did to the balance: negative for debits
	// and withdrawals (an opening's is the initial balance).
	Amount int64 `json:"amount"`
	// Balance is the balance after the event.
	Balance int64 `json:"balance"`
}

// Statements is a read model: the statement of every account a
// projection of the account journal (actors.Follow, with Apply as its
// handler) has reached. A projection delivers each event at least once and
// each account's events in Seq order, so Apply skips an account's events
// it has applied already; an event that skips ahead (a gap in an account's
// journal, or a projection started after events were deleted) is an
// error. Safe for concurrent use.
type Statements struct {
	mu    sync.Mutex
	accts map[string]*statement
}

type statement struct {
	last    uint64
	balance int64
	lines   []Line
}

// NewStatements returns an empty read model.
func NewStatements() *Statements { return &Statements{accts: make(map[string]*statement)} }

// Apply is the projection's handler: it adds each money event to its
// account's statement.
func (s *Statements) Apply(_ context.Context, evs []actors.JournalEvent) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ev := range evs {
		if ev.Ref.Kind != Account.Name() {
			return fmt.Errorf("ledger: statements: an event of %s", ev.Ref)
		}
		st := s.accts[ev.Ref.ID]
		if st == nil {
			st = &statement{}
			s.accts[ev.Ref.ID] = st
		}
		switch {
		case ev.Seq <= st.last:
			continue // delivered again
		case ev.Seq != st.last+1:
			return fmt.Errorf("ledger: statements: event %d of %s follows event %d", ev.Seq, ev.Ref, st.last)
		}
		st.last = ev.Seq
		line := Line{Seq: ev.Seq}
		switch m := ev.Event.(type) {
		case *bankpb.Opened:
			line.Type, line.Amount = LineOpened, m.Initial
			st.balance = 0 // the opening sets the balance
		case *bankpb.Deposited:
			line.Type, line.Amount = LineDeposit, m.Amount
		case *bankpb.Withdrawn:
			line.Type, line.Amount = LineWithdrawal, -m.Amount
		case *bankpb.Debited:
			line.Type, line.TransferID, line.Amount = LineDebit, m.TransferId, -m.Amount
		case *bankpb.Credited:
			line.Type, line.TransferID, line.Amount = LineCredit, m.TransferId, m.Amount
		case *bankpb.Refunded:
			line.Type, line.TransferID, line.Amount = LineRefund, m.TransferId, m.Amount
		case *bankpb.Forgotten, *bankpb.CreditHeld, *bankpb.HoldCancelled:
			continue // moves no money
		default:
			return fmt.Errorf("ledger: statements: event %d of %s: unexpected %T", ev.Seq, ev.Ref, ev.Event)
		}
		st.balance += line.Amount
		line.Balance = st.balance
		st.lines = append(st.lines, line)
	}
	return nil
}

// Statement returns the lines of account id, oldest first (nil when the
// projection has seen no money event of it).
func (s *Statements) Statement(id string) []Line {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.accts[id]; st != nil {
		return slices.Clone(st.lines)
	}
	return nil
}

// Accounts returns the accounts the projection has seen, sorted.
func (s *Statements) Accounts() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.accts))
}

// StatementsProjection is the name of the statements projection, under
// which its position is stored.
const StatementsProjection = "ledger.statements"

// BuildStatements follows the account journal of j until it has caught up
// and returns the statements: of every account, or only of account id
// when id is not empty (a projection of that account's journal alone).
// offsets keeps the projection's position (nil: start from the journal's
// start, as a new read model must); s receives the events (nil: a new
// read model). With the etcd store, which reads a kind's whole journal for
// each page of ReadJournal, build many accounts' statements one account at
// a time (as workload.Statements does).
func BuildStatements(ctx context.Context, j persistence.Journal, id string, s *Statements, offsets actors.OffsetStore) (*Statements, error) {
	if s == nil {
		s = NewStatements()
	}
	if offsets == nil {
		offsets = &actors.MemoryOffsets{}
	}
	cfg := actors.DefaultFollowConfig()
	cfg.Name = StatementsProjection
	if id != "" {
		cfg.Name += "/" + id
	}
	cfg.ID = id
	cfg.Page = 1000
	cfg.UntilCaughtUp = true
	if err := actors.Follow(ctx, j, Account, offsets, cfg, s.Apply); err != nil {
		return nil, err
	}
	return s, nil
}
