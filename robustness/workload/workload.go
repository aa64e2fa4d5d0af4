package workload

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/examples/bank/ledger"
	"github.com/ordo-actors/ordo/proto/bankpb"
	"github.com/ordo-actors/ordo/robustness/history"
)

// Config describes one run. Start from DefaultConfig.
type Config struct {
	// Accounts is the number of accounts, acct-000000 … (at least 2).
	Accounts int
	// Duration bounds the time during which new operations start; the
	// operations in flight at the end finish (bounded by OpTimeout).
	Duration time.Duration
	// Concurrency is the number of clients issuing operations back to back.
	Concurrency int
	// Zipf is the exponent of the Zipf distribution of account choice
	// (acct-000000 hottest); 0 means uniform.
	Zipf float64
	// MaxAmount bounds a transfer's amount, drawn uniformly in 1..MaxAmount.
	MaxAmount int64
	// ReadRatio is the fraction of operations that are balance reads.
	ReadRatio float64
	// Seed seeds every random choice; 0 is allowed.
	Seed uint64
	// Nonce makes transfer IDs unique across runs with the same seed.
	// Default: derived from the start time.
	Nonce string
	// OpTimeout bounds one operation; an operation that exceeds it is
	// recorded as unknown, with ret the time the client gave up.
	OpTimeout time.Duration
}

// DefaultConfig returns the demo's workload: 1,000 accounts, 32 clients,
// 20 seconds, Zipf 1.0, amounts up to 100, no reads.
func DefaultConfig() Config {
	return Config{Accounts: 1000, Duration: 20 * time.Second, Concurrency: 32, Zipf: 1.0, MaxAmount: 100,
		Seed: 1, OpTimeout: 5 * time.Second}
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	switch {
	case c.Accounts < 2 || c.Accounts > history.MaxAccounts:
		return fmt.Errorf("workload: accounts %d: want 2..%d", c.Accounts, history.MaxAccounts)
	case c.Duration <= 0:
		return fmt.Errorf("workload: duration %v is not positive", c.Duration)
	case c.Concurrency < 1:
		return fmt.Errorf("workload: concurrency %d: want at least 1", c.Concurrency)
	case c.Zipf < 0 || math.IsNaN(c.Zipf) || math.IsInf(c.Zipf, 0):
		return fmt.Errorf("workload: zipf exponent %v: want a finite number >= 0", c.Zipf)
	case c.MaxAmount < 1:
		return fmt.Errorf("workload: max amount %d: want at least 1", c.MaxAmount)
	case !(c.ReadRatio >= 0 && c.ReadRatio <= 1):
		return fmt.Errorf("workload: read ratio %v: want 0..1", c.ReadRatio)
	case c.OpTimeout <= 0:
		return fmt.Errorf("workload: op timeout %v is not positive", c.OpTimeout)
	case strings.ContainsAny(c.Nonce, "/ \t\n"):
		return fmt.Errorf("workload: nonce %q contains a slash or white space", c.Nonce)
	}
	return nil
}

// Stats summarises a run.
type Stats struct {
	// Transfers counts transfers by recorded outcome.
	Transfers map[history.Outcome]int `json:"transfers"`
	// Reads counts balance reads by recorded outcome.
	Reads map[history.Outcome]int `json:"reads"`
	// Elapsed is the run's wall time, from the first call to the last
	// return, in nanoseconds in JSON.
	Elapsed time.Duration `json:"elapsed_ns"`
	// Throughput is definite transfers (ok or rejected) per second.
	Throughput float64 `json:"throughput"`
	// P50 and P99 are latencies of definite transfers, in nanoseconds in
	// JSON.
	P50 time.Duration `json:"p50_ns"`
	P99 time.Duration `json:"p99_ns"`
}

// Record receives each operation once it has returned. It is called from
// many goroutines at once; an error stops the run.
type Record func(history.Op) error

// Progress, when not nil, is told about each finished operation.
type Progress func(op history.Op)

// Picker draws accounts uniformly or from a Zipf distribution of any
// positive exponent (math/rand/v2's Zipf needs s > 1). It is read-only after
// NewPicker and safe for concurrent use with one rand.Rand per goroutine.
type Picker struct {
	n   int
	cdf []float64 // nil for uniform
}

// NewPicker returns a picker over n accounts with Zipf exponent s (0 for
// uniform).
func NewPicker(n int, s float64) *Picker {
	p := &Picker{n: n}
	if s == 0 {
		return p
	}
	p.cdf = make([]float64, n)
	var sum float64
	for k := range n {
		sum += 1 / math.Pow(float64(k+1), s)
		p.cdf[k] = sum
	}
	for k := range p.cdf {
		p.cdf[k] /= sum
	}
	return p
}

// Next draws one account index.
func (p *Picker) Next(rng *rand.Rand) int {
	if p.cdf == nil {
		return rng.IntN(p.n)
	}
	return min(sort.SearchFloat64s(p.cdf, rng.Float64()), p.n-1)
}

// Pair draws two distinct account indexes.
func (p *Picker) Pair(rng *rand.Rand) (from, to int) {
	from = p.Next(rng)
	to = p.Next(rng)
	for to == from {
		to = p.Next(rng)
	}
	return from, to
}

// Run drives inv with cfg until cfg.Duration has passed or ctx ends, and
// records every operation. Operations interrupted by ctx are recorded as
// unknown. It returns the run's stats and the first error of record.
func Run(ctx context.Context, inv actors.Invoker, cfg Config, record Record, progress Progress) (Stats, error) {
	if err := cfg.Validate(); err != nil {
		return Stats{}, err
	}
	if cfg.Nonce == "" {
		cfg.Nonce = fmt.Sprintf("%x", time.Now().UnixNano())
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	pick := NewPicker(cfg.Accounts, cfg.Zipf)
	start := time.Now()
	deadline := start.Add(cfg.Duration)
	clients := make([]client, cfg.Concurrency)
	var wg sync.WaitGroup
	var failed atomic.Bool
	for i := range clients {
		c := &clients[i]
		c.id = i
		c.rng = rand.New(rand.NewPCG(cfg.Seed, uint64(i)+1))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil && time.Now().Before(deadline) {
				op := c.next(ctx, inv, cfg, pick)
				if err := record(op); err != nil {
					if failed.CompareAndSwap(false, true) {
						cancel(fmt.Errorf("workload: record: %w", err))
					}
					return
				}
				if progress != nil {
					progress(op)
				}
			}
		}()
	}
	wg.Wait()
	st := Stats{Transfers: map[history.Outcome]int{}, Reads: map[history.Outcome]int{}, Elapsed: time.Since(start)}
	var lat []time.Duration
	for _, c := range clients {
		for k, v := range c.transfers {
			st.Transfers[k] += v
		}
		for k, v := range c.reads {
			st.Reads[k] += v
		}
		lat = append(lat, c.lat...)
	}
	slices.Sort(lat)
	st.P50, st.P99 = Percentile(lat, 0.50), Percentile(lat, 0.99)
	if st.Elapsed > 0 {
		st.Throughput = float64(st.Transfers[history.OK]+st.Transfers[history.Rejected]) / st.Elapsed.Seconds()
	}
	if failed.Load() {
		return st, context.Cause(ctx)
	}
	return st, nil
}

// Percentile returns the q-quantile of sorted durations (0 when empty).
func Percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

type client struct {
	id        int
	rng       *rand.Rand
	n         int
	transfers map[history.Outcome]int
	reads     map[history.Outcome]int
	lat       []time.Duration
}

func (c *client) next(ctx context.Context, inv actors.Invoker, cfg Config, pick *Picker) history.Op {
	if c.transfers == nil {
		c.transfers, c.reads = map[history.Outcome]int{}, map[history.Outcome]int{}
	}
	if cfg.ReadRatio > 0 && c.rng.Float64() < cfg.ReadRatio {
		op := Read(ctx, inv, history.AccountName(pick.Next(c.rng)), cfg.OpTimeout)
		op.Client = c.id
		c.reads[op.Outcome]++
		return op
	}
	from, to := pick.Pair(c.rng)
	amount := 1 + c.rng.Int64N(cfg.MaxAmount)
	id := fmt.Sprintf("t-%s-%d-%d-%d", cfg.Nonce, cfg.Seed, c.id, c.n)
	c.n++
	op := Transfer(ctx, inv, id, history.AccountName(from), history.AccountName(to), amount, cfg.OpTimeout)
	op.Client = c.id
	c.transfers[op.Outcome]++
	if op.Outcome != history.Unknown {
		c.lat = append(c.lat, time.Duration(op.Ret-op.Call))
	}
	return op
}

// Transfer submits one transfer, whose ID id is new (ledger.SubmitNew),
// and waits for its final state, bounded by timeout, and returns the
// history op (Client left 0).
func Transfer(ctx context.Context, inv actors.Invoker, id, from, to string, amount int64, timeout time.Duration) history.Op {
	op := history.Op{Op: history.OpTransfer, ID: id, From: from, To: to, Amount: amount}
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	op.Call = time.Now().UnixNano()
	st, err := ledger.SubmitNew(tctx, inv, id, from, to, amount)
	op.Ret = time.Now().UnixNano()
	op.Outcome, op.Error = TransferOutcome(st, err)
	return op
}

// TransferOutcome maps what SubmitAndWait returned to a history outcome
// and error text. A rejection's text names its reason in the words the
// checker looks for (history.InsufficientFunds, history.UnknownAccount).
func TransferOutcome(st *bankpb.TransferState, err error) (history.Outcome, string) {
	if err != nil {
		if code, ok := HandlerCode(err); ok {
			// The submit itself was refused: nothing was started.
			return history.Rejected, Reason(code) + ": " + err.Error()
		}
		return history.Unknown, err.Error()
	}
	switch st.Status {
	case bankpb.TransferStatus_TRANSFER_STATUS_COMPLETED:
		return history.OK, ""
	case bankpb.TransferStatus_TRANSFER_STATUS_REJECTED:
		return history.Rejected, Reason(st.Error)
	case bankpb.TransferStatus_TRANSFER_STATUS_COMPENSATED:
		// Debited, then refunded: no net effect on any balance.
		return history.Rejected, "compensated: " + Reason(st.Error)
	}
	return history.Unknown, "transfer still " + StatusName(st.Status)
}

// HandlerCode returns the ledger handler code of err, if err is a handler
// rejection.
func HandlerCode(err error) (string, bool) {
	var ae *actors.Error
	if errors.As(err, &ae) && errors.Is(err, actors.ErrHandler) {
		return ae.HandlerCode, true
	}
	return "", false
}

// Reason turns a ledger handler code into the error text of a history line.
func Reason(code string) string {
	switch code {
	case ledger.CodeInsufficientFunds:
		return history.InsufficientFunds
	case ledger.CodeUnknownAccount:
		return history.UnknownAccount
	case "":
		return "rejected"
	}
	return strings.ReplaceAll(code, "_", " ")
}

// StatusName returns a transfer status in lower case without its prefix:
// "completed", "rejected", …
func StatusName(s bankpb.TransferStatus) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "TRANSFER_STATUS_"))
}

// Read reads one balance, bounded by timeout, and returns the history op
// (Client left 0). Any failure is recorded as unknown: a read has no
// rejected outcome.
func Read(ctx context.Context, inv actors.Invoker, account string, timeout time.Duration) history.Op {
	op := history.Op{Op: history.OpBalance, Account: account}
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	op.Call = time.Now().UnixNano()
	b, err := bankpb.NewAccountServiceClient(inv).GetBalance(tctx, account, &bankpb.GetBalance{})
	op.Ret = time.Now().UnixNano()
	if err != nil {
		op.Outcome, op.Error = history.Unknown, err.Error()
		return op
	}
	op.Outcome, op.Balance = history.OK, b.Amount
	return op
}
