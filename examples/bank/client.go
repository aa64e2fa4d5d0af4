package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/cluster"
	"github.com/ordo-actors/ordo/examples/bank/ledger"
	"github.com/ordo-actors/ordo/proto/bankpb"
	"github.com/ordo-actors/ordo/robustness/history"
	"github.com/ordo-actors/ordo/robustness/workload"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
)

func dial(ctx context.Context, f *clientFlags, stderr io.Writer) (*cluster.Client, error) {
	cfg := cluster.DefaultClientConfig()
	cfg.Prefix = f.prefix
	cfg.Logger = logger(f.verbose, stderr)
	var err error
	if cfg.TLS, cfg.Insecure, err = f.sec.transportTLS(); err != nil {
		return nil, err
	}
	if cfg.Insecure && !f.verbose {
		fmt.Fprintln(stderr, "bank: warning: --insecure: calls travel in plaintext")
	}
	if cfg.EtcdTLS, cfg.EtcdUsername, cfg.EtcdPassword, err = f.sec.etcdSecurity(); err != nil {
		return nil, err
	}
	dctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	c, err := cluster.Dial(dctx, f.etcd, cfg)
	if err != nil {
		return nil, fmt.Errorf("connecting to the cluster at %s: %w", strings.Join(f.etcd, ","), err)
	}
	return c, nil
}

// withClient dials the cluster, runs f with a context bounded by
// --timeout, and closes the client.
func (f *clientFlags) withClient(cmd *cobra.Command, fn func(ctx context.Context, c *cluster.Client) error) error {
	c, err := dial(cmd.Context(), f, cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(cmd.Context(), f.timeout)
	defer cancel()
	return fn(ctx, c)
}

func printJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

func newOpenCmd() *cobra.Command {
	var (
		cf       clientFlags
		accounts int
		balance  int64
		workers  int
	)
	cmd := &cobra.Command{
		Use:   "open --etcd ENDPOINTS --accounts N --balance B",
		Short: "Open accounts acct-000000 … acct-(N-1) with balance B (idempotent)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cf.validate(); err != nil {
				return err
			}
			if err := checkAccounts(accounts); err != nil {
				return err
			}
			if balance < 0 {
				return usagef("--balance %d must not be negative", balance)
			}
			if workers < 1 {
				return usagef("--concurrency %d: want at least 1", workers)
			}
			c, err := dial(cmd.Context(), &cf, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), cf.timeout+time.Duration(accounts)*10*time.Millisecond)
			defer cancel()
			start := time.Now()
			mismatched, err := workload.Open(ctx, c, accounts, balance, workers)
			if err != nil {
				return err
			}
			return printJSON(cmd.OutOrStdout(), map[string]any{"accounts": accounts, "balance": balance,
				"already_open_with_other_balance": mismatched, "elapsed": time.Since(start).String()})
		},
	}
	cf.register(cmd.Flags())
	cmd.Flags().IntVar(&accounts, "accounts", 0, "number of accounts (required)")
	cmd.Flags().Int64Var(&balance, "balance", 1000, "initial balance of each account, in minor units")
	cmd.Flags().IntVar(&workers, "concurrency", 32, "concurrent open calls")
	return cmd
}

// transferJSON is how the client commands print a transfer.
type transferJSON struct {
	ID     string `json:"id"`
	From   string `json:"from"`
	To     string `json:"to"`
	Amount int64  `json:"amount"`
	Status string `json:"status"`
	Error  string `json:"error,omitempty"`
	// Start is when a scheduled transfer starts (or started), RFC 3339.
	Start string `json:"start,omitempty"`
}

func transferOut(id string, st *bankpb.TransferState) transferJSON {
	t := transferJSON{ID: id, From: st.From, To: st.To, Amount: st.Amount, Status: workload.StatusName(st.Status)}
	if st.Error != "" {
		t.Error = workload.Reason(st.Error)
	}
	if st.StartUnixNano != 0 {
		t.Start = time.Unix(0, st.StartUnixNano).UTC().Format(time.RFC3339Nano)
	}
	return t
}

func newTransferCmd() *cobra.Command {
	var (
		cf       clientFlags
		id       string
		from, to string
		amount   int64
		at       string
		in       time.Duration
	)
	cmd := &cobra.Command{
		Use:   "transfer --etcd E --id ID --from A --to B --amount N [--at RFC3339 | --in DURATION]",
		Short: "Submit one transfer (idempotent by ID) and wait for its final status, or schedule it for later",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cf.validate(); err != nil {
				return err
			}
			if id == "" {
				return usagef("--id is required")
			}
			if err := checkAccountName("from", from); err != nil {
				return err
			}
			if err := checkAccountName("to", to); err != nil {
				return err
			}
			if from == to {
				return usagef("--from and --to are both %s", from)
			}
			if amount <= 0 {
				return usagef("--amount %d must be positive", amount)
			}
			if err := ledger.TransferRef(from, id).Validate(); err != nil {
				return usagef("--id %q: %v", id, err)
			}
			var start time.Time
			switch {
			case at != "" && cmd.Flags().Changed("in"):
				return usagef("--at and --in exclude each other")
			case at != "":
				var err error
				if start, err = time.Parse(time.RFC3339Nano, at); err != nil {
					return usagef("--at %q: want an RFC 3339 time such as 2030-01-02T15:04:05Z: %v", at, err)
				}
				if start.UnixNano() <= 0 {
					return usagef("--at %q is not after 1970", at)
				}
			case cmd.Flags().Changed("in"):
				if in <= 0 {
					return usagef("--in %v must be positive", in)
				}
				start = time.Now().Add(in)
			}
			return cf.withClient(cmd, func(ctx context.Context, c *cluster.Client) error {
				var st *bankpb.TransferState
				var err error
				if start.IsZero() {
					st, err = ledger.SubmitAndWait(ctx, c, id, from, to, amount)
				} else {
					st, err = ledger.Schedule(ctx, c, id, from, to, amount, start)
				}
				if err != nil {
					return fmt.Errorf("transfer %s: %w", id, err)
				}
				return printJSON(cmd.OutOrStdout(), transferOut(id, st))
			})
		},
	}
	cf.register(cmd.Flags())
	cmd.Flags().StringVar(&id, "id", "", "transfer ID; with --from it names the transfer, and resubmitting it never applies it twice (required)")
	cmd.Flags().StringVar(&from, "from", "", "source account (required)")
	cmd.Flags().StringVar(&to, "to", "", "destination account (required)")
	cmd.Flags().Int64Var(&amount, "amount", 0, "amount in minor units, > 0 (required)")
	cmd.Flags().StringVar(&at, "at", "", "schedule the transfer to start at this RFC 3339 time instead of now, and print its status (scheduled) at once")
	cmd.Flags().DurationVar(&in, "in", 0, "schedule the transfer to start this long from now (see --at)")
	return cmd
}

func newBalanceCmd() *cobra.Command {
	var (
		cf      clientFlags
		account string
	)
	cmd := &cobra.Command{
		Use:   "balance --etcd E --account A",
		Short: "Read one account's balance",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cf.validate(); err != nil {
				return err
			}
			if err := checkAccountName("account", account); err != nil {
				return err
			}
			return cf.withClient(cmd, func(ctx context.Context, c *cluster.Client) error {
				b, err := bankpb.NewAccountServiceClient(c).GetBalance(ctx, account, &bankpb.GetBalance{})
				if err != nil {
					return fmt.Errorf("balance of %s: %w", account, err)
				}
				return printJSON(cmd.OutOrStdout(), map[string]any{"account": account, "balance": b.Amount})
			})
		},
	}
	cf.register(cmd.Flags())
	cmd.Flags().StringVar(&account, "account", "", "account name, e.g. acct-000042 (required)")
	return cmd
}

func newTransferStatusCmd() *cobra.Command {
	var (
		cf       clientFlags
		id, from string
	)
	cmd := &cobra.Command{
		Use:   "transfer-status --etcd E --id ID --from A",
		Short: "Read a transfer's status (a transfer is named by its source account and its ID); a scheduled one shows scheduled until it starts",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cf.validate(); err != nil {
				return err
			}
			if id == "" {
				return usagef("--id is required")
			}
			if err := checkAccountName("from", from); err != nil {
				return err
			}
			if err := ledger.TransferRef(from, id).Validate(); err != nil {
				return usagef("--id %q: %v", id, err)
			}
			return cf.withClient(cmd, func(ctx context.Context, c *cluster.Client) error {
				st, err := bankpb.NewTransferServiceClient(c).GetTransfer(ctx, ledger.TransferID(from, id), &bankpb.GetTransfer{})
				if err != nil {
					return fmt.Errorf("transfer %s: %w", id, err)
				}
				return printJSON(cmd.OutOrStdout(), transferOut(id, st))
			})
		},
	}
	cf.register(cmd.Flags())
	cmd.Flags().StringVar(&id, "id", "", "transfer ID (required)")
	cmd.Flags().StringVar(&from, "from", "", "the transfer's source account (required)")
	return cmd
}

// workloadFlags registers the workload's flags on cmd.
func workloadFlags(cmd *cobra.Command, w *workload.Config) {
	def := workload.DefaultConfig()
	fs := cmd.Flags()
	fs.IntVar(&w.Accounts, "accounts", def.Accounts, "number of accounts")
	fs.DurationVar(&w.Duration, "duration", def.Duration, "how long new operations start")
	fs.IntVar(&w.Concurrency, "concurrency", def.Concurrency, "concurrent clients")
	fs.Float64Var(&w.Zipf, "zipf", def.Zipf, "Zipf exponent of account choice (acct-000000 hottest); 0 = uniform")
	fs.Int64Var(&w.MaxAmount, "max-amount", def.MaxAmount, "largest transfer amount (drawn in 1..max)")
	fs.Float64Var(&w.ReadRatio, "read-ratio", def.ReadRatio, "fraction of operations that are balance reads (0..1)")
	fs.Uint64Var(&w.Seed, "seed", 0, "random seed; 0 picks one from the clock (printed)")
	fs.DurationVar(&w.OpTimeout, "op-timeout", def.OpTimeout, "per-operation timeout; past it the outcome is recorded as unknown")
}

func validateWorkload(w *workload.Config) error {
	if err := checkAccounts(w.Accounts); err != nil {
		return err
	}
	if w.Seed == 0 {
		w.Seed = uint64(time.Now().UnixNano())
	}
	if err := w.Validate(); err != nil {
		return usageError{err}
	}
	return nil
}

// newBar returns a progress bar over d, advanced by a ticker, that shows
// what describe says; stop finishes it.
func newBar(w io.Writer, d time.Duration, describe func() string) (stop func()) {
	const step = 100 * time.Millisecond
	total := int64(d / step)
	bar := progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetWidth(30),
		progressbar.OptionShowElapsedTimeOnFinish(),
		progressbar.OptionSetPredictTime(false),
		progressbar.OptionThrottle(200*time.Millisecond),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionSetDescription(describe()),
	)
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(step)
		defer t.Stop()
		var n int64
		for {
			select {
			case <-done:
				return
			case <-t.C:
				n++
				bar.Describe(describe())
				_ = bar.Set64(min(n, total))
			}
		}
	}()
	return func() {
		close(done)
		<-exited
		_ = bar.Finish()
		fmt.Fprintln(w)
	}
}

func newLoadCmd() *cobra.Command {
	var (
		cf       clientFlags
		wl       workload.Config
		histPath string
		quiet    bool
	)
	cmd := &cobra.Command{
		Use:   "load --etcd E --accounts N --duration D --concurrency C --history FILE",
		Short: "Run the transfer workload as a client-only process and write the history",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cf.validate(); err != nil {
				return err
			}
			if histPath == "" {
				return usagef("--history is required")
			}
			if err := validateWorkload(&wl); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "bank load: seed %d\n", wl.Seed)
			c, err := dial(cmd.Context(), &cf, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			defer c.Close()
			hw, err := history.Create(histPath)
			if err != nil {
				return err
			}
			st, err := runWorkload(cmd.Context(), c, wl, hw.Append, cmd.ErrOrStderr(), quiet)
			if cerr := hw.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
			return printJSON(cmd.OutOrStdout(), struct {
				History string `json:"history"`
				Seed    uint64 `json:"seed"`
				workload.Stats
			}{histPath, wl.Seed, st})
		},
	}
	cf.register(cmd.Flags())
	workloadFlags(cmd, &wl)
	cmd.Flags().StringVar(&histPath, "history", "", "file to write the history to, JSON lines (required)")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "no progress bar")
	return cmd
}

// runWorkload runs wl with a progress bar on w (unless quiet).
func runWorkload(ctx context.Context, inv actors.Invoker, wl workload.Config, record workload.Record, w io.Writer, quiet bool) (workload.Stats, error) {
	var counts opCounts
	stop := func() {}
	if !quiet {
		stop = newBar(w, wl.Duration, counts.String)
	}
	st, err := workload.Run(ctx, inv, wl, record, counts.add)
	stop()
	return st, err
}

func newCheckCmd() *cobra.Command {
	var (
		cf           clientFlags
		sf           storeFlags
		noStatements bool
		accounts     int
		balance      int64
		histPath     string
		reportPath   string
		linTimeout   time.Duration
		resolveFor   time.Duration
	)
	cmd := &cobra.Command{
		Use:   "check --etcd E --accounts N --balance B --history FILE [--report FILE] [--store etcd|postgres]",
		Short: "Resolve unknown transfers, read every balance and statement and check the history; exit 1 on a violation",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cf.validate(); err != nil {
				return err
			}
			if err := sf.validate(); err != nil {
				return err
			}
			if err := checkAccounts(accounts); err != nil {
				return err
			}
			if balance < 0 {
				return usagef("--balance %d must not be negative", balance)
			}
			if histPath == "" {
				return usagef("--history is required")
			}
			if resolveFor <= 0 {
				return usagef("--resolve-timeout %v must be positive", resolveFor)
			}
			ops, err := history.ReadFile(histPath)
			if err != nil {
				return fmt.Errorf("reading the history: %w", err)
			}
			c, err := dial(cmd.Context(), &cf, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			defer c.Close()
			viz := ""
			if reportPath != "" {
				viz = strings.TrimSuffix(reportPath, filepath.Ext(reportPath)) + ".html"
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), resolveFor)
			defer cancel()
			vcfg := workload.VerifyConfig{Accounts: accounts, InitialBalance: balance,
				Attempt: cf.timeout, LinTimeout: linTimeout, VisualizationPath: viz}
			if !noStatements {
				j, closeJ, err := sf.openJournal(ctx, &cf)
				if err != nil {
					return err
				}
				defer closeJ()
				vcfg.Journal = j
			}
			rep, err := workload.Verify(ctx, c, ops, vcfg)
			if err != nil {
				return err
			}
			return reportCheck(cmd.OutOrStdout(), rep, reportPath)
		},
	}
	cf.register(cmd.Flags())
	sf.register(cmd.Flags())
	cmd.Flags().BoolVar(&noStatements, "no-statements", false, "do not read the accounts' statements from the store (the statements invariant is skipped)")
	cmd.Flags().IntVar(&accounts, "accounts", 0, "number of accounts the bank was opened with (required)")
	cmd.Flags().Int64Var(&balance, "balance", 1000, "initial balance of each account")
	cmd.Flags().StringVar(&histPath, "history", "", "history file written by bank load (required)")
	cmd.Flags().StringVar(&reportPath, "report", "", "also write the JSON report here (and porcupine's HTML next to it on a linearizability failure)")
	cmd.Flags().DurationVar(&linTimeout, "lin-timeout", 0, "bound on the linearizability search (0: the checker's default)")
	cmd.Flags().DurationVar(&resolveFor, "resolve-timeout", 5*time.Minute, "bound on resolving unknown transfers and reading balances")
	return cmd
}

// reportCheck prints rep as JSON, writes it to path if set, and returns
// errViolation unless it is OK.
func reportCheck(w io.Writer, rep interface{ OK() bool }, path string) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%s\n", b)
	if path != "" {
		if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
			return fmt.Errorf("writing the report: %w", err)
		}
	}
	if !rep.OK() {
		return fmt.Errorf("check: %w", errViolation)
	}
	return nil
}
