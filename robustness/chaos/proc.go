package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/ordo-actors/ordo/internal/redact"
)

// errNotRunning is returned when a signal is sent to a process that is not
// running.
var errNotRunning = errors.New("chaos: process not running")

// proc supervises one child process, restartable. Every incarnation runs in
// its own process group (signals go to the whole group, so a child's own
// children go with it), with its output appended to one log file, and with
// SIGKILL as its parent-death signal so that a killed orchestrator leaves
// no orphans. Safe for concurrent use.
type proc struct {
	name    string
	path    string
	logPath string

	mu          sync.Mutex
	args        []string
	cmd         *exec.Cmd
	done        chan struct{} // closed when the current incarnation exited
	exitErr     error
	incarnation int
	started     time.Time // when the current incarnation started
	stopped     bool      // SIGSTOP sent and no SIGCONT yet
}

func newProc(name, path, logPath string, args []string) *proc {
	done := make(chan struct{})
	close(done)
	return &proc{name: name, path: path, logPath: logPath, args: args, done: done}
}

// setArgs replaces the arguments used by the next start.
func (p *proc) setArgs(args []string) {
	p.mu.Lock()
	p.args = args
	p.mu.Unlock()
}

// start starts a new incarnation. It fails if one is still running.
func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.done:
	default:
		return fmt.Errorf("chaos: %s is already running", p.name)
	}
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("chaos: %s log: %w", p.name, err)
	}
	fmt.Fprintf(logf, "=== %s incarnation %d: %s %v\n", time.Now().UTC().Format(time.RFC3339Nano), p.incarnation+1, p.path,
		redact.Args(p.args))
	cmd := exec.Command(p.path, p.args...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return fmt.Errorf("chaos: starting %s: %w", p.name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.exitErr, p.stopped = cmd, done, nil, false
	p.incarnation++
	p.started = time.Now()
	go func() {
		err := cmd.Wait()
		_ = logf.Close()
		p.mu.Lock()
		p.exitErr = err
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

// running reports whether the current incarnation has not exited.
func (p *proc) running() bool {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// exited returns a channel closed when the current incarnation exits, and
// the incarnation's number.
func (p *proc) exited() (<-chan struct{}, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done, p.incarnation
}

// exitError returns the last incarnation's wait error (nil for exit 0).
func (p *proc) exitError() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exitErr
}

// pid returns the current incarnation's process ID, 0 when not running.
func (p *proc) pid() int {
	if !p.running() {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd.Process.Pid
}

// state is a snapshot of a process: its current incarnation's number,
// process ID (0 when not running), start time, and whether it is stopped.
func (p *proc) state() (incarnation, pid int, started time.Time, stopped bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.done:
	default:
		pid = p.cmd.Process.Pid
	}
	return p.incarnation, pid, p.started, p.stopped
}

// signal sends sig to the current incarnation's process group.
func (p *proc) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.done:
		return fmt.Errorf("%w: %s", errNotRunning, p.name)
	default:
	}
	if err := syscall.Kill(-p.cmd.Process.Pid, sig); err != nil {
		return fmt.Errorf("chaos: signal %v to %s: %w", sig, p.name, err)
	}
	switch sig {
	case syscall.SIGSTOP:
		p.stopped = true
	case syscall.SIGCONT:
		p.stopped = false
	}
	return nil
}

// isStopped reports whether the process was sent SIGSTOP and not SIGCONT.
func (p *proc) isStopped() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stopped
}

// kill sends SIGKILL to the process group and waits for the exit.
func (p *proc) kill() {
	done, _ := p.exited()
	_ = p.signal(syscall.SIGKILL)
	<-done
}

// stop asks the process to exit with SIGTERM (resuming it first if it is
// stopped) and kills it if it has not exited within grace or when ctx ends.
func (p *proc) stop(ctx context.Context, grace time.Duration) {
	done, _ := p.exited()
	if p.isStopped() {
		_ = p.signal(syscall.SIGCONT)
	}
	if p.signal(syscall.SIGTERM) != nil {
		<-done
		return
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		p.kill()
	case <-ctx.Done():
		p.kill()
	}
}

// wait waits until the current incarnation exits or ctx ends.
func (p *proc) wait(ctx context.Context) error {
	done, _ := p.exited()
	select {
	case <-done:
		return p.exitError()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run starts the process and waits for it to exit, killing it when ctx
// ends; it returns the exit error.
func (p *proc) run(ctx context.Context) error {
	if err := p.start(); err != nil {
		return err
	}
	if err := p.wait(ctx); err != nil {
		if ctx.Err() != nil {
			p.kill()
			return fmt.Errorf("chaos: %s: %w", p.name, ctx.Err())
		}
		return fmt.Errorf("chaos: %s: %w (log %s)", p.name, err, p.logPath)
	}
	return nil
}

// exitCode returns the exit code in err (from wait or run), or -1.
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}
