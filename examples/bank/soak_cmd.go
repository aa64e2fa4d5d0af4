package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/ordo-actors/ordo/robustness/soak"
	"github.com/spf13/cobra"
)

func newSoakCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "soak [--duration 30m] [--store etcd|postgres] [--pg URL] [--seed X] [--fault-interval D] [--sample-every D] [--faults LIST] [--dir DIR]",
		Short: "Run the multi-process bank under steady load and periodic faults for a long time, and fail if a resource grows without bound",
		Long: `soak is a long bank chaos run: real processes of this binary under a steady
load, one fault every --fault-interval (kill, pause, partition, etcd member
kill, PostgreSQL restart, in turn), while every node's RSS, Go live heap, goroutines, open
file descriptors, active entities and dedup entries, the etcd members' RSS,
descriptors and database size, the accounts' pending Forgets and the etcd
key count are sampled every --sample-every. It ends with bank check and
writes soak.json, soak.png (every series, faults marked, client p50/p99 per
interval) and soak.md into the run directory. It exits 1 unless the check
passes, every Forget is applied and no judged series grows over the last
part of the load (the rule is in soak.md). See 'bank soak -h' for flags.`,
		DisableFlagParsing: true,
		Args:               cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			self, err := os.Executable()
			if err != nil {
				return fmt.Errorf("soak: locating the bank binary: %w", err)
			}
			err = soak.Main(cmd.Context(), args, cmd.OutOrStdout(), self)
			if errors.Is(err, soak.ErrUsage) {
				return usageError{err}
			}
			return err
		},
	}
}
