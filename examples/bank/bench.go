package main

import (
	"errors"
	"flag"
	"os"
	"strings"

	"github.com/ordo-actors/ordo/lab"
	"github.com/ordo-actors/ordo/lab/ordolab"
	"github.com/spf13/cobra"
)

func newBenchCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "bench [lab flags]",
		Short: "Run the lock lab with ordo as one more approach (ordo, ordo-mem, and ordo-pg with --pg)",
		Long: `bench runs the lock lab (package lab) on one workload: the
lock-based approaches it selects (--approaches, default all) and ordo on an
in-process 3-node cluster ("ordo": the etcd store; "ordo-pg": the PostgreSQL
store, added when --pg or ORDO_PG_URL is set; "ordo-mem": the in-memory
store, which keeps nothing durable: not an alternative to a lock, but the
runtime's own cost, the ceiling of the durable stores). Every flag is the
lab's; see 'bank bench -h'. Example, ordo and the etcd lock only, with
pauses:

  go run ./examples/bank bench --approaches etcd,ordo --duration 10s --stall-prob 0.02 --ttl 1s --stall 3s

Per approach it reports transfers/s, p50 and p99 latency and the machine's
CPU-seconds per 1,000 transfers (every process, the servers too, from
/proc/stat; n/a off Linux; "idle busy" shows how busy other processes kept
the machine just before), for the approaches that keep their data in
PostgreSQL the bytes of write-ahead log the server wrote per transfer, with
ratios for the --compare pairs (default
ordo-pg:pg-row,ordo:etcd). --concurrency takes a list: every approach runs
at each, e.g.

  go run ./examples/bank bench --approaches pg-row,ordo-pg,ordo,etcd --zipf 1.1 --concurrency 32,256 --pg $PG

For ordo, a pause freezes the node owning the transfer's source account
(clustertest.Faults.Pause) right after the transfer was submitted, so the pause
outlasts that node's lease exactly as it outlasts a lock's TTL elsewhere.`,
		DisableFlagParsing: true,
		Args:               cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			builders := []lab.Builder{ordolab.Builder("ordo", "etcd"), ordolab.Builder("ordo-mem", "memory")}
			if pgGiven(args) {
				builders = append(builders, ordolab.Builder("ordo-pg", "postgres"))
			}
			err := lab.Main(cmd.Context(), args, cmd.OutOrStdout(), builders...)
			var ue *lab.UsageError
			switch {
			case err == nil, errors.Is(err, flag.ErrHelp):
				return nil
			case errors.As(err, &ue):
				return usageError{err}
			}
			return err
		},
	}
}

// pgGiven reports whether the lab will have a PostgreSQL URL.
func pgGiven(args []string) bool {
	for i, a := range args {
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "pg" {
			continue
		}
		if hasVal {
			return val != ""
		}
		return i+1 < len(args) && args[i+1] != ""
	}
	return os.Getenv("ORDO_PG_URL") != ""
}
