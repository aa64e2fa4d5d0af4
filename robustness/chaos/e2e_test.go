package chaos

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

// TestRealRun runs bank chaos against real processes. It takes about a
// minute and two cores, so it runs only with ORDO_CHAOS=1 (or =etcd,
// =postgres). ORDO_CHAOS_SEED, ORDO_CHAOS_DURATION, ORDO_CHAOS_FAULTS,
// ORDO_CHAOS_PG_RESTART and ORDO_CHAOS_DIR change the run; the postgres
// store needs ORDO_PG_URL. ORDO_CHAOS_BANK names a prebuilt bank binary.
func TestRealRun(t *testing.T) {
	mode := os.Getenv("ORDO_CHAOS")
	if mode == "" || testing.Short() {
		t.Skip("set ORDO_CHAOS=1 to run a real chaos scenario (about a minute)")
	}
	store := "etcd"
	if mode == "postgres" {
		store = "postgres"
	}
	args := []string{"--store", store, "--duration", envOr("ORDO_CHAOS_DURATION", "45s"),
		"--faults", envOr("ORDO_CHAOS_FAULTS", "all")}
	if s := os.Getenv("ORDO_CHAOS_SEED"); s != "" {
		args = append(args, "--seed", s)
	} else {
		args = append(args, "--seed", strconv.FormatInt(time.Now().UnixNano()%1_000_000, 10))
	}
	if c := os.Getenv("ORDO_CHAOS_PG_RESTART"); c != "" {
		args = append(args, "--pg-restart", c)
	}
	if d := os.Getenv("ORDO_CHAOS_DIR"); d != "" {
		args = append(args, "--dir", d)
	}
	cfg, err := ParseFlags(args, os.Stderr, os.Getenv("ORDO_PG_URL"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Bank = bankBinary(t)
	cfg.Out = tWriter{t}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Duration+4*time.Minute)
	defer cancel()
	rep, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + rep.Summary())
	if !rep.OK {
		t.Fatalf("chaos run failed; replay with ORDO_CHAOS_SEED=%d", rep.Seed)
	}
	for _, f := range rep.Faults {
		if f.Kind == KindPause && rep.FencedWrites == 0 {
			t.Logf("pause without fenced writes (seed %d)", rep.Seed)
		}
	}
	if !strings.Contains(rep.Proxied, "etcd") {
		t.Fatal("report does not say what is proxied")
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
