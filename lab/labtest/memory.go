// Package labtest has an in-memory lab.Approach that can misbehave, for
// tests of the lab's runner and checks.
package labtest

import (
	"context"
	"fmt"
	"sync"

	"github.com/ordo-actors/ordo/lab"
)

// Fault selects how Memory misbehaves on every Every-th transfer.
type Fault int

// The faults.
const (
	// None: every transfer is applied exactly once, atomically.
	None Fault = iota
	// LoseCredit debits the source but never credits the destination, and
	// acknowledges the transfer (an update lost after the fact).
	LoseCredit
	// ApplyTwice applies the transfer twice and acknowledges it once.
	ApplyTwice
	// AckNotApplied acknowledges a transfer it never applied.
	AckNotApplied
)

// Config configures Memory.
type Config struct {
	// Fault is the misbehaviour; None for a correct approach.
	Fault Fault
	// Every applies the fault to every Every-th transfer; 0 means 10.
	Every int
}

// Memory is an in-memory approach behind one mutex. Safe for concurrent
// use.
type Memory struct {
	cfg Config
	mu  sync.Mutex
	bal []int64
	n   int
}

var _ lab.Approach = (*Memory)(nil)

// NewMemory returns a Memory with cfg.
func NewMemory(cfg Config) *Memory {
	if cfg.Every == 0 {
		cfg.Every = 10
	}
	return &Memory{cfg: cfg}
}

// Name implements lab.Approach.
func (m *Memory) Name() string { return fmt.Sprintf("memory-fault%d", m.cfg.Fault) }

// Setup implements lab.Approach.
func (m *Memory) Setup(_ context.Context, accounts int, initial int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.bal = make([]int64, accounts)
	for i := range m.bal {
		m.bal[i] = initial
	}
	m.n = 0
	return nil
}

// Transfer implements lab.Approach. It honours lab.Stall outside its mutex.
func (m *Memory) Transfer(ctx context.Context, from, to int, amount int64) error {
	lab.Stall(ctx)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.bal[from] < amount {
		return lab.ErrInsufficientFunds
	}
	m.n++
	fault := m.cfg.Fault
	if m.n%m.cfg.Every != 0 {
		fault = None
	}
	switch fault {
	case LoseCredit:
		m.bal[from] -= amount
	case ApplyTwice:
		if m.bal[from] >= 2*amount {
			m.bal[from] -= 2 * amount
			m.bal[to] += 2 * amount
		} else {
			m.bal[from] -= amount
			m.bal[to] += amount
		}
	case AckNotApplied:
	default:
		m.bal[from] -= amount
		m.bal[to] += amount
	}
	return nil
}

// Balances implements lab.Approach.
func (m *Memory) Balances(context.Context) ([]int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]int64(nil), m.bal...), nil
}

// Close implements lab.Approach.
func (m *Memory) Close() error { return nil }
