package lab

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ordo-actors/ordo/etcdembed"
)

// Settings are the command's connection and lock settings, passed to every
// Builder.
type Settings struct {
	// Redis are the Redis servers (the first for the single lock and the
	// Redlock balances, all for Redlock).
	Redis []string
	// ZK are the ZooKeeper servers.
	ZK []string
	// Etcd are the etcd endpoints (an embedded member's when none given).
	Etcd []string
	// PG is the PostgreSQL URL.
	PG string
	// TTL is the lock TTL: Redis PX, etcd session TTL, ZooKeeper session
	// timeout, PostgreSQL idle_in_transaction_session_timeout.
	TTL time.Duration
	// Concurrency is the workload's concurrency, for sizing pools.
	Concurrency int
}

// Builder makes one approach from the command's settings. The ordo
// approach plugs into Main as one more Builder.
type Builder struct {
	// Name is what --approaches selects.
	Name string
	// New connects the approach; the caller closes it.
	New func(ctx context.Context, s Settings) (Approach, error)
}

// PGMaxPool caps the connection pool of the PostgreSQL approaches. Past
// the server's max_connections (100 by default) transfers would fail to
// connect instead of queueing for a connection, as an application's bounded
// pool makes them do; 64 leaves room for other clients of the server.
const PGMaxPool = 64

// Builders returns the lock-based approaches, in report order.
func Builders() []Builder {
	pg := func(m PGMode) Builder {
		return Builder{Name: string(m), New: func(ctx context.Context, s Settings) (Approach, error) {
			if s.PG == "" {
				return nil, errors.New("needs --pg (or ORDO_PG_URL)")
			}
			return NewPGLock(ctx, PGConfig{URL: s.PG, Mode: m, IdleTxTimeout: s.TTL, MaxConns: int32(min(s.Concurrency+4, PGMaxPool))})
		}}
	}
	return []Builder{
		{Name: "redis", New: func(_ context.Context, s Settings) (Approach, error) {
			if len(s.Redis) == 0 {
				return nil, errors.New("needs --redis (or ORDO_REDIS_ADDRS)")
			}
			return NewRedisLock(RedisConfig{Addrs: s.Redis, TTL: s.TTL, PoolSize: s.Concurrency + 4})
		}},
		{Name: "redlock", New: func(_ context.Context, s Settings) (Approach, error) {
			if len(s.Redis) == 0 {
				return nil, errors.New("needs --redis (or ORDO_REDIS_ADDRS) with 5 servers")
			}
			return NewRedlock(RedisConfig{Addrs: s.Redis, TTL: s.TTL, PoolSize: s.Concurrency + 4})
		}},
		{Name: "etcd", New: func(ctx context.Context, s Settings) (Approach, error) {
			return NewEtcdLock(ctx, EtcdConfig{Endpoints: s.Etcd, SessionTTL: s.TTL, Sessions: s.Concurrency})
		}},
		{Name: "zk", New: func(_ context.Context, s Settings) (Approach, error) {
			if len(s.ZK) == 0 {
				return nil, errors.New("needs --zk (or ORDO_ZK_ADDRS)")
			}
			return NewZKLock(ZKConfig{Servers: s.ZK, SessionTimeout: s.TTL, Sessions: s.Concurrency})
		}},
		pg(PGRow),
		pg(PGAdvisory),
		pg(PGOptimistic),
	}
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// UsageError is returned by Main for bad flags or arguments.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

func usagef(format string, args ...any) error {
	return &UsageError{fmt.Errorf(format, args...)}
}

// concurrencies is the --concurrency flag: one or more positive numbers,
// comma-separated, each listed once.
type concurrencies []int

func (c *concurrencies) String() string {
	if c == nil {
		return ""
	}
	s := make([]string, len(*c))
	for i, n := range *c {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

func (c *concurrencies) Set(v string) error {
	var out concurrencies
	for _, f := range strings.Split(v, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			return fmt.Errorf("empty entry in %q; want positive numbers separated by commas, e.g. 32,256", v)
		}
		n, err := strconv.Atoi(f)
		if err != nil {
			return fmt.Errorf("%q is not a number; want positive numbers separated by commas, e.g. 32,256", f)
		}
		if n < 1 {
			return fmt.Errorf("concurrency must be at least 1, have %d", n)
		}
		if slices.Contains(out, n) {
			return fmt.Errorf("%d is listed twice", n)
		}
		out = append(out, n)
	}
	*c = out
	return nil
}

// comparisons is the --compare flag: name:baseline pairs, comma-separated.
type comparisons []Comparison

func (c *comparisons) String() string {
	if c == nil {
		return ""
	}
	s := make([]string, len(*c))
	for i, p := range *c {
		s[i] = p.Name + ":" + p.Baseline
	}
	return strings.Join(s, ",")
}

func (c *comparisons) Set(v string) error {
	var out comparisons
	for _, f := range splitList(v) {
		name, base, ok := strings.Cut(f, ":")
		if !ok || name == "" || base == "" || name == base {
			return fmt.Errorf("%q is not approach:baseline", f)
		}
		out = append(out, Comparison{Name: name, Baseline: base})
	}
	*c = out
	return nil
}

// DefaultComparisons are the pairs Main compares unless --compare says
// otherwise: ordo on each store against the lock on the same store.
func DefaultComparisons() []Comparison {
	return []Comparison{{Name: "ordo-pg", Baseline: "pg-row"}, {Name: "ordo", Baseline: "etcd"}}
}

// Main is the lab command: it parses args (flags only, see -h), runs the
// selected approaches one after another on the same workload, at each
// concurrency of --concurrency in turn, prints the report to stdout and
// writes results.md, results.json and chart.png to --out. extra adds
// approaches (the ordo one) after the built-in ones; a name in extra
// replaces a built-in of that name. Bad flags or arguments return a
// *UsageError (-h returns flag.ErrHelp). With --check it returns an error
// when an approach failed to run, completed no transfer, or failed a check.
func Main(ctx context.Context, args []string, stdout io.Writer, extra ...Builder) error {
	builders := Builders()
	for _, b := range extra {
		if i := slices.IndexFunc(builders, func(x Builder) bool { return x.Name == b.Name }); i >= 0 {
			builders[i] = b
		} else {
			builders = append(builders, b)
		}
	}
	var names []string
	for _, b := range builders {
		names = append(names, b.Name)
	}

	def := DefaultWorkload()
	conc := concurrencies{def.Concurrency}
	compare := comparisons(DefaultComparisons())
	fs := flag.NewFlagSet("lab", flag.ContinueOnError)
	fs.SetOutput(stdout)
	approaches := fs.String("approaches", "all", "comma-separated approaches to run, or all: "+strings.Join(names, ","))
	accounts := fs.Int("accounts", def.Accounts, "number of accounts")
	initial := fs.Int64("initial", def.InitialBalance, "initial balance of every account")
	duration := fs.Duration("duration", def.Duration, "run time per approach (and per concurrency)")
	fs.Var(&conc, "concurrency", "concurrent clients; a comma-separated list (e.g. 32,256) runs every approach at each")
	rounds := fs.Int("rounds", 1, "run every approach this many times at each concurrency, in rounds (the order turned each round); comparisons are taken within each round and reported with their median")
	zipf := fs.Float64("zipf", def.Zipf, "Zipf exponent of account choice; 0 = uniform")
	maxAmount := fs.Int64("max-amount", def.MaxAmount, "largest transfer amount")
	seed := fs.Uint64("seed", 0, "random seed; 0 picks one from the clock (printed)")
	stallProb := fs.Float64("stall-prob", 0, "probability that a transfer pauses between its locks and its write")
	stall := fs.Duration("stall", def.StallDuration, "length of a pause; should exceed --ttl")
	ttl := fs.Duration("ttl", 2*time.Second, "lock TTL (Redis PX, etcd session TTL, ZooKeeper session timeout, PostgreSQL idle-in-transaction timeout)")
	opTimeout := fs.Duration("op-timeout", def.OpTimeout, "bound on one transfer, pauses excluded")
	idleSample := fs.Duration("idle-sample", time.Second, "before each run, how long to watch the machine's CPU with the approach idle (reported as idle busy); 0 skips")
	fs.Var(&compare, "compare", "comma-separated approach:baseline pairs whose ratios the report shows, when both ran")
	out := fs.String("out", filepath.Join("results", "lab"), "directory for results.md, results.json and chart.png")
	redisF := fs.String("redis", os.Getenv("ORDO_REDIS_ADDRS"), "comma-separated Redis addresses (5 for Redlock)")
	zkF := fs.String("zk", os.Getenv("ORDO_ZK_ADDRS"), "comma-separated ZooKeeper addresses")
	etcdF := fs.String("etcd", os.Getenv("ORDO_ETCD_ENDPOINTS"), "comma-separated etcd endpoints; empty starts an embedded member")
	pgF := fs.String("pg", "", "PostgreSQL URL (default $ORDO_PG_URL, not shown: it may hold a password)")
	check := fs.Bool("check", false, "fail unless every approach completes transfers and passes its checks")
	cpuProf := fs.String("cpuprofile", "", "write a CPU profile of this process over every run to this file (go tool pprof); in-process approaches (ordo) are profiled whole, the others' servers not")
	memProf := fs.String("memprofile", "", "write this process's allocation profile (go tool pprof -sample_index=alloc_space) over every run to this file when the runs end")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &UsageError{fmt.Errorf("lab: %w", err)}
	}
	if fs.NArg() > 0 {
		return usagef("lab: unexpected arguments %q", fs.Args())
	}
	if *rounds < 1 {
		return usagef("lab: --rounds must be at least 1, have %d", *rounds)
	}
	if *ttl < 10*time.Millisecond {
		return usagef("lab: --ttl %v is too short", *ttl)
	}
	var selected []Builder
	if *approaches == "all" {
		selected = builders
	} else {
		for _, n := range splitList(*approaches) {
			i := slices.IndexFunc(builders, func(b Builder) bool { return b.Name == n })
			if i < 0 {
				return usagef("lab: unknown approach %q (have %s)", n, strings.Join(names, ", "))
			}
			selected = append(selected, builders[i])
		}
		if len(selected) == 0 {
			return usagef("lab: --approaches is empty")
		}
	}
	if *seed == 0 {
		*seed = uint64(time.Now().UnixNano())
	}
	wl := Workload{
		Accounts: *accounts, InitialBalance: *initial, Duration: *duration, Concurrency: conc[0],
		Zipf: *zipf, MaxAmount: *maxAmount, Seed: *seed, StallProbability: *stallProb,
		StallDuration: *stall, OpTimeout: *opTimeout, IdleSample: *idleSample,
	}
	if err := wl.Validate(); err != nil {
		return &UsageError{err}
	}
	if *pgF == "" {
		*pgF = os.Getenv("ORDO_PG_URL")
	}
	st := Settings{Redis: splitList(*redisF), ZK: splitList(*zkF), Etcd: splitList(*etcdF), PG: *pgF, TTL: *ttl}
	fmt.Fprintf(stdout, "lab: seed %d\n", wl.Seed)
	if wl.StallProbability > 0 && wl.StallDuration <= *ttl {
		fmt.Fprintf(stdout, "lab: note: --stall %v does not exceed --ttl %v; pauses will rarely outlive a lock\n", wl.StallDuration, *ttl)
	}

	if len(st.Etcd) == 0 && slices.ContainsFunc(selected, func(b Builder) bool { return b.Name == "etcd" }) {
		dir, err := os.MkdirTemp("", "ordo-lab-etcd-")
		if err != nil {
			return fmt.Errorf("lab: %w", err)
		}
		defer os.RemoveAll(dir)
		srv, err := etcdembed.Start(ctx, etcdembed.Config{Dir: dir})
		if err != nil {
			return fmt.Errorf("lab: embedded etcd: %w", err)
		}
		defer srv.Close()
		st.Etcd = srv.Endpoints()
	}

	if *cpuProf != "" {
		f, err := os.Create(*cpuProf)
		if err != nil {
			return fmt.Errorf("lab: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("lab: cpu profile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}

	if *memProf != "" {
		f, err := os.Create(*memProf)
		if err != nil {
			return fmt.Errorf("lab: %w", err)
		}
		defer f.Close()
		defer func() {
			runtime.GC() // the profile's in-use figures as of the end
			if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
				fmt.Fprintf(stdout, "lab: allocation profile: %v\n", err)
			}
		}()
	}

	rep := Report{Machine: ThisMachine(), Workload: wl, Concurrencies: conc, TTL: *ttl, Comparisons: compare, Rounds: *rounds}
	// run runs b at concurrency c in round n and records what it measured.
	run := func(b Builder, c, n int) error {
		cwl, cst := wl, st
		cwl.Concurrency, cst.Concurrency = c, c
		what := fmt.Sprintf("lab: %s: concurrency %d", b.Name, c)
		if *rounds > 1 {
			what += fmt.Sprintf(", round %d of %d", n, *rounds)
		}
		fmt.Fprintf(stdout, "%s: running %v\n", what, cwl.Duration)
		r, err := runOne(ctx, b, cst, cwl)
		if err != nil {
			fmt.Fprintf(stdout, "%s: %v\n", what, err)
			rep.Failures = append(rep.Failures, Failure{Name: b.Name, Concurrency: c, Round: n, Error: err.Error()})
			if ctx.Err() != nil {
				return err // canceled: stop; any other failure is reported and the bench goes on
			}
			return nil
		}
		r.Round = n
		cpu := "CPU n/a"
		if r.CPUError == "" {
			cpu = fmt.Sprintf("%.2f CPU-s per 1000", r.CPUPer1000)
		}
		fmt.Fprintf(stdout, "%s: %d ok, %.0f/s, %s, conserved %v, accounts off %d\n",
			what, r.OK, r.Throughput, cpu, r.Conserved(), r.AccountsOff)
		rep.Results = append(rep.Results, r)
		return nil
	}
	for _, c := range conc {
		for n := 1; n <= *rounds; n++ {
			for i := range selected {
				// Each round starts one approach later than the one before.
				if err := run(selected[(i+n-1)%len(selected)], c, n); err != nil {
					return err
				}
			}
		}
	}

	if err := os.MkdirAll(*out, 0o755); err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	var md strings.Builder
	if err := WriteMarkdown(&md, rep); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\n%s\n", md.String())
	if err := os.WriteFile(filepath.Join(*out, "results.md"), []byte(md.String()), 0o644); err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	js, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	if err := os.WriteFile(filepath.Join(*out, "results.json"), js, 0o644); err != nil {
		return fmt.Errorf("lab: %w", err)
	}
	if len(rep.Results) > 0 {
		if err := WriteChart(filepath.Join(*out, "chart.png"), rep); err != nil {
			return fmt.Errorf("lab: chart: %w", err)
		}
	}
	fmt.Fprintf(stdout, "lab: wrote %s\n", *out)

	if *check {
		var bad []string
		for _, r := range rep.Results {
			if !r.Passed() {
				bad = append(bad, fmt.Sprintf("%s (concurrency %d)", r.Name, r.Workload.Concurrency))
			}
		}
		for _, f := range rep.Failures {
			bad = append(bad, fmt.Sprintf("%s (concurrency %d)", f.Name, f.Concurrency))
		}
		if len(bad) > 0 {
			slices.Sort(bad)
			return fmt.Errorf("lab: check failed for %s", strings.Join(bad, ", "))
		}
	}
	return nil
}

func runOne(ctx context.Context, b Builder, st Settings, wl Workload) (Result, error) {
	a, err := b.New(ctx, st)
	if err != nil {
		return Result{Name: b.Name}, err
	}
	r, err := Run(ctx, a, wl)
	r.Name = b.Name // the name it was selected by
	return r, errors.Join(err, a.Close())
}
