// Command bank is ordo's bank example: accounts and exactly-once transfer
// sagas (package ledger) on an ordo cluster.
//
//	go run ./examples/bank demo             # everything in one process, then the check
//	go run ./examples/bank etcd …           # one etcd member (etcd's own server code)
//	go run ./examples/bank certs …          # a CA and the certificates of a cluster's mutual TLS
//	go run ./examples/bank node …           # one ordo node
//	go run ./examples/bank open|transfer|balance|transfer-status …
//	go run ./examples/bank statement …      # an account's events with running balances
//
// It also runs the tools that test the bank, which live outside it:
//
//	go run ./examples/bank load …           # the workload, writing a history (robustness/workload)
//	go run ./examples/bank check …          # resolve, read balances, check the history (robustness/check)
//	go run ./examples/bank chaos …          # real processes under seeded faults (robustness/chaos)
//	go run ./examples/bank soak …           # a long chaos run sampling every process (robustness/soak)
//	go run ./examples/bank bench …          # the lock lab with ordo as one more approach (lab)
//
// Exit codes: 0 success, 1 failure (including a check that found a
// violation), 2 bad usage (flags, arguments).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/ordo-actors/ordo/placement"
	"github.com/ordo-actors/ordo/robustness/history"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// usageError marks an error as bad usage (exit 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// errViolation is returned by commands whose check found a violation
// (exit 1); what was violated has been printed already.
var errViolation = errors.New("invariant violated")

// gcPercent is the bank command's garbage collector target (GOGC) unless
// the environment sets GOGC: a node's live heap is small and its garbage
// is mostly short-lived messages, so collecting at 5× the live heap
// instead of Go's default 2× cuts the collector's CPU by about three
// quarters (it was a fifth of a node's CPU under load) for a few tens of
// MB of memory. A service embedding ordo makes the same choice for itself.
const gcPercent = 400

func main() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(gcPercent)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes the command line args and returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRoot(stdout, stderr)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	return exitCode(err, stderr)
}

func exitCode(err error, stderr io.Writer) int {
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, errViolation):
		fmt.Fprintln(stderr, "bank:", err)
		return exitFailure
	}
	var ue usageError
	if errors.As(err, &ue) || isCobraUsage(err) {
		fmt.Fprintln(stderr, "bank:", err)
		fmt.Fprintln(stderr, "Run 'bank --help' or 'bank <command> --help' for usage.")
		return exitUsage
	}
	fmt.Fprintln(stderr, "bank:", err)
	return exitFailure
}

// isCobraUsage recognises the usage errors cobra makes itself (unknown
// command, missing required flag).
func isCobraUsage(err error) bool {
	s := err.Error()
	return strings.HasPrefix(s, "unknown command") || strings.HasPrefix(s, "required flag") ||
		strings.HasPrefix(s, "unknown flag") || strings.HasPrefix(s, "unknown shorthand flag")
}

func newRoot(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "bank",
		Short:         "ordo's bank example: accounts and exactly-once transfers on an ordo cluster",
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return usagef("a command is required (see bank --help)")
		},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(newDemoCmd(), newEtcdCmd(), newCertsCmd(), newNodeCmd(), newOpenCmd(), newTransferCmd(), newBalanceCmd(),
		newTransferStatusCmd(), newStatementCmd(), newLoadCmd(), newCheckCmd(), newBenchCmd(), newChaosCmd(), newSoakCmd(),
		newLatencyCmd())
	for _, c := range root.Commands() {
		if c.Args == nil {
			c.Args = noArgs
		}
	}
	return root
}

func noArgs(cmd *cobra.Command, args []string) error {
	switch {
	case len(args) > 0 && !cmd.HasParent():
		return usagef("unknown command %q", args[0])
	case len(args) > 0:
		return usagef("%s: unexpected arguments %q", cmd.Name(), args)
	}
	return nil
}

// clientFlags are the flags every client-only command shares.
type clientFlags struct {
	etcd    []string
	prefix  string
	timeout time.Duration
	verbose bool
	sec     secFlags
}

func (f *clientFlags) register(fs *pflag.FlagSet) {
	f.sec.register(fs)
	fs.StringSliceVar(&f.etcd, "etcd", nil, "etcd client endpoints, comma-separated (required)")
	fs.StringVar(&f.prefix, "prefix", placement.DefaultConfig().Prefix, "the cluster's etcd key prefix")
	fs.DurationVar(&f.timeout, "timeout", 30*time.Second, "bound on connecting and on each call")
	fs.BoolVarP(&f.verbose, "verbose", "v", false, "log the client's messages to stderr")
}

func (f *clientFlags) validate() error {
	if len(f.etcd) == 0 {
		return usagef("--etcd is required (e.g. --etcd http://127.0.0.1:2379)")
	}
	if f.timeout <= 0 {
		return usagef("--timeout %v must be positive", f.timeout)
	}
	if _, _, err := f.sec.transportTLS(); err != nil {
		return err
	}
	_, _, _, err := f.sec.etcdSecurity()
	return err
}

func logger(verbose bool, w io.Writer) *slog.Logger {
	if !verbose {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

func checkAccountName(flag, name string) error {
	if _, err := history.ParseAccount(name); err != nil {
		return usagef("--%s %q: want an account name like acct-000042", flag, name)
	}
	return nil
}

func checkAccounts(n int) error {
	if n < 1 || n > history.MaxAccounts {
		return usagef("--accounts %d: want 1..%d", n, history.MaxAccounts)
	}
	return nil
}
