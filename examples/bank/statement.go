package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/ordo-actors/ordo/cluster"
	"github.com/ordo-actors/ordo/examples/bank/ledger"
	"github.com/ordo-actors/ordo/persistence"
	etcdstore "github.com/ordo-actors/ordo/persistence/etcdstore"
	pgstore "github.com/ordo-actors/ordo/persistence/pgstore"
	"github.com/ordo-actors/ordo/proto/bankpb"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// storeFlags name the cluster's store, for the commands that read the
// accounts' journals (statement, check): the flags of bank node.
type storeFlags struct {
	store, pg, pgSchema string
}

func (f *storeFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.store, "store", "etcd", "the cluster's store (bank node --store): etcd (under --prefix, at --etcd) or postgres")
	fs.StringVar(&f.pg, "pg", "", "PostgreSQL URL for --store postgres (default $ORDO_PG_URL)")
	fs.StringVar(&f.pgSchema, "pg-schema", pgstore.DefaultSchema, "PostgreSQL schema of the store's tables")
}

func (f *storeFlags) validate() error {
	if f.pg == "" {
		f.pg = os.Getenv("ORDO_PG_URL")
	}
	switch {
	case f.store != "etcd" && f.store != "postgres":
		return usagef("--store %q: want etcd or postgres", f.store)
	case f.store == "postgres" && f.pg == "":
		return usagef("--store postgres needs --pg URL (or ORDO_PG_URL)")
	}
	return nil
}

// openJournal opens the cluster's store for reading the accounts'
// journals; closeFn releases it.
func (f *storeFlags) openJournal(ctx context.Context, cf *clientFlags) (j persistence.Journal, closeFn func(), err error) {
	switch f.store {
	case "postgres":
		sc := pgstore.DefaultConfig()
		sc.URL, sc.Schema = f.pg, f.pgSchema
		st, err := pgstore.Open(ctx, sc)
		if err != nil {
			return nil, nil, err
		}
		return st, func() { st.Close() }, nil
	default:
		ec, err := cf.sec.etcdClient(cf.etcd)
		if err != nil {
			return nil, nil, err
		}
		cli, err := clientv3.New(ec)
		if err != nil {
			return nil, nil, fmt.Errorf("etcd store: %w", err)
		}
		sc := etcdstore.DefaultConfig()
		sc.Prefix = cf.prefix + "/store/"
		st, err := etcdstore.New(cli, sc)
		if err != nil {
			cli.Close()
			return nil, nil, err
		}
		return st, func() { st.Close(); cli.Close() }, nil
	}
}

// statementJSON is how bank statement prints a statement.
type statementJSON struct {
	Account string `json:"account"`
	// Balance is the account's balance, as the account answers it.
	Balance int64 `json:"balance"`
	// StatementBalance is the balance after the statement's last line.
	StatementBalance int64 `json:"statement_balance"`
	// Lines counts the statement's lines; Shown are the last of them.
	Lines int           `json:"lines"`
	Shown []ledger.Line `json:"shown"`
}

func newStatementCmd() *cobra.Command {
	var (
		cf      clientFlags
		sf      storeFlags
		account string
		limit   int
		output  string
	)
	cmd := &cobra.Command{
		Use:   "statement --etcd E --account A [--limit N] [--output table|json] [--store etcd|postgres]",
		Short: "Print an account's statement: its money events with running balances, from its journal",
		Long: `statement prints the statement of one account: every money event of its journal
(opened, deposit, withdrawal, debit, credit, refund, with their transfer IDs),
each with the balance after it, built by a projection of the account's journal
read from the cluster's store (--store, as bank node's), and the balance the
account itself answers. --limit shows the last N lines only.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cf.validate(); err != nil {
				return err
			}
			if err := sf.validate(); err != nil {
				return err
			}
			if err := checkAccountName("account", account); err != nil {
				return err
			}
			if limit < 0 {
				return usagef("--limit %d must not be negative", limit)
			}
			if output != "table" && output != "json" {
				return usagef("--output %q: want table or json", output)
			}
			return cf.withClient(cmd, func(ctx context.Context, c *cluster.Client) error {
				b, err := bankpb.NewAccountServiceClient(c).GetBalance(ctx, account, &bankpb.GetBalance{})
				if err != nil {
					return fmt.Errorf("balance of %s: %w", account, err)
				}
				j, closeJ, err := sf.openJournal(ctx, &cf)
				if err != nil {
					return err
				}
				defer closeJ()
				s, err := ledger.BuildStatements(ctx, j, account, nil, nil)
				if err != nil {
					return fmt.Errorf("statement of %s: %w", account, err)
				}
				st := statementOut(account, b.Amount, s.Statement(account), limit)
				if output == "json" {
					return printJSON(cmd.OutOrStdout(), st)
				}
				return printStatement(cmd.OutOrStdout(), st)
			})
		},
	}
	cf.register(cmd.Flags())
	sf.register(cmd.Flags())
	cmd.Flags().StringVar(&account, "account", "", "account name, e.g. acct-000042 (required)")
	cmd.Flags().IntVar(&limit, "limit", 0, "show the last N lines only (0: all)")
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table or json")
	return cmd
}

func statementOut(account string, balance int64, lines []ledger.Line, limit int) statementJSON {
	st := statementJSON{Account: account, Balance: balance, Lines: len(lines), Shown: lines}
	if n := len(lines); n > 0 {
		st.StatementBalance = lines[n-1].Balance
	}
	if limit > 0 && len(lines) > limit {
		st.Shown = lines[len(lines)-limit:]
	}
	if st.Shown == nil {
		st.Shown = []ledger.Line{}
	}
	return st
}

// printStatement prints st as a table.
func printStatement(w io.Writer, st statementJSON) error {
	idw := len("TRANSFER")
	for _, l := range st.Shown {
		idw = max(idw, len(l.TransferID))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%8s  %-10s  %-*s  %10s  %12s\n", "SEQ", "TYPE", idw, "TRANSFER", "AMOUNT", "BALANCE")
	if n := st.Lines - len(st.Shown); n > 0 {
		fmt.Fprintf(&b, "%8s  (%d earlier lines)\n", "…", n)
	}
	for _, l := range st.Shown {
		fmt.Fprintf(&b, "%8d  %-10s  %-*s  %+10d  %12d\n", l.Seq, l.Type, idw, l.TransferID, l.Amount, l.Balance)
	}
	note := ""
	if st.Balance != st.StatementBalance {
		note = " (they differ: money moved between the two reads, or the statement is wrong)"
	}
	fmt.Fprintf(&b, "%s: %d lines; statement balance %d, account balance %d%s\n",
		st.Account, st.Lines, st.StatementBalance, st.Balance, note)
	_, err := io.WriteString(w, b.String())
	return err
}
