package actors

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// After a burst has started many workers, a steady load that needs one
// worker at a time keeps only a few: the others, never handed a run,
// exit. A pool that handed runs round to every idle worker kept them all
// alive for as long as the load lasted.
func TestPoolShrinksAfterBurstUnderSteadyLoad(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	p := &pool{idle: 20 * time.Millisecond}
	defer p.close()

	const burst = 64
	release := make(chan struct{})
	var started sync.WaitGroup
	started.Add(burst)
	for range burst {
		p.Schedule(func() { started.Done(); <-release })
	}
	started.Wait()
	require.EqualValues(t, burst, p.workers.Load(), "each blocked run has a worker of its own")
	close(release)

	// A steady load: one run at a time, back to back, for as long as it
	// takes the spare workers to leave.
	ran := make(chan struct{})
	deadline := time.Now().Add(20 * time.Second)
	for p.workers.Load() > 2 {
		require.Truef(t, time.Now().Before(deadline), "%d workers still alive under a load that needs one", p.workers.Load())
		p.Schedule(func() { ran <- struct{}{} })
		<-ran
	}
}

// Workers a burst started beyond maxIdle exit when their run ends, without
// waiting out the idle timeout: the pool keeps maxIdle idle workers, not
// the largest burst of the last second.
func TestPoolKeepsAtMostMaxIdleWorkers(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	p := &pool{idle: time.Hour, maxIdle: 4} // no worker times out here
	defer p.close()

	const burst = 64
	release := make(chan struct{})
	var started, ended sync.WaitGroup
	started.Add(burst)
	ended.Add(burst)
	for range burst {
		p.Schedule(func() { started.Done(); <-release; ended.Done() })
	}
	started.Wait()
	require.EqualValues(t, burst, p.workers.Load(), "each blocked run has a worker of its own")
	close(release)
	ended.Wait()
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if n := p.workers.Load(); n > 4 {
			return fmt.Errorf("%d workers alive after the burst, want at most maxIdle 4", n)
		}
		return nil
	})
	p.mu.Lock()
	idle := len(p.free)
	p.mu.Unlock()
	require.Equal(t, 4, idle, "the pool keeps maxIdle workers for the next runs")

	// The kept workers still run what comes.
	done := make(chan struct{})
	p.Schedule(func() { close(done) })
	<-done
}

// Every scheduled run runs, however runs and idle timeouts interleave, and
// close lets every worker exit.
func TestPoolRunsEveryRunAndCloses(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	p := &pool{idle: time.Millisecond} // workers time out while runs arrive
	var wg sync.WaitGroup
	const senders, runs = 8, 2000
	var mu sync.Mutex
	count := 0
	for range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			done := make(chan struct{})
			for i := range runs {
				p.Schedule(func() {
					mu.Lock()
					count++
					mu.Unlock()
					done <- struct{}{}
				})
				<-done
				if i%100 == 0 {
					// A pause longer than the idle timeout, under test:
					// workers time out while other senders' runs arrive.
					time.Sleep(2 * time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	require.Equal(t, senders*runs, count)
	p.close()
	// After close, a run still runs (on a worker that then exits).
	done := make(chan struct{})
	p.Schedule(func() { close(done) })
	<-done
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if n := p.workers.Load(); n != 0 {
			return fmt.Errorf("%d workers alive after close", n)
		}
		return nil
	})
}
