package chaos

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/cluster"
	"github.com/ordo-actors/ordo/examples/bank/ledger"
	"github.com/ordo-actors/ordo/ordotls"
	"github.com/ordo-actors/ordo/proto/bankpb"
	"github.com/ordo-actors/ordo/robustness/history"
	"go.uber.org/zap"
)

// ErrUsage is matched (errors.Is) by Main's errors about its command line.
var ErrUsage = errors.New("chaos: bad usage")

// ErrViolation is returned (wrapped) by Main when the run found a
// violation or could not inject or heal a fault.
var ErrViolation = errors.New("chaos: run failed")

// proxied documents which connections the run can cut.
const proxied = "each node's etcd client connections (placement and, with the etcd store, storage) go through " +
	"one TCP proxy per node and etcd member, and with the postgres store its PostgreSQL connections through one " +
	"more; every other node and client reaches a node through the proxies in front of its remote port (TCP) " +
	"and gossip port (TCP and UDP), whose addresses it advertises; a partition cuts a node from etcd or from " +
	"its peers and clients (fault.cut)"

func nopZap() *zap.Logger { return zap.NewNop() }

// Main is `bank chaos`: it parses args, runs the chaos scenario with the
// bank binary self as every child process, prints the seed, progress and a
// summary to stdout, writes the JSON report and returns an error wrapping
// ErrViolation when the run failed, or ErrUsage for a bad command line
// (--help prints the usage and returns nil).
func Main(ctx context.Context, args []string, stdout io.Writer, self string) error {
	cfg, err := ParseFlags(args, stdout, os.Getenv("ORDO_PG_URL"))
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUsage, err)
	}
	cfg.Bank = self
	cfg.Out = stdout
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrUsage, err)
	}
	rep, err := Run(ctx, cfg)
	if err != nil {
		return err
	}
	fmt.Fprint(stdout, rep.Summary())
	if !rep.OK {
		return fmt.Errorf("%w: seed %d (replay with --seed %d)", ErrViolation, rep.Seed, rep.Seed)
	}
	return nil
}

// Run runs one chaos scenario: etcd members, nodes behind proxies, the
// accounts, the load under the seeded faults, a final heal and the check.
// It returns an error only when the run could not be carried out (a
// process that would not start, ctx ended); violations are in the Report.
// Every child process is killed before Run returns.
func Run(ctx context.Context, cfg Config) (_ *Report, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	out := cfg.Out
	if out == nil {
		out = io.Discard
	}
	dir := cfg.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "bank-chaos-"); err != nil {
			return nil, err
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	r := &runner{cfg: cfg, dir: dir, out: out, admin: newAdminClient(), tally: newFencedTally()}
	faults := Plan(cfg.Seed, cfg.planConfig())
	r.logf("seed %d (replay with --seed %d), %d faults planned, run directory %s", cfg.Seed, cfg.Seed, len(faults), dir)
	for _, f := range faults {
		r.logf("  planned %v", f)
	}
	defer r.teardown()

	if cfg.Store == "postgres" {
		if r.cfg.PGURL, err = freshDatabase(ctx, cfg.PGURL, cfg.PGDatabase); err != nil {
			return nil, err
		}
		r.logf("PostgreSQL database %s recreated", cfg.PGDatabase)
	}
	if err := r.writeCerts(ctx); err != nil {
		return nil, err
	}
	if err := r.startEtcd(ctx); err != nil {
		return nil, err
	}
	if err := r.startNodes(ctx); err != nil {
		return nil, err
	}
	if err := r.readShards(ctx); err != nil {
		return nil, err
	}
	if err := r.waitSettled(ctx, 60*time.Second); err != nil {
		r.logf("cluster not settled before the load: %v", err)
	}
	direct := joinComma(r.directEndpoints())
	accounts, balance := strconv.Itoa(cfg.Accounts), strconv.FormatInt(cfg.Balance, 10)
	clientTLS := r.tlsArgs(clientCert)
	if err := r.runCmd(ctx, "open", append([]string{"open", "--etcd", direct, "--accounts", accounts, "--balance", balance},
		clientTLS...)...); err != nil {
		return nil, err
	}

	pcc := probeClientConfig()
	if pcc.TLS, err = ordotls.Load(r.tlsFiles(clientCert)); err != nil {
		return nil, fmt.Errorf("chaos: probe client: %w", err)
	}
	if pcc.EtcdTLS, err = r.etcdTLS(clientCert); err != nil {
		return nil, err
	}
	client, err := cluster.Dial(ctx, r.directEndpoints(), pcc)
	if err != nil {
		return nil, fmt.Errorf("chaos: probe client: %w", err)
	}
	defer client.Close()
	accountClient := bankpb.NewAccountServiceClient(client)
	read := func(ctx context.Context, account string) error {
		_, err := accountClient.GetBalance(ctx, account, &bankpb.GetBalance{})
		return err
	}
	// A fault's probe reads the account and writes in its shard: reads
	// are answered from memory, so only a write sees the store. The write
	// opens a companion account outside the bank (never checked) under a
	// fresh request ID, which the entity must make durable before it
	// answers.
	companions := shardProbes(r.shards, "wprobe-")
	var writes atomic.Int64
	readWrite := func(ctx context.Context, account string) error {
		if err := read(ctx, account); err != nil {
			return err
		}
		c := companions[actors.ShardOf(ledger.AccountRef(account), r.shards)]
		id := fmt.Sprintf("chaos-%d-%d", cfg.Seed, writes.Add(1))
		_, err := accountClient.Open(ctx, c, &bankpb.Open{}, actors.WithRequestID(id))
		return err
	}

	// Scrape the fenced-writes counters until the end of the run.
	scrapeCtx, stopScrape := context.WithCancel(ctx)
	var scrapeWG sync.WaitGroup
	scrapeWG.Add(1)
	go func() {
		defer scrapeWG.Done()
		for sleepCtx(scrapeCtx, 500*time.Millisecond) == nil {
			r.scrape(scrapeCtx)
		}
	}()
	defer func() { stopScrape(); scrapeWG.Wait() }()

	hist := filepath.Join(dir, "history.jsonl")
	load := newProc("load", cfg.Bank, filepath.Join(dir, "load.log"), append([]string{"load", "--etcd", direct,
		"--accounts", accounts, "--duration", cfg.Duration.String(), "--concurrency", strconv.Itoa(cfg.Concurrency),
		"--read-ratio", strconv.FormatFloat(cfg.ReadRatio, 'f', -1, 64),
		"--seed", strconv.FormatUint(max(cfg.Seed, 1), 10), "--history", hist}, append(clientTLS, cfg.LoadArgs...)...))
	if err := load.start(); err != nil {
		return nil, err
	}
	defer load.kill()
	r.start = time.Now()
	r.logf("load started: %d clients for %v", cfg.Concurrency, cfg.Duration)

	rep := &Report{Seed: cfg.Seed, Duration: cfg.Duration.String(), Store: cfg.Store, Nodes: cfg.Nodes,
		EtcdMembers: cfg.EtcdMembers, LeaseTTL: cfg.LeaseTTL.String(), Kinds: cfg.Kinds, Proxied: proxied,
		LoadStart: r.start, Dir: dir}

	// The observer watches until the check has run; an early return
	// cancels it.
	checked := make(chan struct{})
	endObserver := func() {}
	if cfg.Observer != nil {
		octx, cancel := context.WithCancel(ctx)
		loadDone, _ := load.exited()
		c := &Cluster{r: r, loadDone: loadDone}
		var owg sync.WaitGroup
		owg.Add(1)
		go func() { defer owg.Done(); cfg.Observer.Observe(octx, c, checked) }()
		var once sync.Once
		endObserver = func() {
			once.Do(func() { close(checked) })
			owg.Wait()
			cancel()
		}
		defer func() { cancel(); endObserver() }()
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 1))
	// attribute gives the last fault the writes fenced since it started,
	// on any node, up to now (the next fault's start or the end).
	_, fencedBefore := r.tally.byNode()
	attribute := func() {
		_, now := r.tally.byNode()
		if n := len(rep.Faults); n > 0 {
			rep.Faults[n-1].FencedWrites = now - fencedBefore
		}
		fencedBefore = now
	}
	for _, f := range faults {
		if err := sleepCtx(ctx, time.Until(r.start.Add(f.At))); err != nil {
			return nil, err
		}
		if !load.running() {
			rep.Notes = append(rep.Notes, "the load ended before the schedule did")
			break
		}
		r.scrape(ctx)
		attribute()
		rep.Faults = append(rep.Faults, r.inject(ctx, f, readWrite, rng))
	}
	r.healAll(ctx)

	lctx, cancel := context.WithTimeout(ctx, cfg.Duration+2*time.Minute)
	lerr := load.wait(lctx)
	cancel()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if lerr != nil {
		rep.Notes = append(rep.Notes, fmt.Sprintf("load: %v (log %s)", lerr, load.logPath))
	}
	r.logf("%6.1fs load done", time.Since(r.start).Seconds())
	for _, n := range r.nodes {
		if err := r.waitNodeReady(ctx, n, 30*time.Second); err != nil {
			rep.Notes = append(rep.Notes, fmt.Sprintf("after healing: %v", err))
		}
	}
	r.scrape(ctx)
	if rep.Ops, err = countOps(hist); err != nil {
		rep.Notes = append(rep.Notes, fmt.Sprintf("history: %v", err))
	}
	var ops []history.Op
	if ops, err = history.ReadFile(hist); err == nil {
		status := func(ctx context.Context, id, from string) (*bankpb.TransferState, error) {
			return bankpb.NewTransferServiceClient(client).GetTransfer(ctx, ledger.TransferID(from, id), &bankpb.GetTransfer{})
		}
		rep.Sagas = watchSagas(ctx, status, ops, 30*time.Second)
		r.logf("%6.1fs %v", time.Since(r.start).Seconds(), rep.Sagas)
	}
	rep.Unavailable = unavailable(ctx, read, cfg.Accounts, 3*time.Second)
	rep.UnservedShards = unservedShards(ctx, read, r.shards, 3*time.Second)
	if len(rep.UnservedShards) > 0 {
		rep.UnservedLocks = r.describeShards(ctx, rep.UnservedShards)
		r.logf("%6.1fs %d shards are served by no node after the heal: %s", time.Since(r.start).Seconds(),
			len(rep.UnservedShards), strings.Join(rep.UnservedLocks, "; "))
	}
	if len(rep.Unavailable) > 0 {
		r.logf("%6.1fs %d accounts do not answer after the heal: %v", time.Since(r.start).Seconds(), len(rep.Unavailable), rep.Unavailable)
	}
	if len(rep.Unavailable) > 0 || len(rep.Sagas.Pending) > 0 {
		d := r.diagnose(ctx, dir, rep.Unavailable, rep.Sagas.Pending, transferSources(ops))
		r.logf("%6.1fs the nodes' goroutines and what they hold of those entities: %s", time.Since(r.start).Seconds(), d)
	}

	checkReport := filepath.Join(dir, "check.json")
	rep.Check.Report = checkReport
	r.logf("%6.1fs checking", time.Since(r.start).Seconds())
	checkStart := time.Now()
	checkArgs := append([]string{"check", "--etcd", direct, "--accounts", accounts, "--balance", balance,
		"--history", hist, "--report", checkReport, "--verbose", "--resolve-timeout", cfg.ResolveTimeout.String(),
		"--store", cfg.Store}, clientTLS...)
	if cfg.Store == "postgres" {
		checkArgs = append(checkArgs, "--pg", r.cfg.PGURL) // the statements: the accounts' journals
	}
	cerr := r.runCmd(ctx, "check", checkArgs...)
	rep.Check.ElapsedMS = time.Since(checkStart).Milliseconds()
	r.logf("%6.1fs check done in %.1fs", time.Since(r.start).Seconds(), time.Since(checkStart).Seconds())
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	rep.Check.ExitCode = exitCode(cerr)
	if rerr := readCheckReport(checkReport, &rep.Check); rerr != nil {
		rep.Check.Error = rerr.Error()
	}
	if cerr != nil && rep.Check.ExitCode != 1 {
		rep.Check.Error = cerr.Error()
	}
	r.scrape(ctx)
	attribute()
	endObserver()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	rep.FencedByNode, rep.FencedWrites = r.tally.byNode()
	rep.finish()

	if err := rep.write(filepath.Join(dir, "report.json")); err != nil {
		return rep, err
	}
	if cfg.ReportPath != "" {
		if err := rep.write(cfg.ReportPath); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// clientCert names the certificate of the run's client processes (bank
// certs writes it).
const clientCert = "client"

// probeClientConfig is the recovery probe's cluster client: quiet, and
// with attempts short enough to notice an owner that stopped answering.
// Its TLS is set by Run.
func probeClientConfig() cluster.ClientConfig {
	cc := cluster.DefaultClientConfig()
	cc.Logger = slog.New(slog.DiscardHandler)
	cc.Retry.AttemptTimeout = time.Second
	return cc
}

func joinComma(s []string) string {
	out := ""
	for i, v := range s {
		if i > 0 {
			out += ","
		}
		out += v
	}
	return out
}
