package soak

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/ordo-actors/ordo/robustness/chaos"
)

// ErrUsage is matched (errors.Is) by Main's errors about its command line.
var ErrUsage = errors.New("soak: bad usage")

// ErrFailed is returned (wrapped) by Main when the soak did not pass.
var ErrFailed = errors.New("soak: run failed")

// Main is `bank soak`: it parses args, runs the soak with the bank binary
// self as every child process, prints progress and a summary to stdout,
// writes soak.json, soak.png and soak.md into the run directory and
// returns an error wrapping ErrFailed when the soak did not pass, or
// ErrUsage for a bad command line (--help prints the usage and returns
// nil).
func Main(ctx context.Context, args []string, stdout io.Writer, self string) error {
	cfg, err := ParseFlags(args, stdout, os.Getenv("ORDO_PG_URL"))
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUsage, err)
	}
	cfg.Chaos.Bank = self
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrUsage, err)
	}
	rep, err := Run(ctx, cfg, stdout)
	if err != nil {
		return err
	}
	fmt.Fprint(stdout, rep.Summary())
	if !rep.OK {
		return fmt.Errorf("%w: store %s, seed %d (replay the faults with --seed %d)", ErrFailed, rep.Store, rep.Seed, rep.Seed)
	}
	return nil
}

// Run runs one soak: the chaos run of cfg.Chaos with the sampler watching,
// then the verdict. It writes soak.json, soak.png and soak.md into the run
// directory and returns the report; it returns an error only when the run
// could not be carried out. Every child process is gone when it returns.
func Run(ctx context.Context, cfg Config, out io.Writer) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if out == nil {
		out = io.Discard
	}
	var mu sync.Mutex
	logf := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, "soak: "+format+"\n", args...)
	}
	logf("%v of load on the %s store, a fault every %v, a sample every %v, idle entities passivated after %v",
		cfg.Chaos.Duration, cfg.Chaos.Store, cfg.Chaos.Interval, cfg.SampleEvery, cfg.IdleTimeout)
	s := newSampler(cfg.SampleEvery, cfg.Drain, logf)
	cc := cfg.chaosConfig(s)
	cc.Out = out
	crep, err := chaos.Run(ctx, cc)
	if err != nil {
		return nil, err
	}
	lat, calls, lerr := readLatencies(filepath.Join(crep.Dir, "history.jsonl"), crep.LoadStart, cfg.SampleEvery)
	// The ops still in flight when the load's duration is over are the
	// tail of the last intervals, not a measure of their own.
	for len(lat) > 0 && lat[len(lat)-1].FromS >= cfg.Chaos.Duration.Seconds() {
		lat = lat[:len(lat)-1]
	}
	rep := build(cfg, crep, s, lat, calls)
	if lerr != nil {
		rep.Notes = append(rep.Notes, fmt.Sprintf("history: %v", lerr))
	}
	if err := writeJSON(filepath.Join(crep.Dir, "soak.json"), rep); err != nil {
		return rep, err
	}
	if err := rep.WriteChart(filepath.Join(crep.Dir, "soak.png")); err != nil {
		return rep, err
	}
	if err := os.WriteFile(filepath.Join(crep.Dir, "soak.md"), []byte(rep.Markdown()), 0o644); err != nil {
		return rep, err
	}
	return rep, nil
}
