package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/cluster/clustertest"
	"github.com/ordo-actors/ordo/examples/bank/ledger"
	"github.com/ordo-actors/ordo/persistence"
	"github.com/ordo-actors/ordo/proto/bankpb"
	"github.com/ordo-actors/ordo/robustness/check"
	"github.com/ordo-actors/ordo/robustness/history"
	"github.com/ordo-actors/ordo/robustness/workload"
	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel/trace"
)

// opCounts counts finished operations for the progress bar. Safe for
// concurrent use.
type opCounts struct {
	ok, rejected, unknown, reads atomic.Int64
}

func (c *opCounts) add(op history.Op) {
	switch {
	case op.Op == history.OpBalance:
		c.reads.Add(1)
	case op.Outcome == history.OK:
		c.ok.Add(1)
	case op.Outcome == history.Rejected:
		c.rejected.Add(1)
	default:
		c.unknown.Add(1)
	}
}

func (c *opCounts) String() string {
	s := fmt.Sprintf("transfers ok %d, rejected %d, unknown %d", c.ok.Load(), c.rejected.Load(), c.unknown.Load())
	if r := c.reads.Load(); r > 0 {
		s += fmt.Sprintf(", reads %d", r)
	}
	return s
}

// demoOptions are the demo's flags.
type demoOptions struct {
	nodes    int
	balance  int64
	store    string
	pg       string
	killAt   float64
	noKill   bool
	histPath string
	verbose  bool
	quiet    bool
	noFsync  bool
	cpuProf  string
	dash     bool
	trace    string // "": off; "-": stdout
	ratio    float64
	linLimit time.Duration
	wl       workload.Config
}

func newDemoCmd() *cobra.Command {
	var o demoOptions
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run a 3-node cluster in this process, transfer money while a node crashes and restarts, then check everything",
		Long: `demo starts an embedded etcd and a cluster of nodes in this process, opens the
accounts, runs transfers from concurrent clients with Zipf-skewed account
choice, crashes one node midway (no drain, no lease revocation) and restarts
it under the same ID, then resolves the transfers whose outcome the clients
never learned, reads every balance and every account's statement (the
events of its journal) and checks the history: conservation, exactly-once,
no negative balance, per-account linearizability, statements that add up to
the balances and hold every transfer as its outcome says. It prints the
hottest account's statement, and exits 0 only if every invariant holds.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.validate(); err != nil {
				return err
			}
			if o.cpuProf != "" {
				f, err := os.Create(o.cpuProf)
				if err != nil {
					return err
				}
				defer f.Close()
				if err := pprof.StartCPUProfile(f); err != nil {
					return err
				}
				defer pprof.StopCPUProfile()
			}
			return runDemo(cmd.Context(), o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	fs := cmd.Flags()
	fs.IntVar(&o.nodes, "nodes", 3, "nodes in the cluster (at least 2, one is crashed)")
	fs.Int64Var(&o.balance, "balance", 1000, "initial balance of each account")
	fs.StringVar(&o.store, "store", "etcd", "where entity state is kept: etcd (the embedded one) or postgres")
	fs.StringVar(&o.pg, "pg", "", "PostgreSQL URL for --store postgres (default $ORDO_PG_URL)")
	fs.Float64Var(&o.killAt, "kill-at", 0.5, "when to crash a node, as a fraction of --duration")
	fs.BoolVar(&o.noKill, "no-kill", false, "do not crash a node")
	fs.StringVar(&o.histPath, "history", "", "also write the history to this file")
	fs.BoolVarP(&o.verbose, "verbose", "v", false, "log the nodes' messages to stderr")
	fs.BoolVarP(&o.quiet, "quiet", "q", false, "no progress bar")
	fs.BoolVar(&o.noFsync, "unsafe-no-fsync", false, "the embedded etcd skips fsync (faster on slow disks; unsafe)")
	fs.StringVar(&o.cpuProf, "cpuprofile", "", "write a CPU profile of the whole run to this file (go tool pprof)")
	fs.BoolVar(&o.dash, "dashboard", false, "serve every node's web dashboard (printed URLs) and keep the cluster up after the run, until Ctrl-C")
	fs.StringVar(&o.trace, "trace", "", "record OpenTelemetry spans of --trace-ratio of the operations: --trace prints them to stdout, --trace=FILE writes them to FILE (one JSON object per line)")
	fs.Lookup("trace").NoOptDefVal = "-"
	fs.Float64Var(&o.ratio, "trace-ratio", 0.01, "fraction of the operations traced with --trace (each sampled operation is traced on every node it reaches)")
	fs.DurationVar(&o.linLimit, "lin-timeout", 15*time.Second, "bound on the linearizability search; past it the invariant is unknown and the demo fails (a few hot accounts under many clients make long searches)")
	workloadFlags(cmd, &o.wl)
	return cmd
}

func (o *demoOptions) validate() error {
	if o.nodes < 2 || o.nodes > 16 {
		return usagef("--nodes %d: want 2..16", o.nodes)
	}
	if o.balance < 0 {
		return usagef("--balance %d must not be negative", o.balance)
	}
	if o.pg == "" {
		o.pg = os.Getenv("ORDO_PG_URL")
	}
	switch o.store {
	case "etcd":
	case "postgres":
		if o.pg == "" {
			return usagef("--store postgres needs --pg URL (or ORDO_PG_URL)")
		}
	default:
		return usagef("--store %q: want etcd or postgres", o.store)
	}
	if !(o.killAt > 0 && o.killAt < 1) {
		return usagef("--kill-at %v: want a fraction in (0, 1)", o.killAt)
	}
	if !(o.ratio >= 0 && o.ratio <= 1) {
		return usagef("--trace-ratio %v: want a fraction in [0, 1]", o.ratio)
	}
	if o.linLimit <= 0 {
		return usagef("--lin-timeout %v must be positive", o.linLimit)
	}
	return validateWorkload(&o.wl)
}

// failover is what the demo observed of the crash.
type failover struct {
	victim    string
	killedAt  time.Duration // since the workload started
	probed    int           // entities of the victim probed
	recovered time.Duration // kill → every probed entity answered; 0 if not
	restarted time.Duration // since the workload started; 0 if not
	err       error
}

func runDemo(ctx context.Context, o demoOptions, stdout, stderr io.Writer) error {
	wall := time.Now()
	fmt.Fprintf(stdout, "bank demo: %d nodes, %s store, %d accounts × %d, %d clients for %v, zipf %.2f, seed %d\n",
		o.nodes, o.store, o.wl.Accounts, o.balance, o.wl.Concurrency, o.wl.Duration, o.wl.Zipf, o.wl.Seed)

	icfg := clustertest.Config{Nodes: o.nodes, Kinds: []actors.Kind{ledger.Account, ledger.Transfer}, StoreKind: o.store, PG: o.pg, UnsafeNoFsync: o.noFsync, Logger: logger(o.verbose, stderr)}
	if o.trace != "" {
		var w io.Writer
		if o.trace == "-" {
			sw := &syncWriter{w: stdout}
			stdout, w = sw, sw
		} else {
			f, err := os.Create(o.trace)
			if err != nil {
				return err
			}
			defer f.Close()
			w = f
		}
		tp, err := stdoutProvider(w, o.ratio)
		if err != nil {
			return err
		}
		defer func() { // after the cluster closed: its last spans are written
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			_ = tp.Shutdown(sctx)
		}()
		icfg.Tracing = func(string) trace.TracerProvider { return tp }
	}
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	if o.dash {
		icfg.AdminAddr = "127.0.0.1:0"
	}
	cl, err := clustertest.Start(sctx, icfg)
	cancel()
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
		defer cancel()
		_ = cl.Close(cctx)
	}()
	fmt.Fprintf(stdout, "cluster up in %v (etcd %s); opening accounts\n", time.Since(wall).Round(time.Millisecond), strings.Join(cl.Endpoints(), ","))
	if o.dash {
		printDashboards(stdout, cl)
	}

	octx, cancel := context.WithTimeout(ctx, 60*time.Second)
	_, err = workload.Open(octx, cl.Client(), o.wl.Accounts, o.balance, 64)
	cancel()
	if err != nil {
		return err
	}

	var (
		mu  sync.Mutex
		ops []history.Op
		hw  *history.Writer
	)
	if o.histPath != "" {
		if hw, err = history.Create(o.histPath); err != nil {
			return err
		}
	}
	record := func(op history.Op) error {
		mu.Lock()
		ops = append(ops, op)
		mu.Unlock()
		if hw != nil {
			return hw.Append(op)
		}
		return nil
	}

	runCtx, stopFaults := context.WithCancel(ctx)
	defer stopFaults()
	var fo failover
	faultsDone := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(faultsDone)
		if !o.noKill {
			fo = crashAndRestart(runCtx, cl, start, time.Duration(o.killAt*float64(o.wl.Duration)), o.wl.Accounts)
		}
	}()
	st, err := runWorkload(ctx, cl.Client(), o.wl, record, stderr, o.quiet)
	stopFaults()
	<-faultsDone
	if hw != nil {
		if cerr := hw.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return err
	}
	if fo.err != nil {
		return fo.err
	}

	fmt.Fprintf(stdout, "workload done; resolving %d unknown transfers, reading %d balances, checking\n",
		st.Transfers[history.Unknown], o.wl.Accounts)
	vctx, cancel := context.WithTimeout(ctx, o.linLimit+60*time.Second) // the search's bound, then the reads
	defer cancel()
	rep, err := workload.Verify(vctx, cl.Client(), ops, workload.VerifyConfig{Accounts: o.wl.Accounts,
		InitialBalance: o.balance, LinTimeout: o.linLimit, VisualizationPath: os.TempDir() + "/bank-demo-porcupine.html",
		Journal: cl.Store().(persistence.Journal)})
	if err != nil {
		return err
	}
	// The statement of the hottest account (Zipf: acct-000000).
	hot := history.AccountName(0)
	if b, err := bankpb.NewAccountServiceClient(cl.Client()).GetBalance(vctx, hot, &bankpb.GetBalance{}); err != nil {
		return fmt.Errorf("balance of %s: %w", hot, err)
	} else if s, err := ledger.BuildStatements(vctx, cl.Store().(persistence.Journal), hot, nil, nil); err != nil {
		return fmt.Errorf("statement of %s: %w", hot, err)
	} else {
		fmt.Fprintf(stdout, "\nSTATEMENT of %s (bank statement --account %s --limit 8)\n", hot, hot)
		if err := printStatement(stdout, statementOut(hot, b.Amount, s.Statement(hot), 8)); err != nil {
			return err
		}
	}
	printSummary(stdout, o, st, fo, rep, time.Since(wall))
	if !rep.OK() {
		for _, v := range rep.Violations {
			fmt.Fprintf(stdout, "  violation: %s %s %s: %s\n", v.Invariant, v.Account, v.ID, v.Message)
		}
		err = fmt.Errorf("demo: %w", errViolation)
	}
	if o.dash {
		fmt.Fprintln(stdout, "\nthe cluster stays up for the dashboard; Ctrl-C to stop")
		printDashboards(stdout, cl)
		<-ctx.Done()
	}
	return err
}

// printDashboards prints the dashboard URL of every running node.
func printDashboards(w io.Writer, cl *clustertest.Cluster) {
	urls := cl.AdminURLs()
	for i, n := range cl.Nodes() {
		switch {
		case i >= len(urls) || urls[i] == "":
		case n.Healthy():
			fmt.Fprintf(w, "  dashboard of %s: %s\n", n.ID(), urls[i])
		default:
			fmt.Fprintf(w, "  %s is down (crashed, and the run ended before its restart)\n", n.ID())
		}
	}
}

// crashAndRestart kills the last node at start+at, measures how long its
// entities take to answer again, then restarts it under the same ID.
func crashAndRestart(ctx context.Context, cl *clustertest.Cluster, start time.Time, at time.Duration, accounts int) failover {
	victimIdx := len(cl.Nodes()) - 1
	fo := failover{victim: cl.Node(victimIdx).ID()}
	t := time.NewTimer(time.Until(start.Add(at)))
	select {
	case <-ctx.Done():
		t.Stop()
		return fo
	case <-t.C:
	}
	// Up to 16 accounts whose shards the victim owns right now.
	var probes []string
	for i := 0; i < accounts && len(probes) < 16; i++ {
		if name := history.AccountName(i); cl.Owner(ledger.AccountRef(name)) == victimIdx {
			probes = append(probes, name)
		}
	}
	fo.probed = len(probes)
	killed := time.Now()
	if err := cl.Kill(ctx, victimIdx); err != nil {
		fo.err = fmt.Errorf("demo: killing %s: %w", fo.victim, err)
		return fo
	}
	fo.killedAt = killed.Sub(start)

	var wg sync.WaitGroup
	var worst atomic.Int64
	for _, acct := range probes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if op := workload.Read(ctx, cl.Client(), acct, 250*time.Millisecond); op.Outcome == history.OK {
					d := int64(time.Since(killed))
					for {
						w := worst.Load()
						if d <= w || worst.CompareAndSwap(w, d) {
							break
						}
					}
					return
				}
			}
		}()
	}
	wg.Wait()
	if ctx.Err() == nil {
		fo.recovered = time.Duration(worst.Load())
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := cl.Restart(rctx, victimIdx); err != nil {
		if ctx.Err() == nil {
			fo.err = fmt.Errorf("demo: restarting %s: %w", fo.victim, err)
		}
		return fo
	}
	fo.restarted = time.Since(start)
	return fo
}

func printSummary(w io.Writer, o demoOptions, st workload.Stats, fo failover, rep check.Report, wall time.Duration) {
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/1e6) }
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\nSUMMARY\t")
	fmt.Fprintf(tw, "transfers\tok %d, rejected %d, unknown %d\n",
		st.Transfers[history.OK], st.Transfers[history.Rejected], st.Transfers[history.Unknown])
	if n := st.Transfers[history.Unknown]; n > 0 {
		fmt.Fprintf(tw, "unknown resolved\tok %d, rejected %d, still unknown %d\n",
			rep.Resolved[history.OK], rep.Resolved[history.Rejected], rep.Resolved[history.Unknown])
	}
	if n := st.Reads[history.OK] + st.Reads[history.Unknown]; n > 0 {
		fmt.Fprintf(tw, "balance reads\tok %d, unknown %d\n", st.Reads[history.OK], st.Reads[history.Unknown])
	}
	fmt.Fprintf(tw, "throughput\t%.0f transfers/s over %v\n", st.Throughput, st.Elapsed.Round(time.Millisecond))
	fmt.Fprintf(tw, "latency\tp50 %s, p99 %s\n", ms(st.P50), ms(st.P99))
	switch {
	case o.noKill:
		fmt.Fprintf(tw, "failover\tno node crashed (--no-kill)\n")
	case fo.killedAt == 0:
		fmt.Fprintf(tw, "failover\tthe run ended before the crash\n")
	default:
		fmt.Fprintf(tw, "crash\t%s killed at %.1fs\n", fo.victim, fo.killedAt.Seconds())
		if fo.recovered > 0 {
			fmt.Fprintf(tw, "failover\t%s: all %d probed entities of %s answered again\n", ms(fo.recovered), fo.probed, fo.victim)
		} else {
			fmt.Fprintf(tw, "failover\tnot observed before the run ended\n")
		}
		if fo.restarted > 0 {
			fmt.Fprintf(tw, "restart\t%s restarted at %.1fs\n", fo.victim, fo.restarted.Seconds())
		}
	}
	fmt.Fprintf(tw, "linearizability search\t%v\n", rep.LinearizabilityElapsed.Round(time.Millisecond))
	fmt.Fprintln(tw, "INVARIANTS\t")
	for _, inv := range rep.Invariants {
		mark := "✗ FAIL"
		switch inv.Status {
		case check.StatusPass:
			mark = "✓ pass"
		case check.StatusSkipped:
			mark = "- skipped"
		case check.StatusUnknown:
			mark = "? unknown"
			if inv.Name == check.InvLinearizable {
				mark += " (the search ran out of time: raise --lin-timeout)"
			}
		}
		line := fmt.Sprintf("  %s\t%s", inv.Name, mark)
		if inv.Violations > 0 {
			line += fmt.Sprintf(" (%d violations)", inv.Violations)
		}
		fmt.Fprintln(tw, line)
	}
	verdict := "PASS: every invariant holds"
	if !rep.OK() {
		verdict = "FAIL: an invariant does not hold"
	}
	fmt.Fprintf(tw, "result\t%s (wall time %v)\n", verdict, wall.Round(100*time.Millisecond))
	tw.Flush()
}
