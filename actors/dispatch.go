package actors

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/ordo-actors/ordo/internal/stack"
)

// mailboxThroughput is how many messages one mailbox run handles before it
// yields its goroutine (protoactor's default).
const mailboxThroughput = 300

// workerIdle is how long a pool worker with nothing to run waits for work
// before it exits: at least that long, less than twice (pool.reap).
const workerIdle = time.Second

// maxIdleWorkers is the most idle workers a host's pool keeps: enough for
// the runs a steady load has at once on this machine. Workers a burst
// started beyond it exit as soon as their run ends.
func maxIdleWorkers() int { return max(8, 4*runtime.GOMAXPROCS(0)) }

// pool runs the entities' mailboxes. protoactor hands a dispatcher each
// mailbox run (up to Throughput messages) as a function; its default
// dispatcher starts a goroutine per run, whose stack starts small and is
// grown and copied again on every run once a handler's frames outgrow it.
// A pool hands runs to goroutines that finished one, and starts a
// goroutine only when none is idle, so a run never waits for another (a
// handler may block: a fault pause (HostDeps.Faults), a slow hook). A
// worker grows its stack at the top before each run (package stack): the
// garbage collector shrinks the stack of a worker waiting for work.
//
// A run goes to the worker that became idle last (a stack, not a queue),
// so after a burst the load stays on as few workers as it needs and the
// others, left without work, exit after idle: handing runs round to
// every idle worker would keep all of them alive for as long as the load
// lasts. At most maxIdle workers wait idle at all: a burst of runs (a
// Save's replies reaching many entities at once) starts as many workers
// as it has runs, and those beyond maxIdle exit when their run ends
// rather than a second later, so the count of goroutines follows the runs
// in progress, not the largest burst of the last second.
//
// Idle workers are retired by one goroutine per pool (reap), which ticks
// every idle and retires those that have waited since before its last
// tick (between idle and twice idle): a worker waits on its run channel
// alone, with no timer of its own to arm on every run.
type pool struct {
	idle    time.Duration // 0: a worker exits when its run ends
	maxIdle int           // 0: no limit

	mu      sync.Mutex
	free    []*worker // idle workers, the most recently idle last
	closed  bool
	tick    uint64        // reap's ticks so far
	reaping bool          // reap is running
	done    chan struct{} // closed by close, for reap
	workers atomic.Int64  // live workers, for tests
}

// worker is one pool goroutine; run hands it its next function (nil: exit).
type worker struct {
	run    chan func()
	idleAt uint64 // pool.tick when it last became idle; guarded by pool.mu
}

var _ actor.Dispatcher = (*pool)(nil)

func newPool() *pool { return &pool{idle: workerIdle, maxIdle: maxIdleWorkers()} }

// Schedule runs fn on the most recently idle worker, or on a new one.
func (p *pool) Schedule(fn func()) {
	p.mu.Lock()
	if n := len(p.free); n > 0 && !p.closed {
		w := p.free[n-1]
		p.free[n-1] = nil
		p.free = p.free[:n-1]
		p.mu.Unlock()
		w.run <- fn // buffered: the worker is waiting or about to
		return
	}
	if !p.reaping && !p.closed && p.idle > 0 {
		p.reaping = true
		p.done = make(chan struct{})
		go p.reap(p.done)
	}
	p.mu.Unlock()
	p.workers.Add(1)
	go p.work(&worker{run: make(chan func(), 1)}, fn)
}

// Throughput is the most messages a mailbox run handles.
func (p *pool) Throughput() int { return mailboxThroughput }

// close makes idle workers exit, and busy ones once their run ends.
func (p *pool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.closed = true
	for _, w := range p.free {
		w.run <- nil
	}
	p.free = nil
	if p.done != nil {
		close(p.done)
	}
}

func (p *pool) work(w *worker, fn func()) {
	defer p.workers.Add(-1)
	for fn != nil {
		// The stack the garbage collector shrank while the worker waited
		// is grown here, not deep in a handler (package stack).
		stack.Grow()
		fn()
		p.mu.Lock()
		if p.closed || p.idle <= 0 || (p.maxIdle > 0 && len(p.free) >= p.maxIdle) {
			p.mu.Unlock()
			return
		}
		w.idleAt = p.tick
		p.free = append(p.free, w)
		p.mu.Unlock()
		fn = <-w.run
	}
}

// reap retires, every idle, the workers idle since before its previous
// tick, until done is closed.
func (p *pool) reap(done <-chan struct{}) {
	t := time.NewTicker(p.idle)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		p.mu.Lock()
		p.tick++
		// The least recently idle are at the bottom of the stack.
		n := 0
		for n < len(p.free) && p.free[n].idleAt+1 < p.tick {
			p.free[n].run <- nil
			n++
		}
		if n > 0 {
			k := copy(p.free, p.free[n:])
			clear(p.free[k:])
			p.free = p.free[:k]
		}
		p.mu.Unlock()
	}
}
