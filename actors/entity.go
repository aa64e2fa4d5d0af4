package actors

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/ordo-actors/ordo/persistence"
	"github.com/ordo-actors/ordo/proto/ordopb"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
)

// Messages to an entity actor. A call (*call) is sent as it is.
type (
	writeDone struct {
		gen, seq uint64
		err      error
	}
	contDone struct {
		gen, id uint64
		rep     *ordopb.Reply
	}
	drainReq     struct{}
	passivateReq struct{}
	// waitExpired ends a deferred request whose deadline passed.
	waitExpired struct {
		gen uint64
		w   *waiter
	}
	// releaseWaiters fails every deferred request (the shard is handed off).
	releaseWaiters struct{}
	// retryOut makes the next attempt of an outgoing message.
	retryOut struct{ gen, id uint64 }
)

var (
	passivateNow      = &passivateReq{}
	releaseWaitersNow = &releaseWaiters{}
)

// entity is the actor of one active entity. All fields are used from the
// actor's goroutine only.
type entity struct {
	h     *Host
	en    *entry // its ref and shard
	epoch int64
	beh   behavior
	self  *actor.PID

	loaded      bool
	replyNow    bool // the run's reply leaves at once (ReplyBeforeDurable)
	dirty       bool // the dedup window or fences changed since the last write
	reading     bool // a read handler runs (it may not change reminders)
	passivating bool // the entity is passivating (the host parks its calls) and stops once its writes are durable
	// passivateAsked: a run asked to passivate once quiet (Context.Passivate)
	passivateAsked bool
	hookRan        bool // OnPassivate ran; nothing else runs in this activation
	stopping       bool // Stop was requested
	// wantBehind: the current run asked to write behind
	// (Context.WriteBehind). behindRuns: runs that wrote behind and left
	// changes (state, events, reminders, dedup entries) that the next
	// write saves.
	wantBehind bool
	behindRuns uint8
	// presumed: the entity was activated from its zero state without a
	// read (a caller's AsNew hint) and none of its writes is durable yet;
	// its first write is a creation. noPresume: this actor no longer
	// takes the hint (it restarted once). presumedBy is the caller whose
	// hint it took, while presumed.
	presumed, noPresume bool
	presumedBy          *Caller

	gen        uint64 // bumped by every restart; older write results are ignored
	activation uint64 // this activation's ID (Context.Activation)
	seq        uint64 // sequence number of the last write made
	durable    uint64 // highest sequence number known durable
	lastState  []byte // encoded state as of the last write or load
	// recentEnc[i] is the i-th dedup entry, oldest first, encoded as field
	// 4 of EntityRecord. The slice is only appended to and cut from the
	// front, never written in place, so a write can share it with the
	// batcher without a copy.
	recentEnc  [][]byte
	recentSize int      // bytes of recentEnc
	recentIDs  []string // the request IDs of recentEnc, in the same order
	// recentIdx indexes recentEnc by request ID once the window holds more
	// than indexFrom entries (a scan is cheaper, and a map costs memory
	// in every idle entity, below that). Entries are decoded on a hit
	// only: an idle entity keeps its window as bytes.
	recentIdx map[string][]byte
	// tail is how many of the window's newest entries the entity's record
	// holds itself; the others are in its dedup record of generation
	// coldGen (0: none), rewritten, with the whole window, once the tail
	// reaches dedupTail (see persist).
	tail    int
	coldGen uint64
	after   []writeDep
	// fences are the highest epochs accepted from other shards' entities
	// (see fence.go), nil when none.
	fences *senderFences
	tm     *timerSet      // nil until the first After
	rm     *reminderState // nil while it has no reminders (see reminder.go)
	// counted is the window length last added to Host.dedupEntries.
	counted int

	es *eventState // nil: a state-based kind (eventsourced.go)

	held   []held // replies and messages waiting for durability, in order
	outbox []*outMsg
	// outs are the released messages not yet answered (or waiting to be
	// retried), by ID; the entity does not passivate while it has any.
	outs    map[uint64]*outMsg
	nextOut uint64
	// backoff is the retry state of recently failed messages, by target
	// and request ID: a message sent again waits as its retry would have.
	backoff map[backoffKey]*backoffState
	drain   *drainReq

	// Deferred replies: requests whose handler called Defer, by key and by
	// request ID, and the resolutions a handler or continuation made.
	waiting     map[string][]*waiter
	waitIdx     map[string]*waiter
	deferKey    string
	resolutions []resolution

	span trace.Span // of the call or continuation being run; nil: tracing off (trace.go)
}

// waiter is one deferred request and the duplicates that arrived while it
// was pending; all get the same reply.
type waiter struct {
	key   string
	id    string
	hash  uint64
	calls []*call
	timer *time.Timer
}

type resolution struct {
	key   string
	reply proto.Message
	err   error
	early bool // ResolveNow: not held for this run's own write
}

type held struct {
	dep uint64
	c   *call
	rep *ordopb.Reply
	out *outMsg
}

// outMsg is one outgoing message (Send or Request) from the run that made
// it until its final outcome.
type outMsg struct {
	// env holds the target, request ID, payload and metadata; every
	// attempt sends a copy with its own deadline.
	env *ordopb.Envelope
	to  Ref
	msg proto.Message // the payload, unencoded, for a co-located target
	// err: the message could not be built; its continuation gets err and
	// nothing is sent.
	err *Error
	// cont runs the continuation of a Request (nil for a Send); it returns
	// the error of a reply that did not decode.
	cont func(*anypb.Any, error) error
	// policy is the message's retry policy.
	policy RetryPolicy
	// oneWay: sent once, and its reply is neither sent nor awaited
	// (AtMostOnce); it is forgotten as soon as it leaves.
	oneWay bool
	// early: sent without waiting for the sender's write (BeforeDurable)
	early bool

	id       uint64 // key in entity.outs, once released
	dep      uint64 // the sender's write the message was released behind
	attempts int
	first    time.Time   // start of the first attempt
	timer    *time.Timer // the wait before the next attempt, if any

	// The first envelope, the refs and fence it names and the write the
	// message waits for, allocated with it: env points at envBuf.
	envBuf         ordopb.Envelope
	target, sender ordopb.EntityRef
	fence          ordopb.SenderFence
	after          writeDep
}

// backoffKey names the messages that are one request: a target and a
// request ID.
type backoffKey struct {
	to Ref
	id string
}

// backoffState is the retry state of one request that failed recently.
type backoffState struct {
	failures int       // failed attempts so far
	next     time.Time // no attempt before
	keep     time.Time // forgotten after
}

// maxBackoffEntries bounds entity.backoff.
const maxBackoffEntries = 1024

// Receive implements actor.Actor.
func (e *entity) Receive(ctx actor.Context) {
	defer e.countRecent()
	defer e.listen() // after the crash handler below, which may stop the entity
	defer func() {
		if r := recover(); r != nil {
			e.h.log.Error("entity crashed", "entity", e.en.ref, "panic", r, "stack", string(debug.Stack()))
			e.failHeld(errf(ordopb.Code_CODE_INTERNAL, "entity %s crashed", e.en.ref))
			e.failWaiting(errf(ordopb.Code_CODE_UNAVAILABLE, "entity %s crashed", e.en.ref))
			e.h.retire(e.en, false)
			e.stopping = true
			ctx.Stop(ctx.Self())
		}
	}()
	if e.h.deps.Faults != nil {
		e.h.waitFaults()
	}
	e.learnDurable()
	switch m := ctx.Message().(type) {
	case *actor.Started:
		e.self = ctx.Self()
	case *call:
		e.en.queued.Add(-1)
		if m.remind != 0 {
			e.handleRemind(m)
		} else {
			e.handleInvoke(m)
		}
	case *writeDone:
		e.handleWriteDone(m)
	case *contDone:
		e.handleCont(m)
	case *retryOut:
		e.handleRetry(m)
	case *timerFired:
		e.handleTimer(m)
	case *passivateReq:
		if !e.passivating && !e.passivate() {
			e.h.keep(e.en)
		}
	case *drainReq:
		e.drain = m
		e.farewell()
		e.maybeStop()
	case *waitExpired:
		if m.gen == e.gen && e.waitIdx[m.w.id] == m.w {
			e.unwait(m.w)
			e.failWaiter(m.w, errf(ordopb.Code_CODE_DEADLINE, "deadline passed while %s deferred its reply", e.en.ref))
		}
	case *inspectReq:
		m.c <- e.runtime()
	case *releaseWaiters:
		e.failWaiting(errf(ordopb.Code_CODE_NOT_HERE, "entity %s is moving", e.en.ref))
	case *actor.Stopping:
		e.stopping = true // for whatever reason: nothing begins now (passivateIfAsked)
		e.stopTimers()
		if n, _ := e.en.earlyHeld(); n > 0 || len(e.held) > 0 || len(e.waitIdx) > 0 {
			// Formatted only when a reply needs it: a settled saga stops
			// after every transfer, with none.
			stopped := errf(ordopb.Code_CODE_NOT_HERE, "entity %s stopped", e.en.ref)
			e.failHeld(stopped)
			e.failWaiting(stopped)
		}
		e.dropOuts()
	case *actor.Stopped:
		e.recentEnc, e.recentIDs, e.recentIdx, e.recentSize = nil, nil, nil, 0
		e.countRecent()
		e.h.actorStopped(e.en)
	}
	e.passivateIfAsked()
}

// passivateIfAsked begins the passivation a run asked for
// (Context.Passivate) once the entity is quiet.
func (e *entity) passivateIfAsked() {
	if e.passivateAsked && !e.passivating && !e.stopping && e.drain == nil {
		e.passivate()
	}
}

// passivate begins the entity's passivation if it is quiet and no call is
// on its way to it, and reports whether it did: from then on the host
// parks the entity's calls, and the entity stops once its writes are
// durable.
func (e *entity) passivate() bool {
	if !e.quiescent() || !e.h.beginPassivate(e.en) {
		return false
	}
	e.passivating = true
	e.farewell()
	e.maybeStop()
	return true
}

// countRecent adds the change of the entity's dedup window since the last
// call to Host.dedupEntries.
func (e *entity) countRecent() {
	if n := len(e.recentEnc); n != e.counted {
		e.h.dedupEntries.Add(int64(n - e.counted))
		e.counted = n
	}
}

func (e *entity) quiescent() bool {
	return e.seq == e.durable && len(e.held) == 0 && len(e.outs) == 0 && len(e.waitIdx) == 0
}

// maybeStop stops a passivating or draining entity once its writes are
// durable and its replies and messages have left.
func (e *entity) maybeStop() {
	if e.stopping || e.seq != e.durable || len(e.held) != 0 {
		return
	}
	switch {
	case e.passivating:
		e.h.retire(e.en, true)
	case e.drain != nil:
	default:
		return
	}
	e.stopping = true
	e.h.system.Root.Stop(e.self)
}

// farewell runs the OnPassivate hook, once per activation, and writes
// what it changed.
func (e *entity) farewell() {
	if !e.loaded || e.hookRan {
		return
	}
	e.begin()
	ran, panicked := e.runPassivate()
	if final := e.finalSnapshot(); !ran && !final && e.behindRuns == 0 {
		return
	}
	e.hookRan = ran
	if panicked != nil {
		e.h.log.Error("OnPassivate hook panicked", "entity", e.en.ref, "panic", panicked)
		e.rollback()
		return
	}
	if err := e.commit(0); errors.Is(err, ErrTooLarge) {
		e.h.log.Error("OnPassivate hook rolled back", "entity", e.en.ref, "err", err)
	}
}

func (e *entity) runPassivate() (ran bool, panicked any) {
	defer func() {
		if r := recover(); r != nil {
			ran, panicked = true, r
		}
	}()
	return e.beh.passivate(), nil
}

func (e *entity) handleInvoke(c *call) {
	env := c.env
	if c.after != nil {
		// A co-located sender's write waits for this one to share its
		// Save: tell the batcher when this message makes no write.
		defer func() {
			if c.after != nil {
				e.h.batcher.noWrite(*c.after)
			}
		}()
	}
	if timeNow().UnixNano() > c.deadline {
		e.h.finish(c, errReply(env, errf(ordopb.Code_CODE_DEADLINE, "deadline passed before %s was processed", e.en.ref)))
		return
	}
	if e.hookRan {
		// Not expected: calls are parked or refused once the hook ran.
		e.h.finish(c, errReply(env, errf(ordopb.Code_CODE_NOT_HERE, "entity %s is stopping", e.en.ref)))
		return
	}
	// The payload is decoded before the entity is loaded: an undecodable
	// one costs no store read. (The host refused unknown message types.)
	msg := c.msg
	var name protoreflect.FullName
	if msg != nil {
		name = msg.ProtoReflect().Descriptor().FullName()
	} else {
		name = env.GetPayload().MessageName()
	}
	write, newMsg, ok := e.beh.find(name)
	if !ok {
		e.h.finish(c, errReply(env, errf(ordopb.Code_CODE_BAD_REQUEST, "kind %q has no handler for %q", e.en.ref.Kind, name)))
		return
	}
	if msg == nil {
		msg = newMsg()
		if err := env.GetPayload().UnmarshalTo(msg); err != nil {
			e.h.finish(c, errReply(env, errf(ordopb.Code_CODE_BAD_REQUEST, "decoding %s: %v", name, err)))
			return
		}
	}
	e.startSpan(env, name)
	defer e.endSpan()
	if !e.loaded {
		if c.asNew && write {
			e.presumedBy = &c.caller
		}
		if err := e.activate(c.asNew && write); err != nil {
			e.h.finish(c, errReply(env, err))
			return
		}
	} else if e.presumed && !write && e.seq == 0 {
		// A read of an entity assumed new that has written nothing: its
		// assumed state may not answer. Read the store.
		e.reload(errf(ordopb.Code_CODE_UNAVAILABLE, "entity %s restarted", e.en.ref),
			errf(ordopb.Code_CODE_UNAVAILABLE, "entity %s restarted", e.en.ref))
		if err := e.activate(false); err != nil {
			e.h.finish(c, errReply(env, err))
			return
		}
	}
	if have, stale := e.staleSender(c); stale {
		e.refuseStale(c, have)
		return
	}
	id := env.GetRequestId()
	var hash uint64 // 0 for a co-located message, which is never encoded
	if c.msg == nil {
		hash = payloadHash(env.GetPayload())
	}
	if d := e.lookupRecent(id); d != nil {
		if !sameHash(d.GetPayloadHash(), hash) {
			e.h.finish(c, errReply(env, errf(ordopb.Code_CODE_BAD_REQUEST,
				"request ID %q was already used for a different request to %s", id, e.en.ref)))
			return
		}
		e.hold(e.seq, c, d.GetReply(), nil)
		return
	}
	if w, ok := e.waitIdx[id]; ok {
		if !sameHash(w.hash, hash) {
			e.h.finish(c, errReply(env, errf(ordopb.Code_CODE_BAD_REQUEST,
				"request ID %q was already used for a different request to %s", id, e.en.ref)))
			return
		}
		w.calls = append(w.calls, c) // a retry while the reply is deferred: same answer
		return
	}

	e.begin()
	e.beginReminders(c.firing)
	e.reading = !write
	out, panicked, herr := e.runHandler(e.traced(runIn{requestID: id, deadline: c.deadline, md: env.GetMetadata(), caller: &c.caller}), msg)
	e.reading = false
	e.spanOutcome(herr, panicked)
	if panicked != nil {
		e.rollback()
		e.h.finish(c, errReply(env, errf(ordopb.Code_CODE_INTERNAL, "handler of %s for %s panicked: %v", name, e.en.ref, panicked)))
		return
	}
	if herr == nil && e.deferKey == "" && nilMessage(out) {
		// A programming error, like a panic: nothing of the run is kept or
		// recorded, so a retry (after a fix) runs the handler again.
		e.rollback()
		e.h.finish(c, errReply(env, errf(ordopb.Code_CODE_INTERNAL,
			"handler of %s for %s returned a nil reply and a nil error (return a reply or an error, or call Defer)", name, e.en.ref)))
		return
	}
	if code, ok := contextErrorCode(herr); ok {
		// The run's context ended (or a context the handler derived from
		// it): no answer, nothing kept or recorded; a retry runs again.
		if c.firing != nil {
			c.firing.retry = true
		}
		e.rollback()
		e.h.finish(c, errReply(env, errf(code, "handler of %s for %s: %v", name, e.en.ref, herr)))
		return
	}
	if refusedForNow(herr) {
		// The handler cannot answer yet (Unavailable): the same.
		if c.firing != nil {
			c.firing.retry = true
		}
		e.rollback()
		e.h.finish(c, errReply(env, herr))
		return
	}
	if !write {
		if e.emitted() {
			e.rollback()
			herr = errf(ordopb.Code_CODE_INTERNAL, "read handler of %s for %s emitted events (only write handlers may)", name, e.en.ref)
		}
		if herr == nil && (e.deferKey != "" || len(e.resolutions) > 0) {
			e.deferKey, e.resolutions = "", e.resolutions[:0]
			herr = errf(ordopb.Code_CODE_INTERNAL, "read handler of %s for %s deferred or resolved a reply (only write handlers may)", name, e.en.ref)
		}
		rep, err := replyOf(id, out, herr)
		if err != nil {
			rep = errReply(env, err)
		}
		if e.behindRuns == 0 {
			e.flushOutbox(e.seq)
			e.applyTimers()
		} else if err := e.commit(0); err != nil {
			// The read may see changes written behind: they are written
			// now, and the reply waits for them like any other.
			e.h.finish(c, errReply(env, err))
			return
		}
		e.hold(e.seq, c, rep, nil)
		return
	}
	if herr != nil {
		e.rollback()
	}
	rep, err := replyOf(id, out, herr)
	if err != nil {
		e.rollback()
		e.h.finish(c, errReply(env, err))
		return
	}
	if e.acceptSender(c) {
		e.wantBehind = false // a sender's fence moved: written now, like the run
	}
	if e.deferKey != "" {
		w := &waiter{key: e.deferKey, id: id, hash: hash, calls: []*call{c}}
		e.wait(w, c.deadline)
		seq := e.seq
		if c.after != nil {
			e.after = append(e.after, *c.after)
		}
		err := e.commit(0)
		if err == nil && e.seq == seq || errors.Is(err, ErrTooLarge) {
			// Nothing written: nothing depends on the sender.
			if c.after != nil {
				e.after = e.after[:len(e.after)-1]
			}
			if err != nil {
				e.unwait(w)
				e.h.finish(c, errReply(env, err))
			}
			return
		}
		c.after = nil
		return
	}
	added := 0
	if !c.timer { // a timer's firing records no reply
		e.remember(id, hash, rep)
		added = 1
	}
	if c.after != nil {
		e.after = append(e.after, *c.after)
	}
	seq := e.seq
	if err := e.commit(added); err != nil {
		if errors.Is(err, ErrTooLarge) {
			if c.after != nil {
				e.after = e.after[:len(e.after)-1]
			}
			e.h.finish(c, errReply(env, err))
		}
		return
	}
	if e.seq != seq || e.behindRuns == 0 {
		c.after = nil
	}
	// else written behind: the sender's write stops waiting for this one
	// (the deferred noWrite), and the dependency stays in e.after, for the
	// write that saves the run's changes.
	if e.replyNow {
		e.h.finish(c, rep)
		return
	}
	e.hold(e.seq, c, rep, nil)
}

// contextErrorCode reports whether a handler's error is a context's
// (not an *Error), and the code it is answered with.
func contextErrorCode(err error) (ordopb.Code, bool) {
	if err == nil {
		return 0, false // before ae, which escapes: no allocation per run
	}
	var ae *Error
	switch {
	case errors.As(err, &ae):
		return 0, false
	case errors.Is(err, context.DeadlineExceeded):
		return ordopb.Code_CODE_DEADLINE, true
	case errors.Is(err, context.Canceled):
		return ordopb.Code_CODE_UNAVAILABLE, true
	}
	return 0, false
}

// refusedForNow reports whether a handler's error is a retryable *Error
// (Unavailable), which is answered but not recorded.
func refusedForNow(err error) bool {
	if err == nil {
		return false
	}
	var ae *Error
	return errors.As(err, &ae) && Retryable(ae)
}

// nilMessage reports whether a handler's reply is missing: nil, or a
// typed nil pointer.
func nilMessage(m proto.Message) bool {
	return m == nil || !m.ProtoReflect().IsValid()
}

// sameHash reports whether two payload hashes may be of the same request
// (0 stands for a co-located message, whose payload was never encoded).
func sameHash(a, b uint64) bool { return a == b || a == 0 || b == 0 }

// replyOf builds the reply to request id from what a handler returned.
func replyOf(id string, out proto.Message, herr error) (*ordopb.Reply, error) {
	if herr != nil {
		return &ordopb.Reply{RequestId: id, Error: handlerErrorProto(herr)}, nil
	}
	if out == nil {
		return &ordopb.Reply{RequestId: id}, nil
	}
	r := new(replyWithPayload)
	if err := anypb.MarshalFrom(&r.payload, out, proto.MarshalOptions{}); err != nil {
		return nil, errf(ordopb.Code_CODE_INTERNAL, "encoding reply: %v", err)
	}
	r.rep.RequestId, r.rep.Payload = id, &r.payload
	return &r.rep, nil
}

// replyWithPayload is a reply and its payload, allocated together.
type replyWithPayload struct {
	rep     ordopb.Reply
	payload anypb.Any
}

// begin readies the per-run buffers before a handler, hook or
// continuation runs.
func (e *entity) begin() {
	e.outbox = e.outbox[:0]
	e.clearTimerOps()
	e.beginReminders(nil)
	e.deferKey = ""
	e.resolutions = e.resolutions[:0]
	e.wantBehind = false
	e.replyNow = false
	if e.es != nil {
		e.es.begin()
	}
}

// commit ends a write handler, hook or continuation that did not fail: it
// applies its resolutions of deferred replies, writes the state when it
// changed (always when the run added dedup entries: added entries were
// remembered before commit, a write handler's own), and releases its
// messages and replies behind that write. On a failed write the entity
// has restarted and commit returns the error. A record over
// MaxStateBytes, once the oldest dedup entries made what room they can,
// is not written: the run is rolled back (state, messages, resolutions,
// its dedup entries) and commit returns an ErrTooLarge *Error; the
// caller fails the request, if any.
func (e *entity) commit(added int) error {
	resolved := e.resolve()
	added += len(resolved)
	before := e.seq
	rem, remWrite := e.runReminders()
	if e.wantBehind && len(resolved) == 0 && e.keepBehind(added, rem) {
		return nil
	}
	var err error
	if e.es != nil {
		if err = e.commitEvents(added, rem, remWrite); errors.Is(err, ErrTooLarge) {
			return err
		}
	} else if state, serr := e.beh.snapshot(); serr != nil {
		err = serr
	} else if added > 0 || e.dirty || e.behindRuns > 0 || remWrite || string(state) != string(e.lastState) ||
		e.presumed && e.seq == 0 && (len(e.outbox) > 0 || len(resolved) > 0) {
		// (An entity assumed new writes its record before its first
		// answer or message: that write is the creation that checks it.)
		if size, ok := e.fit(len(state)+len(e.fences.encoded())+len(rem.enc), added); !ok {
			e.unremember(added)
			e.rollback()
			return errf(ordopb.Code_CODE_TOO_LARGE, "the record of %s would be %d bytes at least (state %d, reminders %d, new recent replies %d), over MaxStateBytes %d; nothing applied",
				e.en.ref, size, len(state), len(rem.enc), size-len(state)-len(rem.enc), e.h.cfg.MaxStateBytes)
		}
		err = e.persist(state, rem, journalWrite{})
	}
	if err != nil {
		e.rollback()
		e.restart(err)
		return err
	}
	e.committedReminders()
	for _, r := range resolved {
		if r.w.timer != nil {
			r.w.timer.Stop()
		}
		delete(e.waitIdx, r.w.id)
		delete(e.waiting, r.w.key)
	}
	// Held replies and messages leave in order, each once its write is
	// durable (release), so the list stays sorted by write: the early
	// answers (ResolveNow), behind the writes before this run, go ahead
	// of the run's messages, which wait for its write.
	e.holdResolved(resolved, true, before)
	e.flushOutbox(e.seq)
	e.applyTimers()
	e.holdResolved(resolved, false, e.seq)
	return nil
}

// Bounds of what an entity keeps written behind (Context.WriteBehind): a
// run that would keep more writes at once.
const (
	maxBehindRuns   = 32
	maxBehindEvents = 8
)

// keepBehind ends a run that asked to write behind without a write, when
// it may: its changes become the entity's rollback point, its reminders
// and timers take effect, and its messages leave behind the entity's
// earlier writes, as its reply will; the next write saves the changes.
// It reports false, changing nothing, when the run must write now: the
// entity's creation is not durable yet, the run delivers a reminder's
// firing, too much is kept behind already, or the record would not fit
// (the write then says so).
func (e *entity) keepBehind(added int, rem *reminderSet) bool {
	if e.presumed && e.seq == 0 || e.rm != nil && e.rm.firing != nil || e.behindRuns >= maxBehindRuns ||
		e.passivating || e.drain != nil || e.deferKey != "" {
		return false
	}
	if es := e.es; es != nil {
		if len(es.run) > maxBehindEvents {
			return false
		}
		if _, ok := e.fit(len(e.fences.encoded())+len(rem.enc)+es.runBytes, added); !ok {
			return false
		}
		es.keepBehind()
	} else {
		state, err := e.beh.snapshot()
		if err != nil {
			return false // the write reports it
		}
		if _, ok := e.fit(len(state)+len(e.fences.encoded())+len(rem.enc), added); !ok {
			return false
		}
		e.lastState = state
	}
	if e.rm != nil && rem != &e.rm.set {
		e.rm.set = *rem // the index (rm.due) moves with the next write
	}
	e.behindRuns++
	e.committedReminders()
	e.flushOutbox(e.seq)
	e.applyTimers()
	return true
}

// holdResolved holds the answers of the resolutions whose early flag is
// early behind write dep.
func (e *entity) holdResolved(resolved []resolved, early bool, dep uint64) {
	for _, r := range resolved {
		if r.early == early {
			for _, c := range r.w.calls {
				e.hold(dep, c, r.rep, nil)
			}
		}
	}
}

type resolved struct {
	w     *waiter
	rep   *ordopb.Reply
	early bool
}

// resolve turns the run's resolutions into dedup entries (written with the
// run's state; none for a refusal for now, Unavailable, which a retry must
// run again) and the replies to send once that write is durable. The
// waiters stay registered until commit settles them, so that a run rolled
// back leaves them waiting. When a run resolves a key twice, the first
// resolution answers.
func (e *entity) resolve() []resolved {
	if len(e.resolutions) == 0 {
		return nil
	}
	var out []resolved
	for i, r := range e.resolutions {
		if slices.ContainsFunc(e.resolutions[:i], func(p resolution) bool { return p.key == r.key }) {
			continue
		}
		for _, w := range e.waiting[r.key] {
			rep, err := replyOf(w.id, r.reply, r.err)
			if err != nil {
				rep = &ordopb.Reply{RequestId: w.id, Error: ErrorToProto(err)}
			}
			if !refusedForNow(r.err) { // a refusal for now is answered, not recorded
				e.remember(w.id, w.hash, rep)
			}
			out = append(out, resolved{w: w, rep: rep, early: r.early})
		}
	}
	e.resolutions = e.resolutions[:0]
	return out
}

// wait registers a deferred request.
func (e *entity) wait(w *waiter, deadline int64) {
	if e.waiting == nil {
		e.waiting = make(map[string][]*waiter)
		e.waitIdx = make(map[string]*waiter)
	}
	e.waiting[w.key] = append(e.waiting[w.key], w)
	e.waitIdx[w.id] = w
	if deadline != 0 {
		gen, pid, root := e.gen, e.self, e.h.system.Root
		w.timer = time.AfterFunc(time.Until(time.Unix(0, deadline)), func() {
			root.Send(pid, &waitExpired{gen: gen, w: w})
		})
	}
}

// unwait forgets a deferred request.
func (e *entity) unwait(w *waiter) {
	if w.timer != nil {
		w.timer.Stop()
	}
	delete(e.waitIdx, w.id)
	ws := e.waiting[w.key]
	for i, x := range ws {
		if x == w {
			ws = append(ws[:i], ws[i+1:]...)
			break
		}
	}
	if len(ws) == 0 {
		delete(e.waiting, w.key)
	} else {
		e.waiting[w.key] = ws
	}
}

func (e *entity) failWaiter(w *waiter, err *Error) {
	for _, c := range w.calls {
		e.h.finish(c, errReply(c.env, err))
	}
}

// failWaiting fails every deferred request with err (retryable): a retry
// finds the outcome where the entity lives next.
func (e *entity) failWaiting(err *Error) {
	for _, w := range e.waitIdx {
		if w.timer != nil {
			w.timer.Stop()
		}
		e.failWaiter(w, err)
	}
	e.waiting, e.waitIdx = nil, nil
}

// runHandler runs the handler, catching a panic.
func (e *entity) runHandler(in runIn, msg proto.Message) (out proto.Message, panicked any, err error) {
	defer func() {
		if r := recover(); r != nil {
			panicked = r
		}
	}()
	out, err = e.beh.run(in, msg)
	return out, nil, err
}

func handlerErrorProto(err error) *ordopb.Error {
	var ae *Error
	if errors.As(err, &ae) {
		return ErrorToProto(ae)
	}
	return &ordopb.Error{Code: ordopb.Code_CODE_HANDLER, Message: err.Error()}
}

// rollback restores the state as of the last write or load and discards
// messages the handler meant to send.
func (e *entity) rollback() {
	e.outbox = e.outbox[:0]
	e.clearTimerOps()
	e.rollbackReminders()
	e.deferKey = ""
	e.resolutions = e.resolutions[:0]
	e.wantBehind = false
	e.replyNow = false
	if e.es != nil {
		e.rollbackEvents()
		return
	}
	if err := e.beh.load(e.lastState); err != nil {
		// lastState was produced by snapshot; failing to decode it is a bug.
		panic(fmt.Sprintf("actors: %s: cannot decode own state: %v", e.en.ref, err))
	}
}

// indexFrom is the window length from which recentIdx is kept.
const indexFrom = 16

// lookupRecent returns the dedup entry of request id, or nil.
func (e *entity) lookupRecent(id string) *ordopb.DedupEntry {
	var enc []byte
	if e.recentIdx != nil {
		enc = e.recentIdx[id]
	} else {
		for i := len(e.recentIDs) - 1; i >= 0; i-- {
			if e.recentIDs[i] == id {
				enc = e.recentEnc[i]
				break
			}
		}
	}
	if enc == nil {
		return nil
	}
	return decodeRecent(enc)
}

// remember records the reply to request id in the dedup window.
func (e *entity) remember(id string, hash uint64, rep *ordopb.Reply) {
	enc := encodeRecent(id, hash, rep)
	e.recentEnc = append(e.recentEnc, enc)
	e.recentIDs = append(e.recentIDs, id)
	e.recentSize += len(enc)
	e.tail++
	if e.recentIdx != nil {
		e.recentIdx[id] = enc
	} else if len(e.recentIDs) > indexFrom {
		e.recentIdx = make(map[string][]byte, len(e.recentIDs))
		for i, rid := range e.recentIDs {
			e.recentIdx[rid] = e.recentEnc[i]
		}
	}
	e.dirty = true
}

// fit cuts the dedup window to DedupWindow entries and, while the record
// (state of stateLen bytes plus the window) would exceed MaxStateBytes,
// drops the oldest entries, never the newest added ones (the run's own).
// It returns the record's size and true, or, changing nothing, its least
// possible size and false when it cannot fit.
func (e *entity) fit(stateLen, added int) (int, bool) {
	n := len(e.recentEnc)
	over := max(n-e.h.cfg.DedupWindow, 0)
	size := e.recentSize
	for _, old := range e.recentEnc[:over] {
		size -= len(old)
	}
	for stateLen+size > e.h.cfg.MaxStateBytes && over < n-added {
		size -= len(e.recentEnc[over])
		over++
	}
	if stateLen+size > e.h.cfg.MaxStateBytes {
		return stateLen + size, false
	}
	if over == 0 {
		return stateLen + size, true
	}
	for i, old := range e.recentEnc[:over] {
		if e.recentIdx != nil {
			delete(e.recentIdx, e.recentIDs[i])
		}
		e.recentSize -= len(old)
	}
	// Cut from the front without writing in place: a write in flight may
	// share the old slice. Copy once the dropped prefix is as long as the
	// window, so the backing array stays bounded.
	e.recentEnc, e.recentIDs = e.recentEnc[over:], e.recentIDs[over:]
	e.tail = min(e.tail, len(e.recentEnc))
	if cap(e.recentEnc) > 2*e.h.cfg.DedupWindow+16 && len(e.recentEnc) == cap(e.recentEnc) {
		e.recentEnc = append(make([][]byte, 0, 2*e.h.cfg.DedupWindow), e.recentEnc...)
		e.recentIDs = append(make([]string, 0, 2*e.h.cfg.DedupWindow), e.recentIDs...)
	}
	return stateLen + size, true
}

// unremember forgets the newest added dedup entries, of a run rolled back
// before its write. Their slots were never shared with a write, so later
// appends may reuse them.
func (e *entity) unremember(added int) {
	n := len(e.recentEnc) - added
	for i := n; i < len(e.recentEnc); i++ {
		if e.recentIdx != nil {
			delete(e.recentIdx, e.recentIDs[i])
		}
		e.recentSize -= len(e.recentEnc[i])
		e.recentEnc[i], e.recentIDs[i] = nil, ""
	}
	e.recentEnc, e.recentIDs = e.recentEnc[:n], e.recentIDs[:n]
	e.tail = max(e.tail-added, 0)
	e.dirty = false // a run starts with the window written (persist or restart cleared it)
}

// decodeRecent decodes an entry encodeRecent made.
func decodeRecent(enc []byte) *ordopb.DedupEntry {
	_, _, n := protowire.ConsumeTag(enc)
	body, m := protowire.ConsumeBytes(enc[n:])
	d := new(ordopb.DedupEntry)
	if n < 0 || m < 0 || proto.Unmarshal(body, d) != nil {
		// encodeRecent made these bytes; failing here is a bug.
		panic("actors: cannot decode own dedup entry")
	}
	expandRecent(d)
	return d
}

// dedupTail is how many replies an entity's record holds itself before
// they go, with the rest of its dedup window, to its dedup record: a
// write rewrites about dedupTail/2 replies and, every dedupTail writes,
// the window (for a window of W replies, dedupTail near sqrt(2W) writes
// the fewest bytes; W is 128 by default).
const dedupTail = 16

// DedupKindSuffix makes the kind of the records that hold the older
// replies of an entity's dedup window: "<kind>" + DedupKindSuffix, with
// the entity's ID. No kind's name holds a "/". An entity of a kind whose
// name is too long for it (over persistence.MaxKindLen with the suffix)
// keeps its whole window in its record.
const DedupKindSuffix = "/dedup"

// appendDedupRecord appends to b a DedupRecord of generation gen holding
// the encoded entries.
func appendDedupRecord(b []byte, gen uint64, entries [][]byte) []byte {
	size := protowire.SizeVarint(gen) + 1
	for _, enc := range entries {
		size += len(enc)
	}
	b = slices.Grow(b, size)
	b = protowire.AppendTag(b, 1, protowire.VarintType)
	b = protowire.AppendVarint(b, gen)
	for _, enc := range entries {
		b = append(b, enc...)
	}
	return b
}

// loadWindow returns the entity's dedup window as its record stored,
// reading its dedup record when the record has one (dedup_generation),
// and sets the entity's tail and coldGen to match.
func (e *entity) loadWindow(stored *ordopb.EntityRecord) ([]*ordopb.DedupEntry, error) {
	recent := stored.GetRecent()
	gen := stored.GetDedupGeneration()
	e.tail, e.coldGen = len(recent), gen
	if gen == 0 {
		return recent, nil
	}
	ref := e.en.ref
	rec, err := e.h.loader.load(e.withSpan(e.h.ctx), ref.Kind+DedupKindSuffix, ref.ID)
	if err != nil {
		if errors.Is(err, persistence.ErrNotFound) {
			return nil, errf(ordopb.Code_CODE_INTERNAL, "the record of %s names dedup record generation %d, which is missing", ref, gen)
		}
		return nil, errf(ordopb.Code_CODE_UNAVAILABLE, "loading the dedup record of %s: %v", ref, err)
	}
	var cold ordopb.DedupRecord
	if err := proto.Unmarshal(rec.Data, &cold); err != nil {
		return nil, errf(ordopb.Code_CODE_INTERNAL, "decoding the dedup record of %s: %v", ref, err)
	}
	if cold.GetGeneration() != gen {
		return nil, errf(ordopb.Code_CODE_INTERNAL, "the dedup record of %s has generation %d, its record names %d",
			ref, cold.GetGeneration(), gen)
	}
	all := append(cold.GetRecent(), recent...)
	if n := int(stored.GetDedupLen()); n < len(all) {
		all = all[len(all)-n:] // dropped since the dedup record was written
	}
	e.tail = min(e.tail, len(all))
	return all, nil
}

// anyPrefix is the type URL prefix every payload this runtime makes
// carries (anypb.New's).
const anyPrefix = "type.googleapis.com/"

// Records keep dedup entries in a compact form (encodeRecent): the reply
// without the request ID (the entry has it) and its payload's type URL
// without anyPrefix. An entity's record keeps up to DedupWindow entries
// and is written whole on every Save, so each byte here is written
// DedupWindow times.

// expandRecent undoes the compact form in place. Entries stored whole (as
// older records hold them) are left as they are.
func expandRecent(d *ordopb.DedupEntry) {
	rep := d.GetReply()
	if rep == nil {
		return
	}
	if rep.RequestId == "" {
		rep.RequestId = d.GetRequestId()
	}
	if p := rep.GetPayload(); p != nil && p.TypeUrl != "" && !strings.Contains(p.TypeUrl, "/") {
		p.TypeUrl = anyPrefix + p.TypeUrl
	}
}

// payloadHash identifies a request's payload for dedup: FNV-1a 64 over
// the type URL, a zero byte and the serialized message.
func payloadHash(p *anypb.Any) uint64 {
	h := fnv.New64a()
	h.Write([]byte(p.GetTypeUrl()))
	h.Write([]byte{0})
	h.Write(p.GetValue())
	return h.Sum64()
}

// recentField is the field number of EntityRecord.recent.
const recentField = 4

// encodeRecent encodes the dedup entry of request id, its payload's hash
// and its reply rep, in its compact form (see expandRecent), as an
// EntityRecord.recent field, so that a record is its scalar fields
// followed by the entries' bytes, without re-encoding the whole window on
// every write. The bytes are those proto.Marshal makes of the compact
// entry (TestEncodeRecentMatchesMarshal), written directly into one
// buffer: an entry is encoded on every write. rep is not modified.
func encodeRecent(id string, hash uint64, rep *ordopb.Reply) []byte {
	const (
		entryID, entryReply, entryHash = 1, 2, 3
		replyPayload, replyError       = 2, 3
		anyTypeURL, anyValue           = 1, 2
	)
	var payload, errBytes []byte
	var typeURL string
	anyLen := 0
	p := rep.GetPayload()
	if p != nil {
		payload = p.GetValue()
		typeURL = strings.TrimPrefix(p.GetTypeUrl(), anyPrefix)
		anyLen = sizeBytesField(anyTypeURL, len(typeURL)) + sizeBytesField(anyValue, len(payload))
	}
	if e := rep.GetError(); e != nil {
		var err error
		if errBytes, err = proto.Marshal(e); err != nil {
			// Every field of an Error is encodable; failing here is a bug.
			panic(fmt.Sprintf("actors: encoding dedup entry: %v", err))
		}
	}
	replyLen := 0
	if p != nil {
		replyLen += protowire.SizeTag(replyPayload) + protowire.SizeBytes(anyLen)
	}
	if rep.GetError() != nil {
		replyLen += protowire.SizeTag(replyError) + protowire.SizeBytes(len(errBytes))
	}
	bodyLen := sizeBytesField(entryID, len(id)) + protowire.SizeTag(entryReply) + protowire.SizeBytes(replyLen)
	if hash != 0 {
		bodyLen += protowire.SizeTag(entryHash) + protowire.SizeFixed64()
	}
	b := make([]byte, 0, protowire.SizeTag(recentField)+protowire.SizeBytes(bodyLen))
	b = protowire.AppendTag(b, recentField, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(bodyLen))
	b = appendBytesField(b, entryID, id)
	b = protowire.AppendTag(b, entryReply, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(replyLen))
	if p != nil {
		b = protowire.AppendTag(b, replyPayload, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(anyLen))
		b = appendBytesField(b, anyTypeURL, typeURL)
		b = appendBytesField(b, anyValue, payload)
	}
	if rep.GetError() != nil {
		b = protowire.AppendTag(b, replyError, protowire.BytesType)
		b = protowire.AppendBytes(b, errBytes)
	}
	if hash != 0 {
		b = protowire.AppendTag(b, entryHash, protowire.Fixed64Type)
		b = protowire.AppendFixed64(b, hash)
	}
	return b
}

// sizeBytesField is the size of a proto3 string or bytes field of n bytes:
// none when empty.
func sizeBytesField(num protowire.Number, n int) int {
	if n == 0 {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeBytes(n)
}

// appendBytesField appends a proto3 string or bytes field, unless empty.
func appendBytesField[T string | []byte](b []byte, num protowire.Number, v T) []byte {
	if len(v) == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(len(v)))
	return append(b, v...)
}

// persist hands the entity's new state (encoded, and the rollback point
// from now on) to the batcher, with the dedup window and reminders as
// they are now, and, for an event-sourced entity, its new events (state
// is then nil: the snapshot, if any, is in jw). The record itself is
// encoded by the batcher, once per Save.
func (e *entity) persist(state []byte, rem *reminderSet, jw journalWrite) error {
	create := e.presumed && e.seq == 0
	e.seq++
	e.lastState = state
	e.dirty = false
	e.behindRuns = 0
	n := len(e.recentEnc)
	var cold [][]byte
	coldSize := 0
	if e.tail >= dedupTail && len(e.en.ref.Kind)+len(DedupKindSuffix) <= persistence.MaxKindLen {
		// The record's own replies are many: the whole window goes to a
		// new generation of the dedup record, written with this record.
		e.coldGen++
		e.tail = 0
		cold, coldSize = e.recentEnc[:n:n], e.recentSize
	}
	tail := e.recentEnc[n-e.tail : n : n]
	tailSize := 0
	for _, b := range tail {
		tailSize += len(b)
	}
	expect := 0
	for _, out := range e.outbox {
		if out.msg != nil {
			expect++
		}
	}
	due, prevDue := e.commitReminders(rem)
	h, gen, seq, pid, en, sh := e.h, e.gen, e.seq, e.self, e.en, e.en.shard
	e.h.batcher.submit(write{
		ref: e.en.ref, en: e.en, shard: e.en.shard.id, epoch: e.epoch, seq: seq,
		state:     state,
		recent:    tail,
		dedupGen:  e.coldGen,
		dedupLen:  n,
		cold:      cold,
		coldSize:  coldSize,
		fences:    e.fences.encoded(),
		reminders: rem.enc,
		due:       due,
		prevDue:   prevDue,
		size:      len(state) + tailSize + coldSize + len(e.fences.encoded()) + len(rem.enc) + jw.bytes,
		after:     e.after,
		expect:    expect,
		span:      e.span,
		// An event-sourced entity's events, journal fields and deletion.
		journal: jw,
		create:  create,
		done: func(err error) {
			if err == nil {
				if due > 0 {
					sh.noteDue(due) // the host's reminder scan looks at the shard again
				}
				if w := en.listen.Load(); w == 0 || w > seq {
					return // nothing waits for it: the entity learns of it at its next message
				}
			}
			h.told.Add(1)
			h.system.Root.Send(pid, &writeDone{gen: gen, seq: seq, err: err})
		},
	})
	e.after = nil
	return nil
}

// hold keeps a reply (c, rep) or a message (out) until write dep is
// durable. A reply the batcher releases itself, from the saver that makes
// the write durable (earlyReplies), unless a message is held: what a run
// sends leaves in order, its messages before its reply, once the entity
// learns that their write is durable.
func (e *entity) hold(dep uint64, c *call, rep *ordopb.Reply, out *outMsg) {
	if c != nil && len(e.held) == 0 {
		if dep <= e.durable || !e.en.holdEarly(dep, c, rep) {
			e.h.finish(c, rep)
		}
		return
	}
	e.held = append(e.held, held{dep: dep, c: c, rep: rep, out: out})
	e.release()
}

func (e *entity) release() {
	n := 0
	for n < len(e.held) && e.held[n].dep <= e.durable {
		n++
	}
	if n == 0 {
		return
	}
	ready := e.held[:n]
	for _, hd := range ready {
		if hd.c != nil {
			e.h.finish(hd.c, hd.rep)
		} else {
			e.dispatch(hd.out)
		}
	}
	rest := copy(e.held, e.held[n:])
	clear(e.held[rest:]) // release the sent replies and messages
	e.held = e.held[:rest]
	if rest == 0 {
		e.held = nil // an idle entity keeps no buffer
	}
}

// failHeld fails every held reply with err and drops every held message:
// the writes they wait for will never be durable, or the entity stops. A
// reply the batcher held (holdEarly) whose write is durable is answered
// instead, or has left already (a reply is delivered once): the saver
// that makes a write durable raises en.durable before it takes the
// write's replies (queue.settle), and the entity, which learns of the
// write from en.durable, may stop in between.
func (e *entity) failHeld(err *Error) {
	early := e.en.dropEarly()
	durable := e.en.durable.Load() // read after: a saver may raise it meanwhile
	for _, r := range early {
		if r.dep <= durable {
			e.h.finish(r.c, r.rep)
			continue
		}
		e.h.finish(r.c, errReply(r.c.env, err))
	}
	for _, hd := range e.held {
		if hd.c != nil {
			e.h.finish(hd.c, errReply(hd.c.env, err))
		}
	}
	e.held = nil
}

// learnDurable takes in the writes the batcher has made durable since
// the entity last looked, whether or not it told of them: the messages
// that waited for them go, and a stopping entity may stop.
func (e *entity) learnDurable() {
	d := e.en.durable.Load()
	if !e.loaded || d <= e.durable {
		return // not loaded: activate reads the durable seq from the store
	}
	e.durable = d
	e.presumed, e.presumedBy = false, nil // its creation is durable
	e.release()
	e.maybeStop()
}

// listen tells the batcher the lowest write whose durability the entity
// waits to hear of: that of the oldest held message, or, while it is
// passivating, draining or asked to passivate, its last write. The
// batcher tells it of no other (a reply it releases itself); what the
// entity learns late it takes in at its next message (learnDurable). A
// write made durable while the entity was telling is taken in now: the
// batcher, which advances entry.durable before it reads entry.listen, may
// not have seen it.
func (e *entity) listen() {
	for {
		var want uint64
		switch {
		case !e.loaded || e.stopping:
		case len(e.held) > 0:
			want = e.held[0].dep
		case e.seq != e.durable && (e.passivating || e.drain != nil || e.passivateAsked):
			want = e.seq
		}
		if e.en.listen.Load() != want {
			e.en.listen.Store(want)
		}
		if want == 0 || e.en.durable.Load() < want {
			return
		}
		e.learnDurable()
		e.passivateIfAsked()
	}
}

func (e *entity) handleWriteDone(m *writeDone) {
	if m.gen != e.gen {
		return
	}
	switch {
	case m.err == nil:
		e.learnDurable()
	case errors.Is(m.err, errWriteCanceled), errors.Is(m.err, ErrClosed):
		// Withdrawn because the shard is being dropped or the host stops.
	case errors.Is(m.err, persistence.ErrTooLarge):
		e.refused(m.err)
	default:
		if errors.Is(m.err, persistence.ErrExists) {
			// Activated as new on a caller's AsNew hint, but stored: its
			// creation was refused, with the rest of its shard's Save. A
			// co-located write may depend on it, so the shard restarts.
			by := "unknown"
			if e.presumedBy != nil {
				by = e.presumedBy.String()
			}
			e.h.log.Warn("an entity activated as new on a caller's hint (AsNew) is stored; its shard restarts",
				"entity", e.en.ref, "caller", by, "err", m.err)
		}
		if errors.Is(m.err, persistence.ErrSequence) {
			// The store's journal does not end where this owner's writes
			// say it does: a bug, or another writer under the same epoch.
			e.h.log.Error("the store refused the entity's events as out of sequence", "entity", e.en.ref, "err", m.err)
		}
		// Fenced, out of sequence, or an outcome the store could not report
		// (the write may still land later). Restarting the entity from storage under the
		// same epoch would let such a late write overwrite newer state, so
		// the whole shard is given up: it is served again only under a new
		// epoch, whose fence rejects any write still on its way.
		e.h.shardLost(e.en.shard, m.err)
	}
}

// restart discards the in-memory state after a failed write; the next
// message reloads it from storage. An entity with writes not yet durable
// may have co-located entities whose writes depend on them: then the
// whole shard is given up instead, and served again under a new epoch.
func (e *entity) restart(cause error) {
	if e.seq != e.durable {
		e.h.shardLost(e.en.shard, cause)
		return
	}
	e.h.log.Warn("entity write failed; restarting from storage", "entity", e.en.ref, "err", cause)
	failed := errf(ordopb.Code_CODE_UNAVAILABLE, "write of %s failed: %v", e.en.ref, cause)
	e.reload(failed, failed)
}

// refused handles a write the store refused as too large
// (persistence.ErrTooLarge): nothing of it was written, nor of the
// entity's later writes (the batcher fails them with it), and every
// earlier write is durable. The entity restarts from storage; the replies
// that waited for those writes fail with ErrTooLarge (not retryable: the
// same requests would build the same record), deferred requests fail
// retryably; the shard is not affected. Unless a co-located entity's
// write may depend on one of the refused writes (a message sent to it,
// released ahead of the write, is unanswered): that write must never
// become durable, and restarting this entity would reuse the sequence
// numbers it waits for, so the shard is given up as for a failed write.
func (e *entity) refused(cause error) {
	for _, out := range e.outs {
		if out.msg != nil && out.dep > e.durable {
			e.h.shardLost(e.en.shard, cause)
			return
		}
	}
	e.h.log.Warn("the store refused a write of the entity as too large; restarting it from storage", "entity", e.en.ref, "err", cause)
	e.reload(errf(ordopb.Code_CODE_TOO_LARGE, "write of %s refused by the store: %v", e.en.ref, cause),
		errf(ordopb.Code_CODE_UNAVAILABLE, "write of %s refused by the store: %v", e.en.ref, cause))
	e.maybeStop()
}

// reload discards the in-memory state, whose writes not yet durable will
// never be: held replies fail with heldErr, deferred requests with
// waitErr, outgoing messages are forgotten, and the next message loads
// the entity from storage.
func (e *entity) reload(heldErr, waitErr *Error) {
	e.gen++
	e.stopTimers()
	e.h.batcher.cancelEntity(e.en.ref, e.epoch)
	e.failHeld(heldErr)
	e.failWaiting(waitErr)
	e.dropOuts()
	e.loaded = false
	e.presumed, e.presumedBy, e.noPresume = false, nil, true
	e.recentEnc, e.recentIDs, e.recentIdx, e.recentSize = nil, nil, nil, 0
	e.tail, e.coldGen = 0, 0
	e.fences = nil
	e.rm = nil
	e.dirty, e.after = false, nil
	e.behindRuns = 0
	if e.es != nil {
		e.es.dropBehind()
	}
	e.seq, e.durable = 0, 0
}

// activate fences the shard (once per ownership), loads the entity's
// record and runs the OnActivate hook. With presume (a caller's AsNew
// hint, for a kind that trusts it), it does not read the store: the
// entity starts from its zero state, and its first write is a creation.
func (e *entity) activate(presume bool) error {
	if err := e.h.ensureFenced(e.en.shard); err != nil {
		if errors.Is(err, persistence.ErrFenced) {
			e.h.shardLost(e.en.shard, err)
			return errf(ordopb.Code_CODE_FENCED, "shard %d: %v", e.en.shard.id, err)
		}
		return errf(ordopb.Code_CODE_UNAVAILABLE, "fencing shard %d: %v", e.en.shard.id, err)
	}
	var rec persistence.Record
	var err error
	e.presumed = presume && !e.noPresume && e.es == nil
	if e.presumed {
		err = persistence.ErrNotFound
	} else {
		rec, err = e.h.loader.load(e.withSpan(e.h.ctx), e.en.ref.Kind, e.en.ref.ID)
	}
	var stored ordopb.EntityRecord
	switch {
	case errors.Is(err, persistence.ErrNotFound):
	case err != nil:
		return errf(ordopb.Code_CODE_UNAVAILABLE, "loading %s: %v", e.en.ref, err)
	default:
		if err := proto.Unmarshal(rec.Data, &stored); err != nil {
			return errf(ordopb.Code_CODE_INTERNAL, "decoding record of %s: %v", e.en.ref, err)
		}
	}
	if e.es != nil {
		if err := e.activateEvents(e.withSpan(e.h.ctx), &stored); err != nil {
			return err
		}
	} else if err := e.beh.load(stored.GetState()); err != nil {
		return errf(ordopb.Code_CODE_INTERNAL, "decoding state of %s: %v", e.en.ref, err)
	} else if e.lastState, err = e.beh.snapshot(); err != nil {
		return errf(ordopb.Code_CODE_INTERNAL, "encoding state of %s: %v", e.en.ref, err)
	}
	fences, ok := loadSenderFences(&stored)
	if !ok {
		return errf(ordopb.Code_CODE_INTERNAL, "decoding record of %s: sender fences malformed", e.en.ref)
	}
	e.fences = fences
	e.loadReminders(&stored, rec.Due)
	e.seq, e.durable = stored.GetSeq(), stored.GetSeq()
	e.en.advanceDurable(e.seq)
	recent, err := e.loadWindow(&stored)
	if err != nil {
		return err
	}
	e.recentEnc = make([][]byte, len(recent))
	e.recentIDs = make([]string, len(recent))
	e.recentIdx = nil
	if len(recent) > indexFrom {
		e.recentIdx = make(map[string][]byte, len(recent))
	}
	e.recentSize = 0
	for i, d := range recent {
		e.recentIDs[i] = d.GetRequestId()
		e.recentEnc[i] = encodeRecent(d.GetRequestId(), d.GetPayloadHash(), d.GetReply())
		e.recentSize += len(e.recentEnc[i])
		if e.recentIdx != nil {
			e.recentIdx[d.GetRequestId()] = e.recentEnc[i]
		}
	}
	e.loaded = true
	e.activation = newActivationID()
	e.begin()
	if e.beh.activate() {
		if err := e.commit(0); errors.Is(err, ErrTooLarge) {
			e.h.log.Error("OnActivate hook rolled back", "entity", e.en.ref, "err", err)
		} else if err != nil {
			return errf(ordopb.Code_CODE_UNAVAILABLE, "activating %s: %v", e.en.ref, err)
		}
	}
	return nil
}

// newActivationID returns a random non-zero activation ID.
func newActivationID() uint64 {
	for {
		if id := rand.Uint64(); id != 0 {
			return id
		}
	}
}

// outgoing is called by Context.Send/Request during a run. A message to
// an entity of the entity's own shard (co-located, or by chance) is not
// encoded: it is handed over in memory. The message joins the run's
// outbox, which a failed run discards.
func (e *entity) outgoing(ref Ref, msg proto.Message, requestID string, cont func(*anypb.Any, error) error,
	runMD map[string]string, opts []RequestOption) {
	o, err := resolveRequestOptions(e.h.cfg.Retry, runMD, opts)
	out := &outMsg{to: ref, cont: cont, policy: o.policy, oneWay: o.oneWay, early: o.early}
	out.target.Kind, out.target.Id = ref.Kind, ref.ID
	out.sender.Kind, out.sender.Id = e.en.ref.Kind, e.en.ref.ID
	out.fence.Shard, out.fence.Epoch = e.en.shard.id, e.epoch
	out.env = &out.envBuf
	out.env.Target, out.env.RequestId, out.env.Metadata = &out.target, requestID, o.md
	out.env.Sender, out.env.SenderFence, out.env.OneWay = &out.sender, &out.fence, o.oneWay
	if err == nil && o.oneWay && cont != nil {
		err = errors.New("AtMostOnce applies to Send: a Request waits for a reply")
	}
	if err == nil {
		if ShardOf(ref, e.h.cfg.Shards) == e.en.shard.id {
			out.msg = msg
			if msg == nil {
				err = errors.New("nil message")
			} else if verr := ref.Validate(); verr != nil {
				err = verr
			}
		} else {
			// Deterministic, as Envelope: a resend from a later activation
			// must hash like the first send for the receiver's dedup.
			out.env.Payload = new(anypb.Any)
			err = anypb.MarshalFrom(out.env.Payload, msg, deterministic)
		}
	}
	if err != nil {
		if cont == nil {
			e.h.log.Error("dropping a message that cannot be sent", "from", e.en.ref, "to", ref, "err", err)
			return
		}
		out.msg, out.env.Payload = nil, nil
		out.err = errf(ordopb.Code_CODE_BAD_REQUEST, "message to %s: %v", ref, err)
		out.oneWay = false // its continuation gets err
	}
	e.outbox = append(e.outbox, out)
}

// flushOutbox releases the run's messages behind write dep. A message to a
// co-located entity leaves at once, carrying the dependency instead: the
// receiver's write then never becomes durable before this one (same Save
// or a later one), so the two can share a Save. A message that could not
// be built is answered at once (its continuation gets the error). A
// message sent BeforeDurable leaves at once too.
func (e *entity) flushOutbox(dep uint64) {
	for _, out := range e.outbox {
		out.dep = dep
		e.nextOut++
		out.id = e.nextOut
		if e.outs == nil {
			e.outs = make(map[uint64]*outMsg)
		}
		e.outs[out.id] = out
		if out.msg != nil || out.err != nil || out.early {
			e.dispatch(out)
			continue
		}
		e.held = append(e.held, held{dep: dep, out: out})
	}
	e.outbox = nil // an idle entity keeps no buffer
	e.release()
}

// dispatch makes the first attempt of a released message, after the
// backoff its request reached if it failed recently (a resend).
func (e *entity) dispatch(out *outMsg) {
	if out.oneWay {
		e.attempt(out)
		e.forgetOut(out)
		return
	}
	if wait := e.backoffWait(backoffKey{out.to, out.env.GetRequestId()}, timeNow()); wait > 0 {
		e.schedule(out, wait)
		return
	}
	e.attempt(out)
}

// schedule makes the next attempt of out after wait.
func (e *entity) schedule(out *outMsg, wait time.Duration) {
	if wait <= 0 {
		e.attempt(out)
		return
	}
	gen, id, pid, root := e.gen, out.id, e.self, e.h.system.Root
	out.timer = time.AfterFunc(wait, func() { root.Send(pid, &retryOut{gen: gen, id: id}) })
}

func (e *entity) handleRetry(m *retryOut) {
	if m.gen != e.gen {
		return
	}
	out, ok := e.outs[m.id]
	if !ok || out.timer == nil {
		return
	}
	out.timer = nil
	if e.hookRan && out.attempts > 0 {
		// OnPassivate ran: retries stop (first attempts of the hook's own
		// messages still leave).
		e.forgetOut(out)
		return
	}
	e.attempt(out)
}

// attempt sends a copy of out's envelope with a fresh deadline; the
// outcome comes back as a contDone. A routed message runs under the
// ownership of the entity's shard: once that ends, or while the node's
// lease is not valid, the router neither sends nor resends it
// (Sender.Current). A stale owner's retry could otherwise land after the
// shard's new owner re-sent the same message, had it answered and moved
// on (a saga forgetting a finished transfer), and be applied again.
func (e *entity) attempt(out *outMsg) {
	now := timeNow()
	out.attempts++
	if out.first.IsZero() {
		out.first = now
	}
	// The outcome comes back as a contDone; a one-way message's reply, if
	// any, is dropped: nobody waits for it.
	gen, id, pid, root := e.gen, out.id, e.self, e.h.system.Root
	if out.err != nil { // never one-way (outgoing)
		// Delivered as a later message, never re-entrantly.
		root.Send(pid, &contDone{gen: gen, id: id, rep: errReply(out.env, out.err)})
		return
	}
	deadline := now.Add(e.h.cfg.RequestTimeout).UnixNano()
	env := out.env
	if out.attempts == 1 {
		env.DeadlineUnixNano = deadline
	} else {
		// A copy: an earlier attempt's envelope may still be read (a
		// router abandons a slow attempt without waiting for it). It
		// names its sender and fence as the first did; it carries no
		// AsNew hint (ForRetry).
		env = &ordopb.Envelope{Target: env.Target, RequestId: env.RequestId, Payload: env.Payload,
			Metadata: env.Metadata, DeadlineUnixNano: deadline, Sender: env.Sender, SenderFence: env.SenderFence}
	}
	if out.msg != nil {
		msg := out.msg
		if out.attempts > 1 {
			msg = proto.Clone(msg) // the receiver of an earlier attempt had it
		}
		var after *writeDep
		if out.dep > e.durable {
			if out.after.en == nil { // set once: an earlier attempt's receiver may read it
				out.after = writeDep{en: e.en, seq: out.dep}
			}
			after = &out.after
		}
		done := func(*ordopb.Reply) {}
		if !out.oneWay {
			done = func(rep *ordopb.Reply) { root.Send(pid, &contDone{gen: gen, id: id, rep: rep}) }
		}
		e.h.submitLocal(env, msg, after, done)
		return
	}
	sh, h := e.en.shard, e.h
	ctx, cancel := context.WithTimeout(sh.ctx, h.cfg.RequestTimeout)
	var done func(*ordopb.Reply)
	if out.oneWay {
		done = func(*ordopb.Reply) { cancel() }
	} else {
		done = func(rep *ordopb.Reply) {
			cancel()
			root.Send(pid, &contDone{gen: gen, id: id, rep: rep})
		}
	}
	h.router.Route(ctx, env, shardSender{sh: sh, lease: h.deps.Lease}, done)
}

// shardSender is the Sender of an entity's messages: its shard's
// ownership, under the node's lease.
type shardSender struct {
	sh    *shardState
	lease Lease // nil: always valid
}

func (s shardSender) Current() bool {
	return s.sh.ctx.Err() == nil && (s.lease == nil || s.lease.Valid())
}

// Changed reports the lease's changes; the end of the ownership ends the
// message's ctx.
func (s shardSender) Changed() <-chan struct{} {
	if s.lease == nil {
		return nil
	}
	return s.lease.Changed()
}

// handleCont takes the outcome of an attempt: it retries a retryable
// failure as the message's policy allows, and otherwise hands the final
// outcome to the continuation, if any.
func (e *entity) handleCont(m *contDone) {
	if m.gen != e.gen {
		return
	}
	out, ok := e.outs[m.id]
	if !ok {
		return
	}
	err := ErrorFromProto(m.rep.GetError())
	key := backoffKey{out.to, out.env.GetRequestId()}
	if err == nil {
		e.forgetBackoff(key)
	} else {
		now := timeNow()
		wait := e.failed(key, out.policy, now, RetryAfter(err))
		if out.err == nil && retryableAttempt(err) && e.en.shard.ctx.Err() == nil && !e.hookRan &&
			out.policy.allows(out.attempts, out.first, wait, now) {
			e.schedule(out, wait)
			return
		}
	}
	e.forgetOut(out)
	if out.cont == nil || !e.loaded || e.hookRan {
		return // restarted meanwhile, or stopping: durable state carries the work
	}
	e.startContSpan(out)
	defer e.endSpan()
	e.begin()
	var panicked any
	var undecodable error
	func() {
		defer func() { panicked = recover() }()
		undecodable = out.cont(m.rep.GetPayload(), err)
	}()
	if undecodable != nil {
		// A reply that does not decode failed like an error reply: a
		// continuation that resends the request waits for the backoff.
		e.failed(key, out.policy, timeNow(), 0)
	}
	if panicked != nil {
		e.h.log.Error("continuation panicked", "entity", e.en.ref, "panic", panicked)
		e.rollback()
		return
	}
	if err := e.commit(0); errors.Is(err, ErrTooLarge) {
		e.h.log.Error("continuation rolled back", "entity", e.en.ref, "err", err)
	}
}

// forgetOut forgets an outgoing message that reached its final outcome.
func (e *entity) forgetOut(out *outMsg) {
	delete(e.outs, out.id)
	if len(e.outs) == 0 {
		e.outs = nil // an idle entity keeps no map
	}
}

// dropOuts forgets every outgoing message (the entity stops or restarts):
// no further attempt is made and no continuation runs.
func (e *entity) dropOuts() {
	for _, out := range e.outs {
		if out.timer != nil {
			out.timer.Stop()
		}
	}
	e.outs = nil
}

// failed records a failed attempt of the request key and returns how long
// to wait before its next attempt: the policy's backoff, or the
// receiver's retry-after hint when that is longer.
func (e *entity) failed(key backoffKey, p RetryPolicy, now time.Time, hint time.Duration) time.Duration {
	st := e.backoff[key]
	if st == nil || now.After(st.keep) {
		if e.backoff == nil {
			e.backoff = make(map[backoffKey]*backoffState)
		}
		if len(e.backoff) >= maxBackoffEntries {
			e.pruneBackoff(now)
		}
		st = &backoffState{}
		e.backoff[key] = st
	}
	st.failures++
	wait := max(p.backoff(st.failures), hint)
	st.next = now.Add(wait)
	st.keep = st.next.Add(p.Max)
	return wait
}

// backoffWait returns how long a new message of the request key must wait
// for the backoff its earlier attempts reached.
func (e *entity) backoffWait(key backoffKey, now time.Time) time.Duration {
	st := e.backoff[key]
	if st == nil {
		return 0
	}
	if now.After(st.keep) {
		e.forgetBackoff(key)
		return 0
	}
	return st.next.Sub(now)
}

func (e *entity) forgetBackoff(key backoffKey) {
	if e.backoff == nil {
		return
	}
	delete(e.backoff, key)
	if len(e.backoff) == 0 {
		e.backoff = nil
	}
}

// pruneBackoff makes room in a full backoff map: expired entries first,
// then any.
func (e *entity) pruneBackoff(now time.Time) {
	for k, st := range e.backoff {
		if now.After(st.keep) {
			delete(e.backoff, k)
		}
	}
	for k := range e.backoff {
		if len(e.backoff) < maxBackoffEntries {
			break
		}
		delete(e.backoff, k)
	}
}
