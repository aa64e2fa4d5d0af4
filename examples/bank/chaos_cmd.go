package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/ordo-actors/ordo/robustness/chaos"
	"github.com/spf13/cobra"
)

func newChaosCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "chaos [--seed X] [--duration D] [--nodes 3] [--etcd-members 3] [--store etcd|postgres] [--pg URL] [--faults LIST] [--report FILE]",
		Short: "Run a multi-process bank under seeded faults (kill, pause, partition, etcd, postgres) and check its history",
		Long: `chaos starts real processes of this binary (bank etcd members, bank nodes,
one bank load), injects faults on a schedule drawn from the seed (SIGKILL and
restart a node; SIGSTOP a node past its lease, then SIGCONT; cut a node from
etcd through TCP proxies; kill and restart an etcd member; restart
PostgreSQL), heals everything, runs the bank check on the history and writes
a JSON report. It exits 1 on any violation. See 'bank chaos -h' for flags.`,
		DisableFlagParsing: true,
		Args:               cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			self, err := os.Executable()
			if err != nil {
				return fmt.Errorf("chaos: locating the bank binary: %w", err)
			}
			err = chaos.Main(cmd.Context(), args, cmd.OutOrStdout(), self)
			if errors.Is(err, chaos.ErrUsage) {
				return usageError{err}
			}
			return err
		},
	}
}
