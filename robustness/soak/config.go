package soak

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ordo-actors/ordo/robustness/chaos"
)

// Config configures a soak. Start from DefaultConfig.
type Config struct {
	// Chaos is the run: cluster, load, faults and check. Its Duration is
	// the load's; its Interval the time between faults.
	Chaos chaos.Config
	// SampleEvery is the time between two samples of every series, and
	// the width of the latency buckets.
	SampleEvery time.Duration
	// Window is the judged part of the load: its last Window.
	Window time.Duration
	// Settle is how long after a process starts its readings are left out
	// of the judgement (warm-up).
	Settle time.Duration
	// Drain bounds the wait, after the check, for the accounts' pending
	// Forgets to reach zero.
	Drain time.Duration
	// Rel is the growth over the window allowed to a judged series, as a
	// fraction of its median in the window (see Judge; each series also
	// has an absolute floor).
	Rel float64
	// IdleTimeout is the nodes' --idle-timeout: idle entities passivate
	// after it, so that the transfer entities (one per transfer) come and
	// go at the load's pace and the active entities level off within
	// seconds.
	IdleTimeout time.Duration
	// CompactEvery is the etcd members' --auto-compaction-retention: the
	// etcd store rewrites every account's record on each step of a
	// transfer, and without compaction etcd keeps every revision until its
	// quota is exhausted.
	CompactEvery time.Duration
	// Quota is the etcd members' --quota-backend-bytes (0: etcd's default,
	// 2 GiB). With the etcd store, the members' database files grow with
	// the key history kept between compactions and with the transfer
	// records; a long soak needs more than the default.
	Quota int64
	// MemoryFilled is how long into the load the processes' memory keeps
	// filling: the memory series (the nodes' live heap, the etcd members'
	// RSS) are judged only when the window starts after it, so in soaks of
	// 2 × MemoryFilled or more. A node's live heap climbs for about five
	// minutes under the soak's load (25 to 31 MiB in a 10-minute postgres
	// soak, flat after 300 s), and a window that starts earlier judges
	// that climb.
	MemoryFilled time.Duration
	// SnapshotCount is the etcd members' --snapshot-count: a member keeps
	// the raft log since its last snapshot in memory, and with the etcd
	// store each entry is a Save of records of several KB; etcd's default
	// (100,000 entries) lets a member's memory grow to gigabytes between
	// snapshots. 0: etcd's default.
	SnapshotCount uint64
}

// DefaultConfig returns a soak of d with the settings scaled to it (see
// Scale): 3 nodes, 3 etcd members, 100 accounts, 8 clients, the etcd store,
// every fault kind, idle entities passivated after 15 s, etcd compacted
// every minute.
func DefaultConfig(d time.Duration) Config {
	c := Config{Chaos: chaos.DefaultConfig(), Drain: time.Minute, Rel: 0.2, CompactEvery: time.Minute, Quota: 8 << 30, SnapshotCount: 10000,
		IdleTimeout: 15 * time.Second, MemoryFilled: 5 * time.Minute}
	c.Chaos.Duration = d
	c.Chaos.PGDatabase = "ordo_soak"
	c.Chaos.Kinds, _ = chaos.ParseKinds("all", c.Chaos.Store)
	c.Scale(0, 0)
	return c
}

// MinDuration is the shortest soak: its judged window, the second minute,
// starts once every account's dedup window has filled and the entities
// have reached their working number. The processes' memory is still
// filling then; it is judged in soaks of 2 × Config.MemoryFilled or more.
const MinDuration = 2 * time.Minute

// clamp returns v within [lo, hi].
func clamp(v, lo, hi time.Duration) time.Duration { return min(max(v, lo), hi) }

// Scale sets the timings that follow from the load's duration d: a fault
// every d/4 (20 s to 3 min) unless faultEvery is set, the first after half
// an interval (10 s to 1 min), none in the last d/8 (15 s to 2 min); a
// sample every d/12 (5 s to 1 min) unless sampleEvery is set; the judged
// window is the load's second half, at most 10 minutes; readings within
// two samples (at least a minute) of a process's start are left out. For
// 30 minutes: a fault every 3 minutes, a sample a minute, minutes 20 to 30
// judged; for 2 minutes: faults at about 15, 45 and 75 s, a sample every
// 10 s, the last minute judged (a process restarted by one of the last two
// faults then has too few readings in it to be judged).
func (c *Config) Scale(faultEvery, sampleEvery time.Duration) {
	d := c.Chaos.Duration
	c.Chaos.Interval = faultEvery
	if faultEvery <= 0 {
		c.Chaos.Interval = clamp(d/4, 20*time.Second, 3*time.Minute)
	}
	c.Chaos.Warmup = clamp(c.Chaos.Interval/2, 10*time.Second, time.Minute)
	c.Chaos.Cooldown = clamp(d/8, 15*time.Second, 2*time.Minute)
	c.SampleEvery = sampleEvery
	if sampleEvery <= 0 {
		c.SampleEvery = clamp(d/12, 5*time.Second, time.Minute)
	}
	c.Window = min(d/2, 10*time.Minute)
	// A process's memory rises for its first minutes (heaps, caches,
	// connection buffers, the actor registry) however short the soak:
	// judged within its first minute, a process restarted late in a short
	// soak would fail on its warm-up alone.
	c.Settle = max(2*c.SampleEvery, time.Minute)
}

// Validate reports the first invalid setting.
func (c *Config) Validate() error {
	switch {
	case c.Chaos.Duration < MinDuration:
		return fmt.Errorf("soak: --duration %v is under %v: the dedup windows and entities would still be filling "+
			"in the judged window", c.Chaos.Duration, MinDuration)
	case c.SampleEvery <= 0 || c.Window <= 0 || c.Settle < 0 || c.Drain <= 0:
		return errors.New("soak: the sample interval, window and drain must be positive")
	case c.Window > c.Chaos.Duration:
		return errors.New("soak: the window is longer than the load")
	case c.Window < 3*c.SampleEvery:
		return fmt.Errorf("soak: a window of %v holds fewer than 3 samples every %v", c.Window, c.SampleEvery)
	case !(c.Rel > 0):
		return errors.New("soak: the allowed relative growth must be positive")
	case c.IdleTimeout <= 0 || c.CompactEvery < 0 || c.Quota < 0:
		return errors.New("soak: the idle timeout must be positive, and the compaction retention and etcd quota not negative")
	}
	return c.Chaos.Validate()
}

// chaosConfig is the chaos run of c, with the nodes and members given
// their soak flags and o watching.
func (c *Config) chaosConfig(o chaos.Observer) chaos.Config {
	cc := c.Chaos
	cc.NodeArgs = append(slices.Clone(cc.NodeArgs), "--idle-timeout", c.IdleTimeout.String())
	if c.CompactEvery > 0 {
		cc.EtcdArgs = append(slices.Clone(cc.EtcdArgs), "--auto-compaction-retention", c.CompactEvery.String())
	}
	if c.Quota > 0 {
		cc.EtcdArgs = append(slices.Clone(cc.EtcdArgs), "--quota-backend-bytes", strconv.FormatInt(c.Quota, 10))
	}
	if c.SnapshotCount > 0 {
		cc.EtcdArgs = append(slices.Clone(cc.EtcdArgs), "--snapshot-count", strconv.FormatUint(c.SnapshotCount, 10))
	}
	// Accounts chosen uniformly: every account's dedup window fills within
	// seconds, so the dedup entries level off before the window even in a
	// two-minute run.
	cc.LoadArgs = append(slices.Clone(cc.LoadArgs), "--zipf", "0")
	cc.Observer = o
	return cc
}

// ParseFlags parses the `bank soak` command line into a Config starting
// from DefaultConfig:
//
//	bank soak [--duration 30m] [--store etcd|postgres] [--pg URL] [--seed X]
//	          [--fault-interval D] [--sample-every D] [--faults LIST] [--dir DIR]
//
// plus --nodes, --etcd-members, --accounts, --concurrency, --pg-database
// and --pg-restart. pgDefault is the --pg default (ORDO_PG_URL).
func ParseFlags(args []string, stderr io.Writer, pgDefault string) (Config, error) {
	def := DefaultConfig(30 * time.Minute)
	fs := flag.NewFlagSet("bank soak", flag.ContinueOnError)
	fs.SetOutput(stderr)
	duration := fs.Duration("duration", def.Chaos.Duration, "how long the load runs (at least 2m)")
	store := fs.String("store", def.Chaos.Store, "node store: etcd or postgres")
	pg := fs.String("pg", "", "PostgreSQL URL (--store postgres; default $ORDO_PG_URL)")
	seed := fs.String("seed", "", "fault schedule seed (default: from the clock, printed)")
	faultEvery := fs.Duration("fault-interval", 0, "time between faults (default: a quarter of the duration, 20s to 3m)")
	sampleEvery := fs.Duration("sample-every", 0, "time between samples (default: a twelfth of the duration, 5s to 1m)")
	faults := fs.String("faults", "all", "comma-separated faults, injected in turn: kill,pause,partition,etcd,postgres")
	dir := fs.String("dir", "", "run directory: logs, data, soak.json, soak.png, soak.md (default: a new temporary directory)")
	nodes := fs.Int("nodes", def.Chaos.Nodes, "number of bank nodes")
	members := fs.Int("etcd-members", def.Chaos.EtcdMembers, "number of etcd members")
	accounts := fs.Int("accounts", def.Chaos.Accounts, "number of accounts")
	concurrency := fs.Int("concurrency", def.Chaos.Concurrency, "load clients")
	pgDatabase := fs.String("pg-database", def.Chaos.PGDatabase, "database dropped and recreated for the run (--store postgres)")
	pgRestart := fs.String("pg-restart", strings.Join(def.Chaos.PGRestart, " "), "command that restarts PostgreSQL (the postgres fault)")
	if err := fs.Parse(args); err != nil {
		return def, err
	}
	if fs.NArg() > 0 {
		return def, fmt.Errorf("soak: unexpected arguments %q", fs.Args())
	}
	c := DefaultConfig(*duration)
	c.Chaos.Store, c.Chaos.PGURL, c.Chaos.Dir = *store, *pg, *dir
	if c.Chaos.PGURL == "" {
		c.Chaos.PGURL = pgDefault // not the flag's default: -h would print its password
	}
	c.Chaos.Nodes, c.Chaos.EtcdMembers, c.Chaos.Accounts, c.Chaos.Concurrency = *nodes, *members, *accounts, *concurrency
	c.Chaos.PGDatabase = *pgDatabase
	if c.Chaos.PGRestart = strings.Fields(*pgRestart); len(c.Chaos.PGRestart) == 0 {
		return c, errors.New("soak: --pg-restart is empty")
	}
	if *seed != "" {
		s, err := strconv.ParseUint(*seed, 0, 64)
		if err != nil {
			return c, fmt.Errorf("soak: --seed %q: %w", *seed, err)
		}
		c.Chaos.Seed = s
	}
	kinds, err := chaos.ParseKinds(*faults, c.Chaos.Store)
	if err != nil {
		return c, err
	}
	if *faults == "all" && c.Chaos.EtcdMembers < 3 {
		kinds = slices.DeleteFunc(kinds, func(k chaos.Kind) bool { return k == chaos.KindEtcd })
	}
	c.Chaos.Kinds = kinds
	if *faultEvery < 0 || *sampleEvery < 0 {
		return c, errors.New("soak: --fault-interval and --sample-every must not be negative")
	}
	c.Scale(*faultEvery, *sampleEvery)
	return c, nil
}
