package chaos

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Config configures a chaos run. Start from DefaultConfig.
type Config struct {
	// Seed draws the fault schedule; the same seed gives the same schedule
	// (and the same load seed).
	Seed uint64
	// Duration is how long the load runs; faults happen within it.
	Duration time.Duration
	// Nodes is the number of `bank node` processes.
	Nodes int
	// EtcdMembers is the number of `bank etcd` members.
	EtcdMembers int
	// Store is the nodes' store: "etcd" or "postgres".
	Store string
	// PGURL is the PostgreSQL URL for the postgres store. Run connects to
	// it to drop and recreate PGDatabase, which the nodes then use.
	PGURL string
	// PGDatabase is the database each run recreates for its nodes.
	PGDatabase string
	// Kinds are the faults to inject.
	Kinds []Kind
	// ReportPath is where the JSON report is written; "" writes it only
	// into the run directory.
	ReportPath string
	// Bank is the path of the bank binary run as every child process.
	Bank string
	// Dir is the run directory (logs, etcd data, history, reports). ""
	// creates one under the system temporary directory. It is kept.
	Dir string
	// Accounts and Balance shape the bank.
	Accounts int
	Balance  int64
	// Concurrency is the load's number of clients.
	Concurrency int
	// ReadRatio is the fraction of the load's operations that are balance
	// reads (checked for linearizability with the transfers).
	ReadRatio float64
	// LeaseTTL is the nodes' lease TTL.
	LeaseTTL time.Duration
	// Interval is the time between fault starts.
	Interval time.Duration
	// Warmup is the load time before the first fault; Cooldown the load
	// time after the last heal.
	Warmup, Cooldown time.Duration
	// PauseStall is how long a node's store traffic is stalled before the
	// node is stopped by a pause fault (the stall lasts until the pause
	// ends), so that the pause catches writes on the wire.
	PauseStall time.Duration
	// ProbeAccounts is how many accounts of the affected node the recovery
	// probe reads.
	ProbeAccounts int
	// RecoveryTimeout bounds the wait for a fault's entities to answer.
	RecoveryTimeout time.Duration
	// ResolveTimeout bounds the check's resolving of unknown transfers and
	// reading of balances (its --resolve-timeout); a cluster that cannot
	// answer by then fails the run.
	ResolveTimeout time.Duration
	// PGRestart is the command that restarts PostgreSQL. The default
	// restarts the machine's server, which every other user of it sees.
	PGRestart []string
	// Out receives progress lines and the summary; nil discards them.
	Out io.Writer
	// NodeArgs are more arguments for every `bank node` (bank soak's
	// --idle-timeout and --pprof), after those Run gives.
	NodeArgs []string
	// EtcdArgs are more arguments for every `bank etcd` member (bank
	// soak's --auto-compaction-retention).
	EtcdArgs []string
	// LoadArgs are more arguments for the `bank load` (bank soak's
	// --zipf).
	LoadArgs []string
	// Observer, when not nil, watches the run from the start of the load
	// until after the check (see Observer).
	Observer Observer
}

// DefaultConfig returns a 45-second run: 3 nodes, 3 etcd members, the etcd
// store, every fault kind, a 2 s lease and a fault every 8 s.
func DefaultConfig() Config {
	return Config{
		Seed:            uint64(time.Now().UnixNano()),
		Duration:        45 * time.Second,
		Nodes:           3,
		EtcdMembers:     3,
		Store:           "etcd",
		Accounts:        100,
		Balance:         1000,
		Concurrency:     8,
		ReadRatio:       0.2,
		LeaseTTL:        2 * time.Second,
		Interval:        8 * time.Second,
		Warmup:          4 * time.Second,
		Cooldown:        5 * time.Second,
		PauseStall:      300 * time.Millisecond,
		ProbeAccounts:   3,
		RecoveryTimeout: 30 * time.Second,
		ResolveTimeout:  90 * time.Second,
		PGDatabase:      "ordo_chaos",
		PGRestart:       []string{"pg_ctlcluster", "15", "main", "restart"},
	}
}

// Validate reports the first invalid setting.
func (c *Config) Validate() error {
	switch {
	case c.Bank == "":
		return errors.New("chaos: no bank binary")
	case c.Duration <= 0:
		return errors.New("chaos: --duration must be positive")
	case c.Nodes < 2:
		return errors.New("chaos: --nodes must be at least 2 (a node's entities need somewhere to fail over)")
	case c.EtcdMembers < 1:
		return errors.New("chaos: --etcd-members must be at least 1")
	case c.Store != "etcd" && c.Store != "postgres":
		return fmt.Errorf("chaos: --store %q: want etcd or postgres", c.Store)
	case c.Store == "postgres" && c.PGURL == "":
		return errors.New("chaos: --store postgres needs --pg URL (or ORDO_PG_URL)")
	case c.ReadRatio < 0 || c.ReadRatio > 1:
		return errors.New("chaos: the read ratio must be within [0, 1]")
	case c.Accounts < 2 || c.Balance <= 0 || c.Concurrency < 1:
		return errors.New("chaos: need at least 2 accounts, a positive balance and a positive concurrency")
	case c.LeaseTTL <= 0 || c.Interval <= 0 || c.Warmup < 0 || c.Cooldown < 0:
		return errors.New("chaos: lease TTL and interval must be positive, warmup and cooldown not negative")
	case c.Store == "postgres" && c.PGDatabase == "":
		return errors.New("chaos: no PostgreSQL database name")
	case c.PauseStall < 0 || c.PauseStall >= c.LeaseTTL/2:
		return errors.New("chaos: the pause stall must be shorter than half the lease TTL")
	case c.ProbeAccounts < 1 || c.RecoveryTimeout <= 0 || c.ResolveTimeout <= 0:
		return errors.New("chaos: need at least one probe account and a positive recovery timeout")
	}
	for _, k := range c.Kinds {
		if k == KindPostgres && c.Store != "postgres" {
			return errors.New("chaos: the postgres fault needs --store postgres")
		}
		if k == KindEtcd && c.EtcdMembers < 3 {
			return errors.New("chaos: the etcd fault needs --etcd-members 3 or more (a quorum must survive)")
		}
	}
	return nil
}

// planConfig is the schedule's part of c.
func (c *Config) planConfig() PlanConfig {
	return PlanConfig{Duration: c.Duration, Kinds: c.Kinds, Nodes: c.Nodes, EtcdMembers: c.EtcdMembers,
		LeaseTTL: c.LeaseTTL, Interval: c.Interval, Warmup: c.Warmup, Cooldown: c.Cooldown}
}

// ParseFlags parses the `bank chaos` command line into a Config starting
// from DefaultConfig:
//
//	bank chaos [--seed X] [--duration D] [--nodes 3] [--etcd-members 3]
//	           [--store etcd|postgres] [--pg URL] [--faults LIST] [--report FILE]
//
// plus --dir (the run directory), --accounts, --concurrency, --lease-ttl,
// --pg-database and --pg-restart.
// pgDefault is the --pg default (ORDO_PG_URL).
func ParseFlags(args []string, stderr io.Writer, pgDefault string) (Config, error) {
	c := DefaultConfig()
	fs := flag.NewFlagSet("bank chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	seed := fs.String("seed", "", "schedule seed (default: from the clock, printed)")
	fs.DurationVar(&c.Duration, "duration", c.Duration, "how long the load runs")
	fs.IntVar(&c.Nodes, "nodes", c.Nodes, "number of bank nodes")
	fs.IntVar(&c.EtcdMembers, "etcd-members", c.EtcdMembers, "number of etcd members")
	fs.StringVar(&c.Store, "store", c.Store, "node store: etcd or postgres")
	fs.StringVar(&c.PGURL, "pg", "", "PostgreSQL URL (--store postgres; default $ORDO_PG_URL)")
	faults := fs.String("faults", "all", "comma-separated faults: kill,pause,partition,etcd,postgres")
	fs.StringVar(&c.ReportPath, "report", "", "write the JSON report to this file")
	fs.StringVar(&c.Dir, "dir", "", "run directory for logs and data (default: a new temporary directory)")
	fs.IntVar(&c.Accounts, "accounts", c.Accounts, "number of accounts")
	fs.IntVar(&c.Concurrency, "concurrency", c.Concurrency, "load clients")
	fs.DurationVar(&c.LeaseTTL, "lease-ttl", c.LeaseTTL, "the nodes' lease TTL")
	fs.StringVar(&c.PGDatabase, "pg-database", c.PGDatabase, "database dropped and recreated for the run (--store postgres)")
	pgRestart := fs.String("pg-restart", strings.Join(c.PGRestart, " "), "command that restarts PostgreSQL (the postgres fault)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("chaos: unexpected arguments %q", fs.Args())
	}
	if c.PGURL == "" {
		c.PGURL = pgDefault // not the flag's default: -h would print its password
	}
	c.PGRestart = strings.Fields(*pgRestart)
	if len(c.PGRestart) == 0 {
		return c, errors.New("chaos: --pg-restart is empty")
	}
	if *seed != "" {
		s, err := strconv.ParseUint(*seed, 0, 64)
		if err != nil {
			return c, fmt.Errorf("chaos: --seed %q: %w", *seed, err)
		}
		c.Seed = s
	}
	kinds, err := ParseKinds(*faults, c.Store)
	if err != nil {
		return c, err
	}
	if *faults == "all" && c.EtcdMembers < 3 {
		// No etcd member can die without losing the quorum.
		kinds = slices.DeleteFunc(kinds, func(k Kind) bool { return k == KindEtcd })
	}
	c.Kinds = kinds
	return c, nil
}
