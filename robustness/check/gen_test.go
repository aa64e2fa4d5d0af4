package check_test

import (
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/robustness/check"
	"github.com/ordo-actors/ordo/robustness/history"
)

var seedFlag = flag.Uint64("check.seed", 0, "seed for randomised history tests (0: derive from the clock)")

// testSeed returns the seed to use and logs it so a failure can be replayed
// with -check.seed.
func testSeed(t testing.TB) uint64 {
	t.Helper()
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (replay with -check.seed=%d)", seed, seed)
	return seed
}

// genConfig shapes a generated history.
type genConfig struct {
	accounts int
	ops      int
	initial  int64
	overlap  int64   // max extra width on each side of an op's interval, in steps
	maxDelay int     // max steps between a transfer's debit and its credit
	pRead    float64 // share of balance reads
	pUnknown float64 // share of ops whose client gives up
	pBadAcct float64 // share of transfers to an account outside the bank
}

func defaultGenConfig() genConfig {
	return genConfig{accounts: 8, ops: 400, initial: 100, overlap: 3, maxDelay: 3,
		pRead: 0.3, pUnknown: 0.1, pBadAcct: 0.03}
}

// generated is a history produced by a sequential simulation of the bank,
// with what the checker needs, and the bookkeeping mutations need.
type generated struct {
	in       check.Input
	okIDs    []string // transfers whose final outcome is ok
	resolved []string // unknown transfers resolved ok
	touched  map[string]bool
}

const step = 1000 // ns between linearization points

// generate simulates the bank one action at a time. Every action takes
// effect at a known instant (a transfer's credit possibly a few steps after
// its debit) and the client's interval is widened at random around those
// instants, so intervals overlap but the history is linearizable by
// construction. Clients that give up record unknown; their transfers took
// effect at the action time, or take effect (or are rejected) when re-submitted
// after the run.
func generate(rng *rand.Rand, cfg genConfig) generated {
	const base = int64(1_700_000_000_000_000_000)
	bal := make([]int64, cfg.accounts)
	for i := range bal {
		bal[i] = cfg.initial
	}
	at := func(s int) int64 { return base + int64(s)*step }
	widen := func() int64 { return rng.Int64N(cfg.overlap*step + 1) }
	type credit struct {
		to     int
		amount int64
	}
	credits := map[int][]credit{} // by the step they are due before
	var (
		ops      []history.Op
		busy     []int64 // per client: ret of its last op
		okIDs    []string
		resolved = map[string]history.Outcome{}
		resOK    []string
		later    []history.Op // unknown transfers applied on re-submission
		touched  = map[string]bool{}
	)
	client := func(call, ret int64) int {
		for c, until := range busy {
			if until < call {
				busy[c] = ret
				return c
			}
		}
		busy = append(busy, ret)
		return len(busy) - 1
	}
	for s := 0; s < cfg.ops; s++ {
		for _, cr := range credits[s] {
			bal[cr.to] += cr.amount
		}
		delete(credits, s)
		t := at(s)
		if rng.Float64() < cfg.pRead {
			a := rng.IntN(cfg.accounts)
			op := history.Op{Op: history.OpBalance, Account: history.AccountName(a), Call: t - widen(), Ret: t + widen(), Outcome: history.OK, Balance: bal[a]}
			if rng.Float64() < cfg.pUnknown {
				op.Outcome, op.Balance, op.Error = history.Unknown, 0, "timeout"
			}
			op.Client = client(op.Call, op.Ret)
			ops = append(ops, op)
			continue
		}
		from := rng.IntN(cfg.accounts)
		to := (from + 1 + rng.IntN(cfg.accounts-1)) % cfg.accounts
		amount := 1 + rng.Int64N(cfg.initial/2)
		op := history.Op{Op: history.OpTransfer, ID: fmt.Sprintf("t-%d", s), From: history.AccountName(from),
			To: history.AccountName(to), Amount: amount, Call: t - widen()}
		unknown := rng.Float64() < cfg.pUnknown
		switch {
		case rng.Float64() < cfg.pBadAcct:
			op.To = history.AccountName(cfg.accounts + rng.IntN(10))
			op.Outcome, op.Error, op.Ret = history.Rejected, "bank: unknown account "+op.To, t+widen()
		case unknown && rng.IntN(2) == 0:
			// The client gave up and the transfer did not happen during
			// the run; re-submission decides.
			op.Outcome, op.Error, op.Ret = history.Unknown, "context deadline exceeded", op.Call+rng.Int64N(4*step)
			later = append(later, op)
		case bal[from] < amount:
			op.Outcome, op.Error, op.Ret = history.Rejected, "bank: insufficient funds", t+widen()
			if unknown {
				op.Outcome, op.Error = history.Unknown, "connection reset"
				resolved[op.ID] = history.Rejected
			}
		default:
			bal[from] -= amount
			delay := rng.IntN(cfg.maxDelay + 1)
			creditAt := t
			if delay == 0 {
				bal[to] += amount
			} else {
				credits[s+delay] = append(credits[s+delay], credit{to, amount})
				creditAt = at(s+delay) - step/2
			}
			op.Outcome, op.Ret = history.OK, creditAt+widen()
			okIDs = append(okIDs, op.ID)
			touched[op.From], touched[op.To] = true, true
			if unknown {
				op.Outcome, op.Error, op.Ret = history.Unknown, "connection reset", op.Call+rng.Int64N(4*step)
				resolved[op.ID] = history.OK
				resOK = append(resOK, op.ID)
			}
		}
		op.Client = client(op.Call, op.Ret)
		ops = append(ops, op)
	}
	for _, s := range slices.Sorted(maps.Keys(credits)) {
		for _, cr := range credits[s] {
			bal[cr.to] += cr.amount
		}
	}
	// Re-submission after the run, in random order.
	rng.Shuffle(len(later), func(i, j int) { later[i], later[j] = later[j], later[i] })
	for _, op := range later {
		from, _ := history.ParseAccount(op.From)
		to, _ := history.ParseAccount(op.To)
		if bal[from] < op.Amount {
			resolved[op.ID] = history.Rejected
			continue
		}
		bal[from] -= op.Amount
		bal[to] += op.Amount
		resolved[op.ID] = history.OK
		okIDs = append(okIDs, op.ID)
		resOK = append(resOK, op.ID)
		touched[op.From], touched[op.To] = true, true
	}
	final := map[string]int64{}
	for i, b := range bal {
		final[history.AccountName(i)] = b
	}
	// Clients record ops as they return, not in call order.
	rng.Shuffle(len(ops), func(i, j int) { ops[i], ops[j] = ops[j], ops[i] })
	return generated{
		in: check.Input{Ops: ops, Accounts: cfg.accounts, InitialBalance: cfg.initial, Final: final,
			Resolved: resolved, Timeout: time.Minute},
		okIDs: okIDs, resolved: resOK, touched: touched,
	}
}

func TestGeneratedHistoriesPass(t *testing.T) {
	seed := testSeed(t)
	rounds := 40
	if testing.Short() {
		rounds = 10
	}
	for round := range rounds {
		rng := rand.New(rand.NewPCG(seed, uint64(round)))
		cfg := defaultGenConfig()
		cfg.accounts = 2 + rng.IntN(10)
		cfg.overlap = 1 + rng.Int64N(5)
		// At most 50 ops per account: a few hundred ops on one account,
		// dozens of them with unknown outcomes, make the open-ended
		// linearizability search take most of a minute (longer under
		// -race), and the checker's time limit would decide the test.
		cfg.ops = min(cfg.ops, 50*cfg.accounts)
		g := generate(rng, cfg)
		r := check.Check(g.in)
		if !r.OK() {
			t.Fatalf("seed %d round %d (%+v): valid history failed:\n%s", seed, round, cfg, r)
		}
	}
}

// mutation breaks a valid generated history in a way the checker must
// catch; it returns the invariant that must fail, or "" when the history
// offers nothing to mutate.
type mutation struct {
	name  string
	apply func(rng *rand.Rand, g *generated) string
}

func pick[T any](rng *rand.Rand, s []T) T { return s[rng.IntN(len(s))] }

func opByID(g *generated, id string) *history.Op {
	for i := range g.in.Ops {
		if g.in.Ops[i].ID == id {
			return &g.in.Ops[i]
		}
	}
	return nil
}

var mutations = []mutation{
	{"lost transfer", func(rng *rand.Rand, g *generated) string {
		if len(g.okIDs) == 0 {
			return ""
		}
		op := opByID(g, pick(rng, g.okIDs))
		g.in.Final[op.From] += op.Amount
		g.in.Final[op.To] -= op.Amount
		return check.InvExactlyOnce
	}},
	{"doubled transfer", func(rng *rand.Rand, g *generated) string {
		if len(g.okIDs) == 0 {
			return ""
		}
		op := opByID(g, pick(rng, g.okIDs))
		g.in.Final[op.From] -= op.Amount
		g.in.Final[op.To] += op.Amount
		return check.InvExactlyOnce
	}},
	{"money created", func(rng *rand.Rand, g *generated) string {
		g.in.Final[history.AccountName(rng.IntN(g.in.Accounts))] += 1 + rng.Int64N(10)
		return check.InvConservation
	}},
	{"acked transfer reported rejected", func(rng *rand.Rand, g *generated) string {
		var acked []string
		for _, id := range g.okIDs {
			if op := opByID(g, id); op.Outcome == history.OK {
				acked = append(acked, id)
			}
		}
		if len(acked) == 0 {
			return ""
		}
		op := opByID(g, pick(rng, acked))
		op.Outcome, op.Error = history.Rejected, "unknown account"
		return check.InvExactlyOnce
	}},
	{"resolution lost", func(rng *rand.Rand, g *generated) string {
		if len(g.resolved) == 0 {
			return ""
		}
		g.in.Resolved = maps.Clone(g.in.Resolved)
		g.in.Resolved[pick(rng, g.resolved)] = history.Rejected
		return check.InvExactlyOnce
	}},
	{"read above every reachable balance", func(rng *rand.Rand, g *generated) string {
		var reads []int
		for i, op := range g.in.Ops {
			if op.Op == history.OpBalance && op.Outcome == history.OK {
				reads = append(reads, i)
			}
		}
		if len(reads) == 0 {
			return ""
		}
		op := &g.in.Ops[pick(rng, reads)]
		ceiling := g.in.InitialBalance
		for _, id := range g.okIDs {
			if t := opByID(g, id); t.To == op.Account {
				ceiling += t.Amount
			}
		}
		op.Balance = ceiling + 1 + rng.Int64N(5)
		return check.InvLinearizable
	}},
	{"stale read after the run", func(rng *rand.Rand, g *generated) string {
		// An account no resolved-unknown transfer touches has exactly its
		// final balance once every op has returned.
		clean := map[string]bool{}
		for a := range g.in.Accounts {
			clean[history.AccountName(a)] = true
		}
		for _, op := range g.in.Ops {
			if op.Op == history.OpTransfer && op.Outcome == history.Unknown {
				delete(clean, op.From)
				delete(clean, op.To)
			}
		}
		if len(clean) == 0 {
			return ""
		}
		var last int64
		for _, op := range g.in.Ops {
			last = max(last, op.Ret)
		}
		a := pick(rng, slices.Sorted(maps.Keys(clean)))
		wrong := g.in.Final[a] + 1 + rng.Int64N(5)
		if rng.IntN(2) == 0 && g.in.Final[a] != g.in.InitialBalance {
			wrong = g.in.InitialBalance // never saw any transfer
		}
		g.in.Ops = append(g.in.Ops, history.Op{Client: 0, Op: history.OpBalance, Account: a,
			Call: last + step, Ret: last + 2*step, Outcome: history.OK, Balance: wrong})
		return check.InvLinearizable
	}},
}

func TestMutatedHistoriesFail(t *testing.T) {
	seed := testSeed(t)
	rounds := 15
	if testing.Short() {
		rounds = 4
	}
	for _, m := range mutations {
		t.Run(m.name, func(t *testing.T) {
			caught := 0
			for round := range rounds {
				rng := rand.New(rand.NewPCG(seed, uint64(round)))
				cfg := defaultGenConfig()
				cfg.ops = 150
				if round%2 == 1 {
					cfg.pUnknown = 0 // leaves accounts no unknown transfer touches
				}
				cfg.accounts = 2 + rng.IntN(6)
				g := generate(rng, cfg)
				g.in.Ops = slices.Clone(g.in.Ops)
				want := m.apply(rng, &g)
				if want == "" {
					continue
				}
				r := check.Check(g.in)
				inv, _ := r.Invariant(want)
				if r.OK() || inv.Status != check.StatusFail {
					t.Fatalf("seed %d round %d: mutation %q not caught (%s = %s):\n%s", seed, round, m.name, want, inv.Status, r)
				}
				caught++
			}
			if caught == 0 {
				t.Fatalf("seed %d: mutation %q never applied", seed, m.name)
			}
		})
	}
}

func TestLargeGeneratedHistory(t *testing.T) {
	if testing.Short() {
		t.Skip("large history")
	}
	seed := testSeed(t)
	cfg := defaultGenConfig()
	cfg.accounts, cfg.ops, cfg.initial = 100, 12_000, 1000
	g := generate(rand.New(rand.NewPCG(seed, 0)), cfg)
	r := check.Check(g.in)
	if !r.OK() {
		t.Fatalf("seed %d: valid large history failed:\n%s", seed, r)
	}
	t.Logf("%d ops: linearizability checked in %v", len(g.in.Ops), r.LinearizabilityElapsed)
}

// BenchmarkCheck20k checks generated 20,000-op histories on 100 accounts,
// with 2% and 10% of ops left unknown by their clients (resolved later).
func BenchmarkCheck20k(b *testing.B) {
	for _, pUnknown := range []float64{0.02, 0.10} {
		b.Run(fmt.Sprintf("unknown=%.0f%%", pUnknown*100), func(b *testing.B) {
			cfg := defaultGenConfig()
			cfg.accounts, cfg.ops, cfg.initial, cfg.pUnknown = 100, 20_000, 1000, pUnknown
			g := generate(rand.New(rand.NewPCG(1, 2)), cfg)
			b.ReportAllocs()
			for b.Loop() {
				if r := check.Check(g.in); !r.OK() {
					b.Fatalf("valid history failed:\n%s", r)
				}
			}
			b.ReportMetric(float64(len(g.in.Ops))*float64(b.N)/b.Elapsed().Seconds(), "ops/s")
		})
	}
}
