package chaos

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/internal/testutil"
)

func TestProcKillTakesTheProcessGroup(t *testing.T) {
	t.Setenv("CHAOS_HELPER", "tree")
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "grandchild")
	p := newProc("tree", os.Args[0], filepath.Join(dir, "tree.log"), []string{pidFile})
	if err := p.start(); err != nil {
		t.Fatal(err)
	}
	var gc int
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		b, err := os.ReadFile(pidFile)
		if err != nil {
			return err
		}
		gc, err = strconv.Atoi(string(b))
		return err
	})
	if !alive(gc) || !p.running() || p.pid() == 0 {
		t.Fatal("tree not running")
	}
	if inc, pid, started, stopped := p.state(); inc != 1 || pid != p.pid() || time.Since(started) > time.Minute || stopped {
		t.Fatalf("state: incarnation %d, pid %d, started %v, stopped %v", inc, pid, started, stopped)
	}
	if err := p.start(); err == nil {
		t.Fatal("second start of a running process accepted")
	}
	p.kill()
	if p.running() {
		t.Fatal("running after kill")
	}
	if inc, pid, _, _ := p.state(); inc != 1 || pid != 0 {
		t.Fatalf("state after kill: incarnation %d, pid %d", inc, pid)
	}
	testutil.Eventually(t, 5*time.Second, 10*time.Millisecond, func() error {
		if alive(gc) {
			return os.ErrExist
		}
		return nil
	})
	if code := exitCode(p.exitError()); code != -1 {
		t.Fatalf("exit code of a killed process: %d", code)
	}
	if err := p.signal(syscall.SIGTERM); err == nil {
		t.Fatal("signal to a dead process accepted")
	}
	b, _ := os.ReadFile(p.logPath)
	if !strings.Contains(string(b), "tree: started grandchild") || !strings.Contains(string(b), "incarnation 1") {
		t.Fatalf("log: %q", b)
	}
}

func TestProcStopContRestart(t *testing.T) {
	dir := t.TempDir()
	p := newProc("sleep", "sleep", filepath.Join(dir, "sleep.log"), []string{"60"})
	if err := p.start(); err != nil {
		t.Fatal(err)
	}
	if err := p.signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, 10*time.Millisecond, func() error {
		if s := procState(p.pid()); s != "T" {
			return os.ErrInvalid
		}
		return nil
	})
	if !p.isStopped() {
		t.Fatal("not marked stopped")
	}
	// stop resumes a stopped process before SIGTERM.
	p.stop(context.Background(), 5*time.Second)
	if p.running() || p.isStopped() {
		t.Fatal("still running or stopped after stop")
	}
	_, inc := p.exited()
	p.setArgs([]string{"0"})
	if err := p.run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, inc2 := p.exited(); inc2 != inc+1 {
		t.Fatalf("incarnation %d after %d", inc2, inc)
	}
	b, _ := os.ReadFile(p.logPath)
	if strings.Count(string(b), "=== ") != 2 {
		t.Fatalf("log holds %q", b)
	}
}

func TestProcRunFailsAndCancels(t *testing.T) {
	dir := t.TempDir()
	p := newProc("false", "false", filepath.Join(dir, "false.log"), nil)
	err := p.run(context.Background())
	if exitCode(err) != 1 {
		t.Fatalf("false: %v (code %d)", err, exitCode(err))
	}
	p = newProc("sleep", "sleep", filepath.Join(dir, "sleep.log"), []string{"60"})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := p.run(ctx); err == nil {
		t.Fatal("run outlived its context")
	}
	if p.running() || time.Since(start) > 10*time.Second {
		t.Fatal("not killed at cancel")
	}
	p = newProc("nothing", filepath.Join(dir, "missing"), filepath.Join(dir, "x.log"), nil)
	if err := p.start(); err == nil {
		t.Fatal("started a missing binary")
	}
}

func TestProcStopKillsAfterGrace(t *testing.T) {
	dir := t.TempDir()
	// A shell that ignores SIGTERM.
	p := newProc("stubborn", "sh", filepath.Join(dir, "s.log"), []string{"-c", "trap '' TERM; sleep 60 & wait; sleep 60"})
	if err := p.start(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	p.stop(context.Background(), 200*time.Millisecond)
	if p.running() {
		t.Fatal("still running")
	}
	if time.Since(start) > 10*time.Second {
		t.Fatal("stop took too long")
	}
}
