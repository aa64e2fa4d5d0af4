package actors

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"runtime/debug"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/ordo-actors/ordo/persistence"
	"github.com/ordo-actors/ordo/proto/ordopb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
)

// Messages to an entity actor.
type (
	invoke    struct{ c *call }
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
)

var passivateNow = &passivateReq{}

// entity is the actor of one active entity. All fields are used from the
// actor's goroutine only.
type entity struct {
	h     *Host
	en    *entry
	ref   Ref
	shard *shardState
	epoch int64
	beh   behavior
	self  *actor.PID

	loaded    bool
	gen       uint64 // bumped by every restart; older write results are ignored
	seq       uint64 // sequence number of the last write made
	durable   uint64 // highest sequence number known durable
	lastState []byte // encoded state as of the last write or load
	recent    []*ordopb.DedupEntry
	recentEnc [][]byte // recent[i] encoded as field 4 of EntityRecord
	recentIdx map[string]*ordopb.DedupEntry

	held     []held // replies and messages waiting for durability, in order
	outbox   []*outMsg
	conts    map[uint64]func(*anypb.Any, error)
	nextCont uint64
	drain    *drainReq
}

type held struct {
	dep uint64
	c   *call
	rep *ordopb.Reply
	out *outMsg
}

type outMsg struct {
	env    *ordopb.Envelope
	contID uint64 // 0: no continuation
}

// Receive implements actor.Actor.
func (e *entity) Receive(ctx actor.Context) {
	defer func() {
		if r := recover(); r != nil {
			e.h.log.Error("entity crashed", "entity", e.ref, "panic", r, "stack", string(debug.Stack()))
			e.failHeld(errf(ordopb.Code_CODE_INTERNAL, "entity %s crashed", e.ref))
			e.h.mu.Lock()
			e.h.removeLocked(e.en)
			e.h.mu.Unlock()
			ctx.Stop(ctx.Self())
		}
	}()
	e.h.waitIfPaused()
	switch m := ctx.Message().(type) {
	case *actor.Started:
		e.self = ctx.Self()
	case *invoke:
		e.en.queued.Add(-1)
		e.handleInvoke(m.c)
	case *writeDone:
		e.handleWriteDone(m)
	case *contDone:
		e.handleCont(m)
	case *passivateReq:
		if !e.quiescent() {
			e.h.keep(e.en)
			return
		}
		if e.h.tryRemove(e.en) {
			ctx.Stop(ctx.Self())
		}
	case *drainReq:
		e.drain = m
		e.maybeDrained(ctx)
	case *actor.Stopping:
		e.failHeld(errf(ordopb.Code_CODE_NOT_HERE, "entity %s stopped", e.ref))
		e.conts = nil
	case *actor.Stopped:
		close(e.en.stopped)
	}
}

func (e *entity) quiescent() bool {
	return e.seq == e.durable && len(e.held) == 0 && len(e.conts) == 0
}

func (e *entity) maybeDrained(ctx actor.Context) {
	if e.drain != nil && e.seq == e.durable && len(e.held) == 0 {
		ctx.Stop(ctx.Self())
	}
}

func (e *entity) handleInvoke(c *call) {
	env := c.env
	if d := env.GetDeadlineUnixNano(); d != 0 && timeNow().UnixNano() > d {
		e.h.finish(c, errReply(env, errf(ordopb.Code_CODE_DEADLINE, "deadline passed before %s was processed", e.ref)))
		return
	}
	if !e.loaded {
		if err := e.activate(); err != nil {
			e.h.finish(c, errReply(env, err))
			return
		}
	}
	id := env.GetRequestId()
	hash := payloadHash(env.GetPayload())
	if d, ok := e.recentIdx[id]; ok {
		if d.GetPayloadHash() != hash {
			e.h.finish(c, errReply(env, errf(ordopb.Code_CODE_BAD_REQUEST,
				"request ID %q was already used for a different request to %s", id, e.ref)))
			return
		}
		e.hold(e.seq, c, d.GetReply(), nil)
		return
	}
	name := env.GetPayload().MessageName()
	write, newMsg, ok := e.beh.find(name)
	if !ok {
		e.h.finish(c, errReply(env, errf(ordopb.Code_CODE_BAD_REQUEST, "kind %q has no handler for %q", e.ref.Kind, name)))
		return
	}
	msg := newMsg()
	if err := env.GetPayload().UnmarshalTo(msg); err != nil {
		e.h.finish(c, errReply(env, errf(ordopb.Code_CODE_BAD_REQUEST, "decoding %s: %v", name, err)))
		return
	}

	e.outbox = e.outbox[:0]
	out, panicked, herr := e.runHandler(id, msg)
	if panicked != nil {
		e.rollback()
		e.h.finish(c, errReply(env, errf(ordopb.Code_CODE_INTERNAL, "handler of %s for %s panicked: %v", name, e.ref, panicked)))
		return
	}
	rep := &ordopb.Reply{RequestId: id}
	if herr != nil {
		rep.Error = handlerErrorProto(herr)
		if write {
			e.rollback()
		}
	} else if out != nil {
		any, err := anypb.New(out)
		if err != nil {
			e.rollback()
			e.h.finish(c, errReply(env, errf(ordopb.Code_CODE_INTERNAL, "encoding reply: %v", err)))
			return
		}
		rep.Payload = any
	}
	if !write {
		e.flushOutbox(e.seq)
		e.hold(e.seq, c, rep, nil)
		return
	}
	e.remember(id, hash, rep)
	if err := e.persist(); err != nil {
		e.h.finish(c, errReply(env, err))
		e.restart(err)
		return
	}
	e.flushOutbox(e.seq)
	e.hold(e.seq, c, rep, nil)
}

// runHandler runs the handler, catching a panic.
func (e *entity) runHandler(id string, msg proto.Message) (out proto.Message, panicked any, err error) {
	defer func() {
		if r := recover(); r != nil {
			panicked = r
		}
	}()
	out, err = e.beh.run(id, msg)
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
	if err := e.beh.load(e.lastState); err != nil {
		// lastState was produced by snapshot; failing to decode it is a bug.
		panic(fmt.Sprintf("actors: %s: cannot decode own state: %v", e.ref, err))
	}
}

// remember records the reply to request id in the dedup window.
func (e *entity) remember(id string, hash uint64, rep *ordopb.Reply) {
	if e.recentIdx == nil {
		e.recentIdx = make(map[string]*ordopb.DedupEntry)
	}
	d := &ordopb.DedupEntry{RequestId: id, Reply: rep, PayloadHash: hash}
	e.recent = append(e.recent, d)
	e.recentEnc = append(e.recentEnc, encodeRecent(d))
	e.recentIdx[id] = d
	if over := len(e.recent) - e.h.cfg.DedupWindow; over > 0 {
		for _, d := range e.recent[:over] {
			delete(e.recentIdx, d.GetRequestId())
		}
		e.recent = append(e.recent[:0], e.recent[over:]...)
		e.recentEnc = append(e.recentEnc[:0], e.recentEnc[over:]...)
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

// encodeRecent encodes one dedup entry as an EntityRecord.recent field, so
// that a record is its scalar fields followed by the entries' bytes,
// without re-encoding the whole window on every write.
func encodeRecent(d *ordopb.DedupEntry) []byte {
	body, err := proto.Marshal(d)
	if err != nil {
		// Every field of a DedupEntry is encodable; failing here is a bug.
		panic(fmt.Sprintf("actors: encoding dedup entry: %v", err))
	}
	b := protowire.AppendTag(make([]byte, 0, len(body)+8), recentField, protowire.BytesType)
	return protowire.AppendBytes(b, body)
}

// persist encodes the entity's record and hands it to the batcher.
func (e *entity) persist() error {
	state, err := e.beh.snapshot()
	if err != nil {
		return errf(ordopb.Code_CODE_INTERNAL, "encoding state of %s: %v", e.ref, err)
	}
	e.seq++
	size := len(state) + 32
	for _, b := range e.recentEnc {
		size += len(b)
	}
	data, err := proto.MarshalOptions{}.MarshalAppend(make([]byte, 0, size),
		&ordopb.EntityRecord{State: state, Epoch: e.epoch, Seq: e.seq})
	if err != nil {
		return errf(ordopb.Code_CODE_INTERNAL, "encoding record of %s: %v", e.ref, err)
	}
	for _, b := range e.recentEnc {
		data = append(data, b...)
	}
	e.lastState = state
	gen, seq, pid, root := e.gen, e.seq, e.self, e.h.system.Root
	e.h.batcher.submit(write{
		rec: persistence.Record{Kind: e.ref.Kind, ID: e.ref.ID, Shard: e.shard.id, Epoch: e.epoch, Data: data},
		done: func(err error) {
			root.Send(pid, &writeDone{gen: gen, seq: seq, err: err})
		},
	})
	return nil
}

// persistIfChanged writes the state if a hook or continuation changed it.
func (e *entity) persistIfChanged() error {
	state, err := e.beh.snapshot()
	if err != nil {
		return errf(ordopb.Code_CODE_INTERNAL, "encoding state of %s: %v", e.ref, err)
	}
	if string(state) == string(e.lastState) {
		return nil
	}
	return e.persist()
}

// hold queues a reply (c, rep) or a message (out) until write dep is
// durable, then releases whatever is ready.
func (e *entity) hold(dep uint64, c *call, rep *ordopb.Reply, out *outMsg) {
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
			e.send(hd.out)
		}
	}
	e.held = append(e.held[:0], e.held[n:]...)
}

// failHeld drops every held reply with err and every held message.
func (e *entity) failHeld(err *Error) {
	for _, hd := range e.held {
		if hd.c != nil {
			e.h.finish(hd.c, errReply(hd.c.env, err))
		}
	}
	e.held = nil
}

func (e *entity) handleWriteDone(m *writeDone) {
	if m.gen != e.gen {
		return
	}
	switch {
	case m.err == nil:
		if m.seq > e.durable {
			e.durable = m.seq
		}
		e.release()
		if e.drain != nil && e.seq == e.durable && len(e.held) == 0 {
			e.h.system.Root.Stop(e.self)
		}
	case errors.Is(m.err, errWriteCanceled), errors.Is(m.err, ErrClosed):
		// Withdrawn because the shard is being dropped or the host stops.
	default:
		// Fenced, or an outcome the store could not report (the write may
		// still land later). Restarting the entity from storage under the
		// same epoch would let such a late write overwrite newer state, so
		// the whole shard is given up: it is served again only under a new
		// epoch, whose fence rejects any write still on its way.
		e.h.shardLost(e.shard, m.err)
	}
}

// restart discards the in-memory state after a failed write; the next
// message reloads it from storage.
func (e *entity) restart(cause error) {
	e.h.log.Warn("entity write failed; restarting from storage", "entity", e.ref, "err", cause)
	e.gen++
	e.h.batcher.cancelEntity(e.ref, e.epoch)
	e.failHeld(errf(ordopb.Code_CODE_UNAVAILABLE, "write of %s failed: %v", e.ref, cause))
	e.conts = nil
	e.loaded = false
	e.recent, e.recentEnc, e.recentIdx = nil, nil, nil
	e.seq, e.durable = 0, 0
}

// activate fences the shard (once per ownership), loads the entity's
// record and runs the OnActivate hook.
func (e *entity) activate() error {
	if err := e.h.ensureFenced(e.shard); err != nil {
		if errors.Is(err, persistence.ErrFenced) {
			e.h.shardLost(e.shard, err)
			return errf(ordopb.Code_CODE_FENCED, "shard %d: %v", e.shard.id, err)
		}
		return errf(ordopb.Code_CODE_UNAVAILABLE, "fencing shard %d: %v", e.shard.id, err)
	}
	ctx, cancel := context.WithTimeout(e.h.ctx, e.h.cfg.StoreTimeout)
	defer cancel()
	rec, err := e.h.store.Load(ctx, e.ref.Kind, e.ref.ID)
	var stored ordopb.EntityRecord
	switch {
	case errors.Is(err, persistence.ErrNotFound):
	case err != nil:
		return errf(ordopb.Code_CODE_UNAVAILABLE, "loading %s: %v", e.ref, err)
	default:
		if err := proto.Unmarshal(rec.Data, &stored); err != nil {
			return errf(ordopb.Code_CODE_INTERNAL, "decoding record of %s: %v", e.ref, err)
		}
	}
	if err := e.beh.load(stored.GetState()); err != nil {
		return errf(ordopb.Code_CODE_INTERNAL, "decoding state of %s: %v", e.ref, err)
	}
	e.lastState, err = e.beh.snapshot()
	if err != nil {
		return errf(ordopb.Code_CODE_INTERNAL, "encoding state of %s: %v", e.ref, err)
	}
	e.seq, e.durable = stored.GetSeq(), stored.GetSeq()
	e.recent = stored.GetRecent()
	e.recentEnc = make([][]byte, len(e.recent))
	e.recentIdx = make(map[string]*ordopb.DedupEntry, len(e.recent))
	for i, d := range e.recent {
		e.recentIdx[d.GetRequestId()] = d
		e.recentEnc[i] = encodeRecent(d)
	}
	e.loaded = true
	e.outbox = e.outbox[:0]
	if e.beh.activate() {
		if err := e.persistIfChanged(); err != nil {
			e.rollback()
			return err
		}
		e.flushOutbox(e.seq)
	}
	return nil
}

// outgoing is called by Context.Send/Request during a handler.
func (e *entity) outgoing(ref Ref, msg proto.Message, requestID string, cont func(*anypb.Any, error)) {
	out := &outMsg{env: &ordopb.Envelope{Target: ref.Proto(), RequestId: requestID}}
	any, err := anypb.New(msg)
	if err == nil {
		out.env.Payload = any
	}
	if cont != nil {
		if e.conts == nil {
			e.conts = make(map[uint64]func(*anypb.Any, error))
		}
		e.nextCont++
		out.contID = e.nextCont
		if err != nil {
			cerr := errf(ordopb.Code_CODE_BAD_REQUEST, "encoding message to %s: %v", ref, err)
			e.conts[out.contID] = cont
			// Deliver the error as a later message, never re-entrantly.
			e.h.system.Root.Send(e.self, &contDone{gen: e.gen, id: out.contID, rep: errReply(out.env, cerr)})
			return
		}
		e.conts[out.contID] = cont
	} else if err != nil {
		e.h.log.Error("dropping unencodable message", "from", e.ref, "to", ref, "err", err)
		return
	}
	e.outbox = append(e.outbox, out)
}

func (e *entity) flushOutbox(dep uint64) {
	for _, out := range e.outbox {
		e.held = append(e.held, held{dep: dep, out: out})
	}
	e.outbox = e.outbox[:0]
	e.release()
}

// send routes a released message. It runs under the ownership of the
// entity's shard: once that ends, or while the node's lease is not valid,
// the router neither sends nor resends it (SenderCurrent). A stale owner's
// retry could otherwise land after the shard's new owner re-sent the same
// message, had it answered and moved on (a saga forgetting a finished
// transfer), and be applied again.
func (e *entity) send(out *outMsg) {
	sh, h := e.shard, e.h
	ctx, cancel := context.WithTimeout(sh.ctx, h.cfg.RequestTimeout)
	ctx = context.WithValue(ctx, senderKey{}, func() bool {
		return sh.ctx.Err() == nil && (h.cfg.LeaseValid == nil || h.cfg.LeaseValid())
	})
	out.env.DeadlineUnixNano = timeNow().Add(e.h.cfg.RequestTimeout).UnixNano()
	gen, id, pid, root := e.gen, out.contID, e.self, e.h.system.Root
	e.h.router.Route(ctx, out.env, func(rep *ordopb.Reply) {
		cancel()
		if id != 0 {
			root.Send(pid, &contDone{gen: gen, id: id, rep: rep})
		}
	})
}

type senderKey struct{}

// SenderCurrent reports whether a message an entity sends under ctx (the
// context a Router's Route gets) may still be sent: false once the
// sender's shard ownership has ended or while its node's lease is not
// valid. A Router checks it before every attempt and gives the message up
// when it is false. Contexts of other callers always report true.
func SenderCurrent(ctx context.Context) bool {
	f, ok := ctx.Value(senderKey{}).(func() bool)
	return !ok || f()
}

func (e *entity) handleCont(m *contDone) {
	if m.gen != e.gen {
		return
	}
	cont, ok := e.conts[m.id]
	if !ok {
		return
	}
	delete(e.conts, m.id)
	if !e.loaded {
		return // restarted meanwhile; durable state carries the work
	}
	e.outbox = e.outbox[:0]
	var panicked any
	func() {
		defer func() { panicked = recover() }()
		cont(m.rep.GetPayload(), ErrorFromProto(m.rep.GetError()))
	}()
	if panicked != nil {
		e.h.log.Error("continuation panicked", "entity", e.ref, "panic", panicked)
		e.rollback()
		return
	}
	if err := e.persistIfChanged(); err != nil {
		e.rollback()
		e.restart(err)
		return
	}
	e.flushOutbox(e.seq)
}

var _ protoreflect.FullName // keep the import for handler lookups by name
