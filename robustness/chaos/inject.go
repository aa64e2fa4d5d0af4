package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/examples/bank/ledger"
	"github.com/ordo-actors/ordo/robustness/history"
)

// FaultReport is one injected fault as the report shows it. Its probe
// reads each probed account and writes in the account's shard.
type FaultReport struct {
	Fault
	// Target names the node, etcd member or server hit.
	Target string `json:"target"`
	// Start and End are when the fault was injected and healed.
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	// Probed are the accounts whose recovery was measured: accounts owned
	// by the target node when the fault started (or a sample of all
	// accounts for etcd and postgres faults).
	Probed []string `json:"probed,omitempty"`
	// Recovered is whether every probed account answered again after its
	// last failed probe, within the recovery timeout.
	Recovered bool `json:"recovered"`
	// RecoveryMS is the time from Start until the last probed account
	// answered again after its last failed read; 0 when no read failed.
	RecoveryMS int64 `json:"recovery_ms"`
	// FailedProbes counts probe reads that failed or timed out.
	FailedProbes int `json:"failed_probes"`
	// FencedWrites counts the writes rejected by fencing, on any node, from
	// the fault's start to the next fault's (or the end of the run).
	FencedWrites int64 `json:"fenced_writes"`
	// Error says why the fault could not be injected or healed, if so.
	Error string `json:"error,omitempty"`
}

// balancer reads one account's balance; the probe's only need of the
// cluster. Safe for concurrent use.
type balancer func(ctx context.Context, account string) error

// probeConfig paces a recovery probe.
type probeConfig struct {
	// Every is the pause between two reads of one account.
	Every time.Duration
	// Timeout bounds one read.
	Timeout time.Duration
	// Stable is how many successive successful reads after the heal end
	// an account's probe.
	Stable int
	// Limit bounds the whole probe, from the fault's start.
	Limit time.Duration
}

// probeResult is what a probe measured.
type probeResult struct {
	recovered bool
	recovery  time.Duration
	failed    int
}

// probe reads each account repeatedly from start until healed is closed
// and the account then answered Stable times in a row. An account's
// recovery is the time from start to its first successful read after its
// last failed one (0 if none failed); the result is the largest. Reads
// answered before a failure do not count: an owner cut from etcd keeps
// answering until its lease deadline passes.
func probe(ctx context.Context, read balancer, accounts []string, start time.Time, healed <-chan struct{}, pc probeConfig) probeResult {
	ctx, cancel := context.WithDeadline(ctx, start.Add(pc.Limit))
	defer cancel()
	type acct struct {
		recovery  time.Duration
		failed    int
		recovered bool
	}
	res := make([]acct, len(accounts))
	var wg sync.WaitGroup
	for i, a := range accounts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok := 0
			for {
				rctx, rcancel := context.WithTimeout(ctx, pc.Timeout)
				err := read(rctx, a)
				rcancel()
				now := time.Now()
				if err != nil {
					if ctx.Err() != nil {
						return
					}
					res[i].failed++
					res[i].recovered = false
					ok = 0
				} else {
					if ok == 0 {
						res[i].recovered = true
						if res[i].failed > 0 {
							res[i].recovery = now.Sub(start)
						}
					}
					ok++
				}
				select {
				case <-healed:
					if ok >= pc.Stable {
						return
					}
				default:
				}
				if sleepCtx(ctx, pc.Every) != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	out := probeResult{recovered: true}
	for _, r := range res {
		out.recovered = out.recovered && r.recovered
		out.failed += r.failed
		if r.recovery > out.recovery {
			out.recovery = r.recovery
		}
	}
	return out
}

// accountsOf picks up to k accounts among n whose shard is in owned, in an
// order drawn from rng; with owned nil (or none matching) it picks any.
func accountsOf(rng *rand.Rand, n, k int, shards uint32, owned map[uint32]bool) []string {
	perm := rng.Perm(n)
	var out []string
	for _, i := range perm {
		a := history.AccountName(i)
		if owned == nil || owned[actors.ShardOf(ledger.AccountRef(a), shards)] {
			out = append(out, a)
			if len(out) == k {
				break
			}
		}
	}
	if len(out) == 0 && owned != nil {
		return accountsOf(rng, n, k, shards, nil)
	}
	sort.Strings(out)
	return out
}

// inject runs one fault: it starts the fault, starts the probe, waits the
// hold time, heals, and waits for the probe.
func (r *runner) inject(ctx context.Context, f Fault, read balancer, rng *rand.Rand) FaultReport {
	fr := FaultReport{Fault: f}
	fr.Target = f.Target(func(i int) string { return r.nodes[i].name }, func(i int) string { return r.members[i].name })
	var owned map[uint32]bool
	k := r.cfg.ProbeAccounts
	if f.Node >= 0 {
		n := r.nodes[f.Node]
		if st, err := r.admin.status(ctx, n.admin); err == nil {
			owned = map[uint32]bool{}
			for _, s := range st.Shards {
				owned[s.Shard] = true
			}
		}
		// The counter of a node about to die would be lost.
		r.scrapeNode(ctx, n)
	} else {
		k *= len(r.nodes)
	}
	if read != nil && r.shards > 0 {
		fr.Probed = accountsOf(rng, r.cfg.Accounts, k, r.shards, owned)
	}

	heal, err := r.startFault(ctx, f, &fr)
	fr.Start = time.Now()
	if err != nil {
		fr.Error = err.Error()
		fr.End = fr.Start
		return fr
	}
	r.logf("%6.1fs fault %s", time.Since(r.start).Seconds(), fr.describe())
	healed := make(chan struct{})
	var res probeResult
	var wg sync.WaitGroup
	if len(fr.Probed) > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res = probe(ctx, read, fr.Probed, fr.Start, healed,
				probeConfig{Every: 100 * time.Millisecond, Timeout: time.Second, Stable: 3, Limit: r.cfg.RecoveryTimeout + f.Hold})
		}()
	}
	_ = sleepCtx(ctx, f.Hold)
	if err := heal(); err != nil {
		fr.Error = err.Error()
	}
	fr.End = time.Now()
	close(healed)
	wg.Wait()
	fr.Recovered, fr.RecoveryMS, fr.FailedProbes = res.recovered, res.recovery.Milliseconds(), res.failed
	if len(fr.Probed) == 0 {
		fr.Recovered = fr.Error == ""
	}
	r.logf("%6.1fs healed %s: recovered=%v in %d ms (%d failed reads)", time.Since(r.start).Seconds(),
		fr.describe(), fr.Recovered, fr.RecoveryMS, fr.FailedProbes)
	return fr
}

func (fr *FaultReport) describe() string {
	return fmt.Sprintf("#%d %s %s", fr.Index, fr.Kind, fr.Target)
}

// startFault injects f and returns the function that heals it.
func (r *runner) startFault(ctx context.Context, f Fault, fr *FaultReport) (heal func() error, err error) {
	switch f.Kind {
	case KindKill:
		n := r.nodes[f.Node]
		if !n.proc.running() {
			return nil, fmt.Errorf("chaos: %s is not running", n.name)
		}
		n.proc.kill()
		return func() error { return r.startNode(ctx, f.Node, r.nodes) }, nil
	case KindPause:
		// The pause begins while writes are on the wire: the node's store
		// traffic stalls for PauseStall first, then the node stops. The
		// stalled writes reach the store only after the heal, when another
		// node has taken the shards over and raised their fences.
		n := r.nodes[f.Node]
		stall := n.storeProxies()
		for _, p := range stall {
			p.Partition()
		}
		_ = sleepCtx(ctx, r.cfg.PauseStall)
		if err := n.proc.signal(syscall.SIGSTOP); err != nil {
			for _, p := range stall {
				p.Heal()
			}
			return nil, err
		}
		return func() error {
			for _, p := range stall {
				p.Heal()
			}
			return n.proc.signal(syscall.SIGCONT)
		}, nil
	case KindPartition:
		n := r.nodes[f.Node]
		var cut []cutter
		switch f.Cut {
		case CutEtcd:
			for _, p := range n.proxies {
				cut = append(cut, p)
			}
		case CutNodes:
			cut = n.peerProxies()
		default:
			return nil, fmt.Errorf("chaos: partition from %q: want %q or %q", f.Cut, CutEtcd, CutNodes)
		}
		fr.Target = n.name + " from " + f.Cut
		for _, p := range cut {
			p.Partition()
		}
		return func() error {
			for _, p := range cut {
				p.Heal()
			}
			return nil
		}, nil
	case KindEtcd:
		i := f.Member
		if i < 0 {
			if i, err = r.leader(ctx); err != nil {
				return nil, err
			}
			fr.Target = "etcd leader " + r.members[i].name
		} else if l, err := r.leader(ctx); err == nil {
			role := "follower"
			if l == i {
				role = "leader"
			}
			fr.Target = fmt.Sprintf("etcd %s %s", role, r.members[i].name)
		}
		m := r.members[i]
		if !m.proc.running() {
			return nil, fmt.Errorf("chaos: %s is not running", m.name)
		}
		m.proc.kill()
		return m.proc.start, nil
	case KindPostgres:
		// The restart is the fault: the server is down while it runs.
		return func() error { return r.runExternal(ctx, "postgres-restart", r.cfg.PGRestart) }, nil
	}
	return nil, fmt.Errorf("chaos: unknown fault %q", f.Kind)
}

// unavailable reads every account once, 16 at a time, each read bounded
// by timeout, and returns those that did not answer, sorted.
func unavailable(ctx context.Context, read balancer, accounts int, timeout time.Duration) []string {
	var mu sync.Mutex
	var out []string
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for i := 0; i < accounts; i++ {
		a := history.AccountName(i)
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			rctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			if err := read(rctx, a); err != nil {
				mu.Lock()
				out = append(out, a)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	sort.Strings(out)
	return out
}

// shardProbes returns, for each of shards shards, the ID of an account
// outside the bank (prefix followed by a number) that lives in it.
func shardProbes(shards uint32, prefix string) []string {
	ids := make([]string, shards)
	left := int(shards)
	for i := 0; left > 0; i++ {
		id := prefix + strconv.Itoa(i)
		s := actors.ShardOf(ledger.AccountRef(id), shards)
		if ids[s] == "" {
			ids[s] = id
			left--
		}
	}
	return ids
}

// unservedShards reads, in every shard, the balance of an account that was
// never opened: an owner that serves the shard answers at once with a
// handler error (unknown account). It returns the shards that gave no
// answer within timeout: shards held in placement but served by no one.
func unservedShards(ctx context.Context, read balancer, shards uint32, timeout time.Duration) []uint32 {
	ids := shardProbes(shards, "probe-")
	var mu sync.Mutex
	var out []uint32
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for s, id := range ids {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			rctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			if err := read(rctx, id); err != nil && !errors.Is(err, actors.ErrHandler) {
				mu.Lock()
				out = append(out, uint32(s))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}
