package soak

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// bankBinary returns ORDO_CHAOS_BANK, or builds the bank command.
func bankBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("ORDO_CHAOS_BANK"); p != "" {
		return p
	}
	out := filepath.Join(t.TempDir(), "bank")
	cmd := exec.Command("go", "build", "-o", out, "github.com/ordo-actors/ordo/examples/bank")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building bank: %v\n%s", err, b)
	}
	return out
}

// tWriter sends progress lines to the test log.
type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestRealSoak runs the shortest bank soak against real processes. It
// takes about four minutes and two cores, so, like chaos's TestRealRun, it
// runs only with ORDO_SOAK=1 (or =etcd, =postgres). ORDO_SOAK_DURATION
// (default 2m), ORDO_SOAK_SEED, ORDO_SOAK_DIR and ORDO_CHAOS_PG_RESTART change the
// run; the postgres store needs ORDO_PG_URL. ORDO_CHAOS_BANK names a
// prebuilt bank binary.
func TestRealSoak(t *testing.T) {
	mode := os.Getenv("ORDO_SOAK")
	if mode == "" || testing.Short() {
		t.Skip("set ORDO_SOAK=1 to run a real soak (about four minutes)")
	}
	store := "etcd"
	if mode == "postgres" {
		store = "postgres"
	}
	args := []string{"--store", store, "--duration", envOr("ORDO_SOAK_DURATION", "2m"),
		"--seed", envOr("ORDO_SOAK_SEED", strconv.FormatInt(time.Now().UnixNano()%1_000_000, 10)),
		"--dir", envOr("ORDO_SOAK_DIR", t.TempDir())}
	if c := os.Getenv("ORDO_CHAOS_PG_RESTART"); c != "" {
		args = append(args, "--pg-restart", c)
	}
	cfg, err := ParseFlags(args, os.Stderr, os.Getenv("ORDO_PG_URL"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Chaos.Bank = bankBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Chaos.Duration+5*time.Minute)
	defer cancel()
	rep, err := Run(ctx, cfg, tWriter{t})
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + rep.Summary())
	for _, f := range []string{"soak.json", "soak.png", "soak.md"} {
		if _, err := os.Stat(filepath.Join(rep.Dir, f)); err != nil {
			t.Error(err)
		}
	}
	judged := 0
	for _, s := range rep.Series {
		if s.Fit != nil && s.Fit.Judged {
			judged++
		}
	}
	// RSS, goroutines, descriptors, active and dedup entries of 3 nodes at
	// least, when every node was read through the window.
	if judged < 15 {
		t.Errorf("only %d series judged: %v", judged, rep.Notes)
	}
	if !rep.OK {
		t.Fatalf("soak failed (seed %d): %v", rep.Seed, rep.Failures)
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
