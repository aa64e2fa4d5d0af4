package lab

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/ordo-actors/ordo/robustness/workload"
)

// Workload describes one run. The zero value is not valid; start from
// DefaultWorkload.
type Workload struct {
	// Accounts is the number of accounts (at least 2).
	Accounts int
	// InitialBalance is every account's balance after Setup.
	InitialBalance int64
	// Duration bounds the time during which new transfers start; transfers
	// in flight at the end are finished (bounded by OpTimeout).
	Duration time.Duration
	// Concurrency is the number of clients issuing transfers back to back.
	Concurrency int
	// Zipf is the exponent of the Zipf distribution of the accounts a
	// transfer touches (account 0 hottest); 0 means uniform.
	Zipf float64
	// MaxAmount bounds a transfer's amount, drawn uniformly from
	// 1..MaxAmount.
	MaxAmount int64
	// Seed seeds every random choice of the run.
	Seed uint64
	// StallProbability is the probability that a transfer carries a
	// simulated pause (see WithPause); 0 disables pauses.
	StallProbability float64
	// StallDuration is the length of a simulated pause; to matter it should
	// exceed the approach's lock TTL.
	StallDuration time.Duration
	// OpTimeout bounds one transfer, pauses excluded; 0 means 10s.
	OpTimeout time.Duration
	// IdleSample is how long Run watches the machine's CPU after Setup,
	// with no transfer running, before the measured window, to report how
	// busy the rest of the machine keeps it (Result.IdleBusy); 0 skips it.
	IdleSample time.Duration
}

// DefaultWorkload returns a small contended workload with no pauses.
func DefaultWorkload() Workload {
	return Workload{
		Accounts:         64,
		InitialBalance:   1000,
		Duration:         5 * time.Second,
		Concurrency:      8,
		MaxAmount:        100,
		Seed:             1,
		StallDuration:    3 * time.Second,
		StallProbability: 0,
		OpTimeout:        10 * time.Second,
	}
}

// Validate reports the first invalid field.
func (w Workload) Validate() error {
	switch {
	case w.Accounts < 2:
		return fmt.Errorf("lab: workload needs at least 2 accounts, have %d", w.Accounts)
	case w.InitialBalance < 0:
		return fmt.Errorf("lab: negative initial balance %d", w.InitialBalance)
	case w.Duration <= 0:
		return fmt.Errorf("lab: duration must be positive, have %v", w.Duration)
	case w.Concurrency < 1:
		return fmt.Errorf("lab: concurrency must be at least 1, have %d", w.Concurrency)
	case w.Zipf < 0 || math.IsNaN(w.Zipf) || math.IsInf(w.Zipf, 0):
		return fmt.Errorf("lab: zipf exponent must be 0 (uniform) or positive, have %v", w.Zipf)
	case w.MaxAmount < 1:
		return fmt.Errorf("lab: max amount must be at least 1, have %d", w.MaxAmount)
	case w.StallProbability < 0 || w.StallProbability > 1 || math.IsNaN(w.StallProbability):
		return fmt.Errorf("lab: stall probability must be in [0,1], have %v", w.StallProbability)
	case w.StallProbability > 0 && w.StallDuration <= 0:
		return fmt.Errorf("lab: stall duration must be positive when stalls are on, have %v", w.StallDuration)
	case w.OpTimeout < 0:
		return fmt.Errorf("lab: negative op timeout %v", w.OpTimeout)
	case w.IdleSample < 0:
		return fmt.Errorf("lab: negative idle sample %v", w.IdleSample)
	}
	return nil
}

// Result is what one run of one approach measured and what its checks found.
type Result struct {
	Name     string
	Workload Workload
	// Round is the round the run belongs to (1 and up; see Report.Rounds).
	Round int `json:",omitempty"`

	OK       int64 // transfers acknowledged
	Rejected int64 // transfers rejected for insufficient funds
	Aborted  int64 // transfers failed with no effect (ErrAborted)
	Unknown  int64 // transfers failed with an unknown outcome
	Stalls   int64 // transfers that carried a simulated pause
	// FirstError is the first aborted or unknown error, for the report.
	FirstError string

	Elapsed    time.Duration // from the first transfer to the last return
	Throughput float64       // acknowledged transfers per second
	P50, P99   time.Duration // latency of acknowledged and rejected transfers

	// CPUSeconds is the machine's busy CPU time during Elapsed, all
	// processes together (the servers of the approach and anything else
	// running), from /proc/stat. CPUPer1000 is CPUSeconds per 1,000
	// acknowledged transfers (0 when none was). CPUError says why they were
	// not measured ("" when they were); reports then show "n/a".
	CPUSeconds float64
	CPUPer1000 float64
	CPUError   string
	// ProcessCPUSeconds is the part of the CPU time during Elapsed that
	// this process used (getrusage): the lab's clients, and everything an
	// approach runs in-process (ordo's nodes with their stores' clients, an
	// embedded etcd). CPUSeconds less it is the rest of the machine: the
	// approach's servers (PostgreSQL, Redis, etcd, ZooKeeper) and anything
	// else running. ProcessCPUPer1000 is it per 1,000 acknowledged
	// transfers. ProcessCPUError says why it was not measured.
	ProcessCPUSeconds float64 `json:",omitempty"`
	ProcessCPUPer1000 float64 `json:",omitempty"`
	ProcessCPUError   string  `json:",omitempty"`
	// CheckpointError says why no checkpoint was written before the run of
	// an approach that keeps its data in PostgreSQL (WALReader); the run
	// went on without.
	CheckpointError string `json:",omitempty"`
	// IdleBusy is the share (0..1) of the machine's CPU that was busy
	// during Workload.IdleSample before the measured window, the approach
	// set up and idle: other processes, and the approach's servers at rest.
	// High, it warns that CPUSeconds counts them too. Valid only when
	// IdleSample > 0 and CPUError is "".
	IdleBusy float64

	// WALBytes is the PostgreSQL write-ahead log the server wrote during
	// Elapsed (every client of the server counts), for approaches that keep
	// their data there (WALReader); WALPerTransfer is WALBytes per
	// acknowledged transfer (0 when none was). WALError says why they were
	// not measured for such an approach ("" when they were, or when the
	// approach is not one).
	WALBytes       int64   `json:",omitempty"`
	WALPerTransfer float64 `json:",omitempty"`
	WALError       string  `json:",omitempty"`

	// Work is what the approach counted of its own work during Elapsed
	// (WorkCounter): each count's growth, and its growth per acknowledged
	// transfer. WorkError says why it was not measured.
	Work      []Count `json:",omitempty"`
	WorkError string  `json:",omitempty"`

	// ExpectedTotal is Accounts × InitialBalance; Total the final sum.
	ExpectedTotal, Total int64
	// AccountsOff counts accounts whose final balance differs from
	// initial + acknowledged credits − acknowledged debits.
	AccountsOff int
	// Missing sums, over accounts, how much less they hold than the
	// acknowledged transfers imply; Extra how much more.
	Missing, Extra int64
	// Negative counts accounts with a negative final balance.
	Negative int
}

// Conserved reports whether the final balances sum to the initial total.
func (r Result) Conserved() bool { return r.Total == r.ExpectedTotal }

// ExactlyOnce reports whether every balance matches the acknowledged
// transfers. With unknown outcomes a mismatch may be explained by them.
func (r Result) ExactlyOnce() bool { return r.AccountsOff == 0 }

// MoneyDelta is Total − ExpectedTotal: negative when money was lost,
// positive when it was created.
func (r Result) MoneyDelta() int64 { return r.Total - r.ExpectedTotal }

// Passed reports whether the run completed transfers and every check held.
func (r Result) Passed() bool {
	return r.OK > 0 && r.Conserved() && r.ExactlyOnce() && r.Negative == 0
}

// worker is one client's private record, merged after the run.
type worker struct {
	credits, debits []int64
	lat             []time.Duration
	ok, rejected    int64
	aborted         int64
	unknown, stalls int64
	firstErr        error
}

// Run sets the approach up, drives it with the workload and checks the
// final balances. An error means the run could not be made or checked
// (setup or the final read failed); failed transfers are counted in the
// Result, not returned.
func Run(ctx context.Context, a Approach, w Workload) (Result, error) {
	res := Result{Name: a.Name(), Workload: w}
	if err := w.Validate(); err != nil {
		return res, err
	}
	if w.OpTimeout == 0 {
		w.OpTimeout = 10 * time.Second
		res.Workload.OpTimeout = w.OpTimeout
	}
	if err := a.Setup(ctx, w.Accounts, w.InitialBalance); err != nil {
		return res, fmt.Errorf("lab: %s: setup: %w", a.Name(), err)
	}
	pick := workload.NewPicker(w.Accounts, w.Zipf)
	if err := checkpoint(ctx, a); err != nil {
		res.CheckpointError = err.Error()
	}
	if w.IdleSample > 0 {
		idle, err := sampleCPU(ctx, w.IdleSample)
		if err != nil {
			return res, fmt.Errorf("lab: %s: %w", a.Name(), err)
		}
		res.IdleBusy = idle.BusyShare()
	}
	workers := make([]*worker, w.Concurrency)
	wal0, walOK, walErr := walPosition(ctx, a)
	work0 := workCounts(a)
	cpu0, cpuErr := ReadMachineCPU()
	own0, ownErr := ReadProcessCPU()
	start := time.Now()
	deadline := start.Add(w.Duration)
	var wg sync.WaitGroup
	for i := range workers {
		wk := &worker{credits: make([]int64, w.Accounts), debits: make([]int64, w.Accounts)}
		workers[i] = wk
		rng := rand.New(rand.NewPCG(w.Seed, uint64(i)+1))
		wg.Add(1)
		go func() {
			defer wg.Done()
			wk.loop(ctx, a, w, pick, rng, deadline)
		}()
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	work1 := workCounts(a)
	cpu1, err := ReadMachineCPU()
	if cpuErr == nil {
		cpuErr = err
	}
	own1, err := ReadProcessCPU()
	if ownErr == nil {
		ownErr = err
	}
	if walOK && walErr == nil {
		var wal1 uint64
		if wal1, _, walErr = walPosition(ctx, a); walErr == nil && wal1 < wal0 {
			walErr = fmt.Errorf("WAL position went back from %d to %d", wal0, wal1)
		}
		if walErr == nil {
			res.WALBytes = int64(wal1 - wal0)
		}
	}
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("lab: %s: run interrupted: %w", a.Name(), err)
	}

	credits := make([]int64, w.Accounts)
	debits := make([]int64, w.Accounts)
	var lat []time.Duration
	for _, wk := range workers {
		res.OK += wk.ok
		res.Rejected += wk.rejected
		res.Aborted += wk.aborted
		res.Unknown += wk.unknown
		res.Stalls += wk.stalls
		if wk.firstErr != nil && res.FirstError == "" {
			res.FirstError = wk.firstErr.Error()
		}
		for i := range credits {
			credits[i] += wk.credits[i]
			debits[i] += wk.debits[i]
		}
		lat = append(lat, wk.lat...)
	}
	if res.Elapsed > 0 {
		res.Throughput = float64(res.OK) / res.Elapsed.Seconds()
	}
	res.P50, res.P99 = percentile(lat, 0.50), percentile(lat, 0.99)
	if cpuErr != nil {
		res.CPUError = cpuErr.Error()
	} else {
		res.CPUSeconds = cpu1.Sub(cpu0).Busy.Seconds()
		if res.OK > 0 {
			res.CPUPer1000 = res.CPUSeconds * 1000 / float64(res.OK)
		}
	}

	if ownErr != nil {
		res.ProcessCPUError = ownErr.Error()
	} else {
		res.ProcessCPUSeconds = (own1 - own0).Seconds()
		if res.OK > 0 {
			res.ProcessCPUPer1000 = res.ProcessCPUSeconds * 1000 / float64(res.OK)
		}
	}

	switch {
	case walErr != nil:
		res.WALError = walErr.Error()
	case walOK && res.OK > 0:
		res.WALPerTransfer = float64(res.WALBytes) / float64(res.OK)
	}

	res.Work, err = workGrowth(work0, work1, res.OK)
	if err != nil {
		res.WorkError = err.Error()
	}

	rctx, cancel := context.WithTimeout(ctx, w.OpTimeout)
	defer cancel()
	bal, err := a.Balances(rctx)
	if err != nil {
		return res, fmt.Errorf("lab: %s: reading final balances: %w", a.Name(), err)
	}
	if err := res.check(bal, credits, debits); err != nil {
		return res, fmt.Errorf("lab: %s: %w", a.Name(), err)
	}
	return res, nil
}

// workCounts returns a's counts when it is a WorkCounter, else nil.
func workCounts(a Approach) []Count {
	if wc, ok := a.(WorkCounter); ok {
		return wc.WorkCounts()
	}
	return nil
}

// workGrowth returns each count's growth from before to after, and its
// growth per transfer of ok.
func workGrowth(before, after []Count, ok int64) ([]Count, error) {
	if len(before) != len(after) {
		return nil, fmt.Errorf("the approach counted %d kinds of work before the run and %d after", len(before), len(after))
	}
	var out []Count
	for i, b := range before {
		a := after[i]
		switch {
		case a.Name != b.Name:
			return nil, fmt.Errorf("the approach's count %d was %q before the run and %q after", i, b.Name, a.Name)
		case a.N < b.N:
			return nil, fmt.Errorf("the approach's count of %s went back from %d to %d", a.Name, b.N, a.N)
		}
		c := Count{Name: a.Name, N: a.N - b.N}
		if ok > 0 {
			c.PerTransfer = float64(c.N) / float64(ok)
		}
		out = append(out, c)
	}
	return out, nil
}

// checkpoint has a checkpoint written when a is a WALReader, bounded by a
// minute.
func checkpoint(ctx context.Context, a Approach) error {
	wr, is := a.(WALReader)
	if !is {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := wr.Checkpoint(ctx); err != nil {
		return fmt.Errorf("writing a checkpoint before the run: %w", err)
	}
	return nil
}

// walPosition returns a's WAL position when a is a WALReader that keeps
// its data in PostgreSQL (ok), bounded by a few seconds.
func walPosition(ctx context.Context, a Approach) (pos uint64, ok bool, err error) {
	wr, is := a.(WALReader)
	if !is {
		return 0, false, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	pos, ok, err = wr.WALPosition(ctx)
	if err != nil {
		return 0, true, fmt.Errorf("reading the WAL position: %w", err)
	}
	return pos, ok, nil
}

// sampleCPU returns the machine's CPU times over d, or zero times where
// they cannot be read (Run reports that through its own reading).
func sampleCPU(ctx context.Context, d time.Duration) (CPUTimes, error) {
	before, err := ReadMachineCPU()
	if err != nil {
		return CPUTimes{}, nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return CPUTimes{}, fmt.Errorf("idle sample interrupted: %w", ctx.Err())
	}
	after, err := ReadMachineCPU()
	if err != nil {
		return CPUTimes{}, nil
	}
	return after.Sub(before), nil
}

// check fills the Result's checks from the final balances and the
// acknowledged credits and debits per account.
func (r *Result) check(bal, credits, debits []int64) error {
	w := r.Workload
	if len(bal) != w.Accounts {
		return fmt.Errorf("final read returned %d balances for %d accounts", len(bal), w.Accounts)
	}
	r.ExpectedTotal = int64(w.Accounts) * w.InitialBalance
	r.Total = 0
	for i, b := range bal {
		r.Total += b
		if b < 0 {
			r.Negative++
		}
		want := w.InitialBalance + credits[i] - debits[i]
		switch {
		case b < want:
			r.AccountsOff++
			r.Missing += want - b
		case b > want:
			r.AccountsOff++
			r.Extra += b - want
		}
	}
	return nil
}

func (wk *worker) loop(ctx context.Context, a Approach, w Workload, pick *workload.Picker, rng *rand.Rand, deadline time.Time) {
	for ctx.Err() == nil && time.Now().Before(deadline) {
		from := pick.Next(rng)
		to := pick.Next(rng)
		for to == from {
			to = pick.Next(rng)
		}
		amount := 1 + rng.Int64N(w.MaxAmount)
		stall := w.StallProbability > 0 && rng.Float64() < w.StallProbability

		tctx, cancel := context.WithTimeout(ctx, w.OpTimeout)
		if stall {
			wk.stalls++
			tctx = WithPause(tctx, w.StallDuration)
		}
		t0 := time.Now()
		err := a.Transfer(tctx, from, to, amount)
		d := time.Since(t0)
		cancel()
		switch {
		case err == nil:
			wk.ok++
			wk.debits[from] += amount
			wk.credits[to] += amount
			wk.lat = append(wk.lat, d)
		case errors.Is(err, ErrInsufficientFunds):
			wk.rejected++
			wk.lat = append(wk.lat, d)
		case errors.Is(err, ErrAborted):
			wk.aborted++
			if wk.firstErr == nil {
				wk.firstErr = err
			}
		default:
			wk.unknown++
			if wk.firstErr == nil {
				wk.firstErr = err
			}
		}
	}
}

func percentile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(i, 0)]
}
