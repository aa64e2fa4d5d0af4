package actors

import (
	"fmt"
	"strconv"
	"time"

	"github.com/ordo-actors/ordo/proto/ordopb"
	"google.golang.org/protobuf/proto"
)

// MaxTimers is the most timers (After) one entity may have pending.
const MaxTimers = 1024

// maxTimerNameLen is the longest timer name, in bytes.
const maxTimerNameLen = 128

// After schedules msg to be delivered to this entity after d, as a message
// to its own handler of msg's type, run as any other (a write handler's
// changes are written and gated as usual) with Caller the entity itself.
// A timer is in memory only: it is cancelled when the entity stops
// (passivation, restart from storage, loss or hand-off of its shard), and
// it does not keep the entity active. Work that must happen whatever
// becomes of this activation belongs in durable state, re-driven on
// activation (OnActivate).
//
// name identifies the timer within the entity: After with the name of a
// pending timer replaces it. The timer is set only if the run succeeds (a
// run rolled back sets none); msg must not be changed after the call. A
// timer's firing has no request ID for deduplication and records no reply.
// After returns an error, and sets nothing, when name is empty or over
// 128 bytes, when the kind has no handler for msg's type, or when the
// entity already has MaxTimers timers pending.
func (c *Context[S]) After(d time.Duration, name string, msg proto.Message) error {
	return c.ent.setTimer(d, name, msg)
}

// CancelTimer cancels the pending timer name, if the run succeeds, and
// reports whether one was pending (or set earlier in this run).
func (c *Context[S]) CancelTimer(name string) bool {
	return c.ent.cancelTimer(name)
}

// timerFired is sent to the entity's mailbox when a timer is due.
type timerFired struct {
	gen   uint64
	name  string
	token uint64
}

type entityTimer struct {
	token uint64
	msg   proto.Message
	t     *time.Timer
}

// timerSet is an entity's timers, allocated by its first After: entities
// that use none pay one pointer.
type timerSet struct {
	pending map[string]*entityTimer // by name
	ops     []timerOp               // the current run's changes, applied if it succeeds
	added   map[string]bool         // names the run sets that were not pending
	seq     uint64                  // tokens
}

// timerOp is a timer change a run made, applied when the run succeeds.
type timerOp struct {
	name string
	d    time.Duration
	msg  proto.Message // nil: cancel
}

func (e *entity) setTimer(d time.Duration, name string, msg proto.Message) error {
	switch {
	case name == "" || len(name) > maxTimerNameLen:
		return fmt.Errorf("actors: timer name must be 1 to %d bytes", maxTimerNameLen)
	case nilMessage(msg):
		return fmt.Errorf("actors: timer %q: nil message", name)
	case !e.handles(msg):
		return fmt.Errorf("actors: timer %q: kind %q has no handler for %s", name, e.en.ref.Kind, msg.ProtoReflect().Descriptor().FullName())
	}
	if e.tm == nil {
		e.tm = &timerSet{}
	}
	if _, pending := e.tm.pending[name]; !pending && !e.tm.added[name] {
		if len(e.tm.pending)+len(e.tm.added) >= MaxTimers {
			return fmt.Errorf("actors: %s has %d timers pending (MaxTimers)", e.en.ref, MaxTimers)
		}
		if e.tm.added == nil {
			e.tm.added = make(map[string]bool)
		}
		e.tm.added[name] = true
	}
	e.tm.ops = append(e.tm.ops, timerOp{name: name, d: max(d, 0), msg: msg})
	return nil
}

func (e *entity) handles(msg proto.Message) bool {
	_, _, ok := e.beh.find(msg.ProtoReflect().Descriptor().FullName())
	return ok
}

func (e *entity) cancelTimer(name string) bool {
	if e.tm == nil {
		return false
	}
	pending := false
	if _, ok := e.tm.pending[name]; ok {
		pending = true
	}
	for _, op := range e.tm.ops {
		if op.name == name {
			pending = op.msg != nil
		}
	}
	delete(e.tm.added, name)
	e.tm.ops = append(e.tm.ops, timerOp{name: name})
	return pending
}

// applyTimers carries out the timer changes of a run that succeeded.
func (e *entity) applyTimers() {
	if e.tm == nil {
		return
	}
	for _, op := range e.tm.ops {
		if old, ok := e.tm.pending[op.name]; ok {
			old.t.Stop()
			delete(e.tm.pending, op.name)
			e.h.timers.Add(-1)
		}
		if op.msg == nil {
			continue
		}
		if e.tm.pending == nil {
			e.tm.pending = make(map[string]*entityTimer)
		}
		e.tm.seq++
		fired := &timerFired{gen: e.gen, name: op.name, token: e.tm.seq}
		pid, root := e.self, e.h.system.Root
		e.tm.pending[op.name] = &entityTimer{token: fired.token, msg: op.msg,
			t: time.AfterFunc(op.d, func() { root.Send(pid, fired) })}
		e.h.timers.Add(1)
	}
	e.clearTimerOps()
}

// clearTimerOps forgets the current run's timer changes.
func (e *entity) clearTimerOps() {
	if e.tm == nil {
		return
	}
	e.tm.ops = e.tm.ops[:0]
	clear(e.tm.added)
}

// stopTimers cancels every pending timer (the activation ends).
func (e *entity) stopTimers() {
	if e.tm == nil {
		return
	}
	for name, t := range e.tm.pending {
		t.t.Stop()
		delete(e.tm.pending, name)
		e.h.timers.Add(-1)
	}
	e.clearTimerOps()
}

// handleTimer runs a due timer's message, unless the timer was cancelled
// or replaced, or the entity restarted, since it was set.
func (e *entity) handleTimer(m *timerFired) {
	if e.tm == nil {
		return
	}
	t, ok := e.tm.pending[m.name]
	if m.gen != e.gen || !ok || t.token != m.token || e.passivating || e.drain != nil || e.stopping {
		return
	}
	delete(e.tm.pending, m.name)
	e.h.timers.Add(-1)
	c := &call{
		env:      &ordopb.Envelope{Target: e.en.ref.Proto(), RequestId: "ordo.timer/" + m.name + "/" + strconv.FormatUint(m.token, 10)},
		msg:      t.msg,
		reply:    func(*ordopb.Reply) {},
		shard:    e.en.shard,
		caller:   Caller{Class: CallerEntity, Entity: e.en.ref},
		deadline: timeNow().Add(e.h.cfg.DefaultDeadline).UnixNano(),
		timer:    true,
	}
	e.handleInvoke(c)
}
