package lab_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/etcdembed"
	"github.com/ordo-actors/ordo/lab"
)

const howToRun = "start the servers with `eval \"$(lab/lab.sh up)\"` or run `lab/lab.sh test`"

// server returns the addresses in env, skipping the test when they are
// unset or unreachable, or failing it when ORDO_REQUIRE_LAB=1.
func server(t *testing.T, env string) string {
	t.Helper()
	v := os.Getenv(env)
	miss := func(format string, args ...any) {
		t.Helper()
		msg := fmt.Sprintf(format, args...) + "; " + howToRun
		if os.Getenv("ORDO_REQUIRE_LAB") == "1" {
			t.Fatal(msg + " (ORDO_REQUIRE_LAB=1)")
		}
		t.Skip(msg)
	}
	if v == "" {
		miss("%s is not set", env)
	}
	addr := strings.Split(v, ",")[0]
	if u, err := url.Parse(v); err == nil && u.Host != "" {
		addr = u.Host
		if u.Port() == "" {
			addr = net.JoinHostPort(u.Hostname(), "5432")
		}
	}
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		miss("%s=%s is not reachable: %v", env, v, err)
	}
	c.Close()
	return v
}

func embeddedEtcd(t *testing.T) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := etcdembed.Start(ctx, etcdembed.Config{Dir: t.TempDir(), UnsafeNoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return srv.Endpoints()
}

// runClean runs a short workload without pauses and requires every check
// to pass with no unknown outcome.
func runClean(t *testing.T, a lab.Approach) {
	t.Helper()
	t.Cleanup(func() {
		if err := a.Close(); err != nil {
			t.Error(err)
		}
	})
	w := lab.DefaultWorkload()
	w.Accounts = 8
	w.Duration = 700 * time.Millisecond
	w.Concurrency = 4
	w.Seed = uint64(time.Now().UnixNano())
	r, err := lab.Run(context.Background(), a, w)
	if err != nil {
		t.Fatalf("seed %d: %v", w.Seed, err)
	}
	if !r.Passed() || r.Unknown != 0 {
		t.Fatalf("seed %d: %+v", w.Seed, r)
	}
	// An approach on PostgreSQL reports the WAL its transfers wrote: each
	// writes two rows at least. Its run started after a checkpoint.
	if _, ok := a.(lab.WALReader); ok && (r.WALError != "" || r.WALBytes <= 0 || r.WALPerTransfer < 50 || r.CheckpointError != "") {
		t.Fatalf("seed %d: WAL %d bytes, %.0f per transfer, error %q; checkpoint error %q",
			w.Seed, r.WALBytes, r.WALPerTransfer, r.WALError, r.CheckpointError)
	}
	t.Logf("%s: %d ok, %d rejected, %d aborted, %.0f/s, %.0f B of WAL per transfer", r.Name, r.OK, r.Rejected, r.Aborted, r.Throughput, r.WALPerTransfer)
}

func TestRedisLock(t *testing.T) {
	addrs := strings.Split(server(t, "ORDO_REDIS_ADDRS"), ",")
	a, err := lab.NewRedisLock(lab.RedisConfig{Addrs: addrs, Prefix: "ordo-lab-test"})
	if err != nil {
		t.Fatal(err)
	}
	runClean(t, a)
}

func TestRedlock(t *testing.T) {
	addrs := strings.Split(server(t, "ORDO_REDIS_ADDRS"), ",")
	if len(addrs) < 3 {
		t.Skipf("Redlock needs 3 or more servers in ORDO_REDIS_ADDRS, have %d", len(addrs))
	}
	a, err := lab.NewRedlock(lab.RedisConfig{Addrs: addrs, Prefix: "ordo-lab-test"})
	if err != nil {
		t.Fatal(err)
	}
	runClean(t, a)
}

func TestEtcdLock(t *testing.T) {
	a, err := lab.NewEtcdLock(context.Background(), lab.EtcdConfig{Endpoints: embeddedEtcd(t)})
	if err != nil {
		t.Fatal(err)
	}
	runClean(t, a)
}

func TestZKLock(t *testing.T) {
	addrs := strings.Split(server(t, "ORDO_ZK_ADDRS"), ",")
	a, err := lab.NewZKLock(lab.ZKConfig{Servers: addrs, Prefix: "/ordo-lab-test"})
	if err != nil {
		t.Fatal(err)
	}
	runClean(t, a)
}

func TestPGLock(t *testing.T) {
	u := server(t, "ORDO_PG_URL")
	for _, m := range []lab.PGMode{lab.PGRow, lab.PGAdvisory, lab.PGOptimistic} {
		t.Run(string(m), func(t *testing.T) {
			a, err := lab.NewPGLock(context.Background(), lab.PGConfig{URL: u, Mode: m})
			if err != nil {
				t.Fatal(err)
			}
			runClean(t, a)
		})
	}
}

// pausedHolder runs the lost-update scenario by hand on accounts 0 and 1
// (1000 each): transfer A (0→1, 100) pauses for pause after taking its
// locks and reading; while it is paused, transfer B (1→0, 50) runs. It
// returns both outcomes and the final balances.
func pausedHolder(t *testing.T, a lab.Approach, pause time.Duration) (bal []int64, errA, errB error) {
	t.Helper()
	ctx := context.Background()
	if err := a.Setup(ctx, 2, 1000); err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		pctx := lab.WithPauseFunc(ctx, pause, func() { once.Do(func() { close(started) }) })
		errA = a.Transfer(pctx, 0, 1, 100)
	}()
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("transfer A never reached its pause")
	}
	bctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	errB = a.Transfer(bctx, 1, 0, 50)
	cancel()
	wg.Wait()
	bal, err := a.Balances(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("A: %v; B: %v; balances %v", errA, errB, bal)
	return bal, errA, errB
}

// wantLostUpdate requires the unfenced outcome: both acknowledged, and A's
// stale write erased B.
func wantLostUpdate(t *testing.T, errA, errB error, bal []int64) {
	t.Helper()
	if errA != nil || errB != nil {
		t.Fatalf("A: %v, B: %v; want both acknowledged", errA, errB)
	}
	if bal[0] != 900 || bal[1] != 1100 {
		t.Fatalf("balances %v, want [900 1100]: B's update overwritten by the paused A", bal)
	}
}

// wantFenced requires the fenced outcome: A refused with no effect, B done.
func wantFenced(t *testing.T, errA, errB error, bal []int64) {
	t.Helper()
	if !errors.Is(errA, lab.ErrAborted) || errB != nil {
		t.Fatalf("A: %v (want ErrAborted), B: %v (want nil)", errA, errB)
	}
	if bal[0] != 1050 || bal[1] != 950 {
		t.Fatalf("balances %v, want [1050 950]", bal)
	}
}

func TestRedisLockLosesUpdateOfPausedHolder(t *testing.T) {
	addrs := strings.Split(server(t, "ORDO_REDIS_ADDRS"), ",")
	a, err := lab.NewRedisLock(lab.RedisConfig{Addrs: addrs, Prefix: "ordo-lab-test-pause", TTL: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	bal, errA, errB := pausedHolder(t, a, time.Second)
	wantLostUpdate(t, errA, errB, bal)
}

func TestZKLockLosesUpdateOfPausedHolder(t *testing.T) {
	addrs := strings.Split(server(t, "ORDO_ZK_ADDRS"), ",")
	a, err := lab.NewZKLock(lab.ZKConfig{Servers: addrs, Prefix: "/ordo-lab-test-pause", SessionTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	bal, errA, errB := pausedHolder(t, a, 2*time.Second)
	wantLostUpdate(t, errA, errB, bal)
}

func TestEtcdLockFencesPausedHolder(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for a lease to expire")
	}
	a, err := lab.NewEtcdLock(context.Background(), lab.EtcdConfig{Endpoints: embeddedEtcd(t), SessionTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	bal, errA, errB := pausedHolder(t, a, 4*time.Second)
	wantFenced(t, errA, errB, bal)
}

func TestPGRowFencesPausedHolder(t *testing.T) {
	u := server(t, "ORDO_PG_URL")
	a, err := lab.NewPGLock(context.Background(), lab.PGConfig{URL: u, Mode: lab.PGRow, IdleTxTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	bal, errA, errB := pausedHolder(t, a, time.Second)
	wantFenced(t, errA, errB, bal)
}
