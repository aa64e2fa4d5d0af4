package actors

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// mailboxThroughput is how many messages one mailbox run handles before it
// yields its goroutine (protoactor's default).
const mailboxThroughput = 300

// workerIdle is how long a pool worker with nothing to run waits for work
// before it exits (between one and two of these).
const workerIdle = time.Second

// pool runs the entities' mailboxes. protoactor hands a dispatcher each
// mailbox run (up to Throughput messages) as a function; its default
// dispatcher starts a goroutine per run, whose stack starts small and is
// grown and copied again on every run once a handler's frames outgrow it.
// A pool hands runs to goroutines that finished one and kept their grown
// stacks, and starts a goroutine only when none is idle, so a run never
// waits for another (a handler may block: a fault pause (HostDeps.Faults), a slow hook).
type pool struct {
	work chan func()
	stop chan struct{}
}

var _ actor.Dispatcher = (*pool)(nil)

func newPool() *pool {
	return &pool{work: make(chan func()), stop: make(chan struct{})}
}

// Schedule runs fn on an idle worker, or on a new one.
func (p *pool) Schedule(fn func()) {
	select {
	case p.work <- fn:
	default:
		go p.worker(fn)
	}
}

// Throughput is the most messages a mailbox run handles.
func (p *pool) Throughput() int { return mailboxThroughput }

// close makes idle workers exit, and busy ones once their run ends.
func (p *pool) close() { close(p.stop) }

func (p *pool) worker(fn func()) {
	fn()
	t := time.NewTimer(workerIdle)
	defer t.Stop()
	ran := false
	for {
		select {
		case fn := <-p.work:
			fn()
			ran = true
		case <-t.C:
			if !ran {
				return
			}
			ran = false
			t.Reset(workerIdle)
		case <-p.stop:
			return
		}
	}
}
