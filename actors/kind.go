package actors

import (
	"fmt"
	"regexp"

	"github.com/ordo-actors/ordo/proto/ordopb"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
)

// Kind is an entity type registered with a Host. Create one with NewKind.
// A Kind is immutable after creation and safe for concurrent use.
type Kind interface {
	// Name is the kind's name, the first half of every Ref of this kind.
	Name() string
	// Ref returns the ref of the entity id of this kind (unvalidated; the
	// call that uses it validates).
	Ref(id string) Ref
	newBehavior() behavior
	// handles reports whether the kind has a handler for messages of type
	// name.
	handles(name protoreflect.FullName) bool
	// internal reports whether messages of type name are internal
	// (Internal): only trusted callers may send them.
	internal(name protoreflect.FullName) bool
	// eventSourced reports whether the kind is event-sourced
	// (EventSourced): its host's store must keep journals.
	eventSourced() bool
	// trustsAsNew reports whether the kind honours its callers' AsNew
	// hints (TrustAsNew).
	trustsAsNew() bool
}

var kindNameRE = regexp.MustCompile(`^[a-z][a-z0-9_.-]{0,63}$`)

// KindOf is a Kind whose state is the protobuf message S.
type KindOf[S proto.Message] struct {
	name        string
	newState    func() S
	handlers    map[protoreflect.FullName]*handler[S]
	internals   map[protoreflect.FullName]bool
	onActivate  func(c *Context[S])
	onPassivate func(c *Context[S])
	es          *eventKind[S] // nil: state-based (see EventSourced)
	asNew       bool          // TrustAsNew
}

// Option configures a KindOf: a handler (On, OnRead) or a hook
// (OnActivate, OnPassivate).
type Option[S proto.Message] func(k *KindOf[S]) error

type handler[S proto.Message] struct {
	write  bool
	newMsg func() proto.Message
	run    func(c *Context[S], m proto.Message) (proto.Message, error)
}

// NewKind declares a kind. name must match [a-z][a-z0-9_.-]{0,63};
// newState returns a fresh, empty state. NewKind returns an error for an
// invalid name, a nil newState, two handlers for one message type, or a
// message type declared internal (Internal) without a handler.
func NewKind[S proto.Message](name string, newState func() S, opts ...Option[S]) (*KindOf[S], error) {
	if !kindNameRE.MatchString(name) {
		return nil, fmt.Errorf("actors: invalid kind name %q: want [a-z][a-z0-9_.-]{0,63}", name)
	}
	if newState == nil {
		return nil, fmt.Errorf("actors: kind %q: nil state constructor", name)
	}
	k := &KindOf[S]{name: name, newState: newState, handlers: make(map[protoreflect.FullName]*handler[S])}
	for _, o := range opts {
		if err := o(k); err != nil {
			return nil, fmt.Errorf("actors: kind %q: %w", name, err)
		}
	}
	if k.asNew && k.es != nil {
		return nil, fmt.Errorf("actors: kind %q: TrustAsNew applies to state-based kinds only", name)
	}
	for m := range k.internals {
		if !k.handles(m) {
			return nil, fmt.Errorf("actors: kind %q: %s declared internal but has no handler", name, m)
		}
	}
	return k, nil
}

// MustKind is NewKind for package-level declarations: it panics on an
// invalid declaration, which is a programming error, not an operational one.
func MustKind[S proto.Message](name string, newState func() S, opts ...Option[S]) *KindOf[S] {
	k, err := NewKind(name, newState, opts...)
	if err != nil {
		panic(err)
	}
	return k
}

// Name implements Kind.
func (k *KindOf[S]) Name() string { return k.name }

// Ref implements Kind.
func (k *KindOf[S]) Ref(id string) Ref { return Ref{Kind: k.name, ID: id} }

func (k *KindOf[S]) handles(name protoreflect.FullName) bool {
	_, ok := k.handlers[name]
	return ok
}

func (k *KindOf[S]) internal(name protoreflect.FullName) bool { return k.internals[name] }

func (k *KindOf[S]) trustsAsNew() bool { return k.asNew }

// TrustAsNew makes the kind honour its callers' AsNew hints: a call that
// says its entity has never been written, and finds it not active,
// activates it from its zero state without reading the store. The
// entity's first write is then a creation (persistence.Record.Create),
// which the store refuses if the entity is stored after all, so a wrong
// hint never overwrites anything; it costs the entity's shard a restart
// (the shard is given up and served again under a new epoch) and the
// calls in flight there a retryable error. Until its first write is
// durable the entity answers nothing from its assumed state: a read
// handler's call reads the store first, and a run that changed nothing
// but answers or sends writes the record all the same.
//
// Declare it for kinds whose IDs callers mint (a transfer's ID), where
// the read of an entity that cannot exist yet is the cost it saves. Any
// caller that may call the kind can send the hint, and a caller that
// sends it wrongly on purpose makes the shard restart: keep it to kinds
// whose callers are trusted not to. State-based kinds only.
func TrustAsNew[S proto.Message]() Option[S] {
	return func(k *KindOf[S]) error {
		k.asNew = true
		return nil
	}
}

// Internal declares the types of msgs (their values are not used; nil
// pointers of generated types will do) internal to the kind: only the
// cluster itself may send them: its entities (Context.Send, Request), its
// nodes, and the process running the host (Host.Invoke, Host.Submit). A
// request of an internal type from an external client, or from an
// unauthenticated caller unless HostConfig.TrustUnauthenticated, is
// refused with ErrPermissionDenied at admission, before the entity is
// activated or anything is read or written. Every other type the kind
// handles may be sent by anyone who can reach it: declare internal the
// steps of a protocol between entities (a saga's Debit and Credit),
// which a client could otherwise send directly.
//
// Each type must have a handler of the kind (On, OnRead), declared before
// or after. In a .proto file, the method option
// (ordo.v1.handler).internal = true makes protoc-gen-ordo declare it.
func Internal[S proto.Message](msgs ...proto.Message) Option[S] {
	return func(k *KindOf[S]) error {
		for _, m := range msgs {
			if m == nil {
				return fmt.Errorf("nil message declared internal")
			}
			if k.internals == nil {
				k.internals = make(map[protoreflect.FullName]bool)
			}
			k.internals[m.ProtoReflect().Descriptor().FullName()] = true
		}
		return nil
	}
}

func addHandler[S proto.Message, M proto.Message, R proto.Message](write bool, fn func(*Context[S], M) (R, error)) Option[S] {
	return func(k *KindOf[S]) error {
		var zero M
		desc := zero.ProtoReflect().Descriptor()
		if _, dup := k.handlers[desc.FullName()]; dup {
			return fmt.Errorf("two handlers for %s", desc.FullName())
		}
		k.handlers[desc.FullName()] = &handler[S]{
			write:  write,
			newMsg: func() proto.Message { return zero.ProtoReflect().New().Interface() },
			run: func(c *Context[S], m proto.Message) (proto.Message, error) {
				r, err := fn(c, m.(M))
				if err != nil {
					return nil, err
				}
				return r, nil
			},
		}
		return nil
	}
}

// On registers a write handler for requests of type M. It may change
// c.State; after it returns, the new state is written, together with the
// reply (or the error) under the request's ID for deduplication, and the
// reply leaves only once that write is durable. If it returns an error, its
// changes to c.State are rolled back and the messages it sent are not sent.
// A run that would leave a record (state and recent replies) over
// HostConfig.MaxStateBytes is rolled back the same way and answered with
// ErrTooLarge, recorded nowhere: the entity and its shard go on.
//
// It must return a reply or an error, or call c.Defer. A nil reply with a
// nil error, a typed nil pointer such as (*Reply)(nil) included, is a
// programming error treated like a panic: the run is rolled back (state
// and messages), the caller gets ErrInternal naming M, and nothing is
// recorded for deduplication, so a retry runs the handler again.
//
// c is the request's context.Context as well (see Context). An error
// that matches context.DeadlineExceeded or context.Canceled (and is not
// an *Error) is not an answer either: the handler gave up because its
// context, or one derived from it, ended. The run is rolled back and not
// recorded, and the caller gets ErrDeadline or ErrUnavailable; a retry
// runs the handler again.
func On[S proto.Message, M proto.Message, R proto.Message](fn func(c *Context[S], m M) (R, error)) Option[S] {
	return addHandler(true, fn)
}

// OnRead registers a read-only handler for requests of type M. It must not
// change c.State (changes are discarded at the entity's next restart and
// never written). Nothing is written; the reply still waits for every
// earlier write of the entity to be durable. Like On's, it must return a
// reply or an error (a nil reply with a nil error is answered with
// ErrInternal), and a context error is not an answer.
func OnRead[S proto.Message, M proto.Message, R proto.Message](fn func(c *Context[S], m M) (R, error)) Option[S] {
	return addHandler(false, fn)
}

// OnActivate registers a hook run after the entity's state is loaded and
// before its first message: the place to resume work recorded in durable
// state (a saga's next step). Changes it makes to c.State are written.
func OnActivate[S proto.Message](fn func(c *Context[S])) Option[S] {
	return func(k *KindOf[S]) error {
		if k.onActivate != nil {
			return fmt.Errorf("two OnActivate hooks")
		}
		k.onActivate = fn
		return nil
	}
}

// OnPassivate registers a hook run when the entity stops gracefully on
// this node, as the last code of its activation:
//
//   - passivation, for idleness (HostConfig.IdleTimeout) or under the cap
//     on active entities (HostConfig.MaxActive);
//   - a graceful release of its shard (Host.Release: a handoff, or
//     Host.Shutdown draining the host).
//
// It does not run when the shard is dropped or lost (fenced, lease lost,
// a write with an unknown outcome, a Release or Shutdown whose context
// ended): the entity may then no longer write, and a newer owner may
// already run it. Nor does it run after a panic or a failed write, which
// restart the entity from storage. A stop can thus always happen without
// it: durable state, not the hook, must carry anything that matters.
//
// It runs on the entity's goroutine. On passivation nothing is pending
// then: every earlier write is durable, and no request, deferred reply or
// outgoing message is outstanding. On a release, the shard's calls are
// done and deferred replies were failed (retryably), but writes may still
// be in flight (the hook's write follows them, as any write does) and
// Requests may be unanswered: their continuations no longer run, and
// their retries stop.
//
// Changes the hook makes to c.State are written like OnActivate's, under
// the shard's epoch (so fenced like any write), and the entity stops only
// once that write is durable; the messages it sends (Send) leave then.
// Replies to Requests it makes are not awaited: their continuations never
// run. Calls that arrive on passivation while the hook's write is in
// flight wait, and are handled by the entity's next activation, which
// loads the state the hook wrote (during a release they get ErrNotHere,
// as any call does). A panic in the hook rolls its changes back and the
// entity stops all the same. Its context has no request, no deadline and
// no metadata.
func OnPassivate[S proto.Message](fn func(c *Context[S])) Option[S] {
	return func(k *KindOf[S]) error {
		if k.onPassivate != nil {
			return fmt.Errorf("two OnPassivate hooks")
		}
		k.onPassivate = fn
		return nil
	}
}

// Context is what a handler, hook or continuation sees: the entity's
// state and the means to talk to other entities. It is also the run's
// context.Context, so a handler passes c wherever a context is expected
// (a database driver, an HTTP client, another package's API):
//
//   - Deadline is the caller's: the deadline its envelope carries (the
//     host's DefaultDeadline when it carries none, capped at MaxDeadline).
//   - Done is closed when that deadline passes, when the entity stops (its
//     shard is dropped, lost or released, or the host shuts down), or when
//     the run returns, whichever comes first; Err says which.
//   - Value carries the request's metadata (MetadataFrom, MetadataValue),
//     which the messages the run sends carry on.
//
// Hooks (OnActivate, OnPassivate) have no request: their context has no
// deadline and no metadata and ends with the entity or the run. A
// continuation (Request) has no deadline either (the request that made it
// may have been answered long ago) but carries the metadata of the run
// that made the Request, so a trace continues through a saga's steps.
//
// A handler blocks its entity while it waits: the entity handles nothing
// else meanwhile. Blocking I/O bounded by the context (a short query) is
// allowed; waiting for another entity is not: use Request, whose reply
// arrives later as a continuation. Being a context, c is not a way to
// wait for an entity to stop between messages: a run's context ends when
// the run does.
//
// Context implements context.Context itself, rather than offering a
// c.Context() accessor, so that a handler has one value for its run: the
// state, the request and its context cannot drift apart (no context of
// another run, nor context.Background, passed by mistake), and generated
// typed code passes c as is. The underlying context is only built when
// first used, so a handler that never looks at it pays nothing.
//
// Context is used from the entity's goroutine only, except its
// context.Context methods, which are safe for concurrent use while the
// run lasts; it must not be retained after the run returns.
type Context[S proto.Message] struct {
	// State is the entity's state; write handlers change it in place.
	State S

	ent       *entity
	requestID string
	run       runContext
}

// Ref returns the entity's ref.
func (c *Context[S]) Ref() Ref { return c.ent.en.ref }

// Epoch returns the fencing epoch under which the entity runs.
func (c *Context[S]) Epoch() int64 { return c.ent.epoch }

// RequestID returns the ID of the request being handled ("" in hooks and
// continuations).
func (c *Context[S]) RequestID() string { return c.requestID }

// Caller returns who sent the request being handled (see Caller): an
// entity, a node, this process, an external client, or an unknown sender.
// Hooks and continuations answer no request: they get the zero Caller
// (CallerUnknown with no name), and CallerFrom reports false for them.
func (c *Context[S]) Caller() Caller {
	if c.run.caller == nil {
		return Caller{}
	}
	return *c.run.caller
}

// Activation returns the ID of this activation of the entity: random,
// non-zero, drawn each time the entity's state is loaded (activation, and
// again after a failed write or a restart throws the state in memory
// away), so that a handler can tell what this activation did from what
// it found in the durable state. An entity that stores the ID with a
// change it has not confirmed yet (the bank's held credits) knows, on
// reading it back under another ID, that its memory of what followed may
// be lost. Unlike Context.RequestID it is not derived from durable state:
// a request ID made from it is new after a restart, so use one only for a
// message whose receiver recognises a repeat by its content, not by its
// request ID.
func (c *Context[S]) Activation() uint64 { return c.ent.activation }

// Defer makes the write handler's reply wait: the handler's return value
// is ignored (return nil, nil), its state changes are written as usual, and
// the request stays pending under key until a later handler, hook or
// continuation of this entity calls Resolve(key, ...). Several requests
// may wait on one key; a retry of a pending request (same request ID)
// waits for the same answer. The answer is recorded for deduplication and
// leaves, like any reply, once it is durable. A pending request fails with
// a retryable error when the entity stops (passivation, handoff, failover,
// a lost shard), and with ErrDeadline when its deadline passes (every
// call has one: see HostConfig.DefaultDeadline); its retry runs the
// handler again where the entity lives next, so durable state must let it
// find the outcome (a saga's status). Defer may be called from write
// handlers only.
func (c *Context[S]) Defer(key string) {
	if c.requestID == "" {
		panic("actors: Defer outside a request handler")
	}
	c.ent.deferKey = key
}

// Resolve answers every request pending under key (see Defer) with reply,
// or with err (a handler error, as a handler would return it; a refusal
// for now, Unavailable, is answered but not recorded, so that a retry
// runs the handler again). The
// answers are written with the state this run leaves and sent once that
// write is durable. It reports how many requests were waiting. Call it
// from write handlers, hooks and continuations.
func (c *Context[S]) Resolve(key string, reply proto.Message, err error) int {
	n := len(c.ent.waiting[key])
	if n > 0 {
		c.ent.resolutions = append(c.ent.resolutions, resolution{key: key, reply: reply, err: err})
	}
	return n
}

// ResolveNow is Resolve for an answer that follows from facts already
// durable, typically the acknowledgement a continuation just received: the
// answers leave once the entity's earlier writes are durable, without
// waiting for the write this run makes (which still records them for
// deduplication). Use it only when, were that write lost, the entity
// restarting from its previous durable state would reach the same answer
// (a saga whose steps are idempotent and whose outcome is decided): a
// lost write then costs a replay, never a different answer. A saga's
// final Debit acknowledgement qualifies; a rejection that a replay might
// not repeat does not.
func (c *Context[S]) ResolveNow(key string, reply proto.Message, err error) int {
	n := len(c.ent.waiting[key])
	if n > 0 {
		c.ent.resolutions = append(c.ent.resolutions, resolution{key: key, reply: reply, err: err, early: true})
	}
	return n
}

// WriteBehind lets the write handler's changes wait for the entity's next
// write instead of making one of their own: the reply, and the messages
// the handler sends, leave once the entity's earlier writes are durable,
// and the changes (state or events, reminders, the request's dedup entry)
// are saved with the next write the entity makes: the next run that
// writes, a read (which writes them before it answers: no other reply
// shows changes that are not durable), a continuation, timer or reminder
// that writes, or passivation and graceful handoff. A crash, a kill or a
// lost shard before then loses them: the entity restarts from its last
// durable state, and the same request runs again if it is retried.
//
// Use it only for changes whose loss is harmless because something
// redoes them: clean-up that a retry, a reminder or a saga repeats, such
// as an account forgetting a finished transfer (the bank's Forget, sent
// again by the account's settle reminder). It saves a store write per
// run, which on a busy entity is most of the run's cost.
//
// The run writes at once all the same when it must: the entity's creation
// (AsNew) is not durable yet, the run resolves or defers a reply, delivers
// a reminder's firing, moves a sender's fence, or the entity already
// keeps 32 runs (or 8 events) behind. WriteBehind may be called from
// request handlers only; in a read handler it has no effect.
func (c *Context[S]) WriteBehind() {
	if c.requestID == "" {
		panic("actors: WriteBehind outside a request handler")
	}
	if !c.ent.reading {
		c.ent.wantBehind = true
	}
}

// ReplyBeforeDurable makes the write handler's reply leave as soon as the
// run ends, without waiting for the state it wrote, or the entity's
// earlier writes, to be durable, as replies otherwise wait (a reply never
// shows a change that a crash could undo). The reply is still recorded
// for deduplication, with the run's changes.
//
// Use it only when the reply states nothing that a lost write could make
// false, and the caller's use of it holds if the entity restarts from an
// earlier durable state: the bank's Release answers with an empty balance,
// and a release lost with the account's memory leaves the transfer's
// credit held, which the account keeps from being shown until the saga
// settles it. Its point is on a busy entity, whose earlier writes are
// usually in a Save that the reply would wait for. It has no effect in a
// read handler or on a deferred reply.
func (c *Context[S]) ReplyBeforeDurable() {
	if c.requestID == "" {
		panic("actors: ReplyBeforeDurable outside a request handler")
	}
	c.ent.replyNow = true
}

// Passivate asks the runtime to passivate the entity as soon as it is
// quiet: its writes durable, its held replies and messages gone, no reply
// deferred and no message it sent waiting for an answer. Use it when the
// entity is done for now, such as a saga that has settled, so that a node
// does not keep it in memory for HostConfig.IdleTimeout. The request stands
// whatever the run's outcome and until the entity passivates, whatever
// arrives meanwhile: a message that arrives after that activates the entity
// again, from its durable record. Passivation is the usual one (the
// OnPassivate hook runs first); timers (After) die with the activation.
// It may be called from any handler, hook or continuation.
func (c *Context[S]) Passivate() { c.ent.passivateAsked = true }

// Send sends msg to the entity ref without waiting for a reply. The
// message leaves only once the state the handler wrote is durable; to a
// co-located entity (same shard) it leaves at once, unencoded, and the
// receiver's write is never durable before this entity's. msg must not be
// changed after the call.
// requestID identifies the message for the receiver's deduplication: use
// an ID derived from durable state so that a resend is recognised.
// The message carries the run's metadata (see WithOutgoingMetadata) and is
// retried like a Request (HostConfig.Retry, WithRetry); its outcome is
// not reported. Messages retried or resent may overtake later ones. With
// AtMostOnce it is sent once and not acknowledged at all.
func (c *Context[S]) Send(ref Ref, msg proto.Message, requestID string, opts ...RequestOption) {
	c.ent.outgoing(ref, msg, requestID, nil, c.run.md, opts)
}

// Request sends msg to ref and later runs then, on this entity's
// goroutine, with the outcome. Like Send, the message leaves only once
// the state written so far is durable, and it carries the run's metadata.
//
// An attempt that fails with a retryable error (Retryable, or
// ErrDeadline: each attempt has its own deadline,
// HostConfig.RequestTimeout) is retried with the same request ID, after
// an exponential backoff with jitter, as the retry policy allows
// (HostConfig.Retry, or WithRetry for this call). then sees one final
// outcome: the reply, a permanent error at once (ErrHandler,
// ErrBadRequest, ErrUnknownKind, ErrInternal), or the last retryable
// error once the policy gave up. A reply that does not decode as R is an
// ErrBadRequest, and counts as a failed attempt. A continuation that
// sends the same request again (same target and request ID) does not
// start over: its first attempt waits for the backoff the earlier
// attempts reached, so a resend loop never becomes a busy loop.
//
// If the entity stops before the outcome (passivation, restart,
// failover), then never runs and retries end: durable state plus
// OnActivate must carry the work forward.
func Request[S proto.Message, R proto.Message](c *Context[S], ref Ref, msg proto.Message, requestID string,
	then func(c *Context[S], reply R, err error), opts ...RequestOption) {
	md := c.run.md
	c.ent.outgoing(ref, msg, requestID, func(payload *anypb.Any, err error) error {
		var zero R
		b := c.ent.beh.(*typedBehavior[S])
		c2 := b.context(c.ent.traced(runIn{md: md}))
		defer func() {
			b.state = c2.State
			c2.run.end()
		}()
		if err != nil {
			then(c2, zero, err)
			return nil
		}
		r := zero.ProtoReflect().New().Interface().(R)
		if uerr := payload.UnmarshalTo(r); uerr != nil {
			err := errf(ordopb.Code_CODE_BAD_REQUEST, "decoding reply to %s: %v", ref, uerr)
			then(c2, zero, err)
			return err
		}
		then(c2, r, nil)
		return nil
	}, md, opts)
}

// behavior is the state-typed half of an entity.
type behavior interface {
	// load replaces the state with the decoded data (fresh state when nil).
	load(data []byte) error
	// snapshot encodes the current state deterministically.
	snapshot() ([]byte, error)
	// handler finds the handler of a message type.
	find(name protoreflect.FullName) (write bool, newMsg func() proto.Message, ok bool)
	// run runs the handler of m.
	run(in runIn, m proto.Message) (proto.Message, error)
	// activate runs the OnActivate hook, if any; it reports whether one ran.
	activate() bool
	// passivate runs the OnPassivate hook, if any; it reports whether one
	// ran (a panic propagates).
	passivate() bool
	bind(e *entity)
}

// runIn is what a run knows of the request it handles.
type runIn struct {
	requestID string
	deadline  int64             // Unix nanoseconds; 0: none
	md        map[string]string // read-only
	caller    *Caller           // nil: no request (a hook or continuation)
	span      trace.Span        // the run's span; nil: tracing off
}

type typedBehavior[S proto.Message] struct {
	kind  *KindOf[S]
	ent   *entity
	state S
	// rb is an event-sourced entity's rollback point (eventsourced.go),
	// nil until its first Emit and after a load.
	rb *rollbackPoint[S]
}

func (k *KindOf[S]) newBehavior() behavior {
	return &typedBehavior[S]{kind: k, state: k.newState()}
}

func (b *typedBehavior[S]) bind(e *entity) {
	b.ent = e
	if b.kind.es != nil {
		e.es = b.kind.es.newEventState(b)
	}
}

func (b *typedBehavior[S]) context(in runIn) *Context[S] {
	c := &Context[S]{State: b.state, ent: b.ent, requestID: in.requestID,
		run: runContext{parent: b.ent.en.shard.ctx, deadline: in.deadline, md: in.md, caller: in.caller}}
	if in.span != nil {
		c.run.traced = trace.ContextWithSpan(c.run.parent, in.span)
	}
	return c
}

func (b *typedBehavior[S]) load(data []byte) error {
	s := b.kind.newState()
	if data != nil {
		if err := proto.Unmarshal(data, s); err != nil {
			return err
		}
	}
	b.state = s
	b.rb = nil
	return nil
}

var deterministic = proto.MarshalOptions{Deterministic: true}

func (b *typedBehavior[S]) snapshot() ([]byte, error) {
	data, err := deterministic.Marshal(b.state)
	if data == nil && err == nil {
		data = []byte{}
	}
	return data, err
}

func (b *typedBehavior[S]) find(name protoreflect.FullName) (bool, func() proto.Message, bool) {
	h, ok := b.kind.handlers[name]
	if !ok {
		return false, nil, false
	}
	return h.write, h.newMsg, true
}

func (b *typedBehavior[S]) run(in runIn, m proto.Message) (proto.Message, error) {
	h := b.kind.handlers[m.ProtoReflect().Descriptor().FullName()]
	c := b.context(in)
	defer c.run.end()
	r, err := h.run(c, m)
	b.state = c.State // a handler may replace the state wholesale
	return r, err
}

func (b *typedBehavior[S]) activate() bool { return b.hook(b.kind.onActivate) }

func (b *typedBehavior[S]) passivate() bool { return b.hook(b.kind.onPassivate) }

func (b *typedBehavior[S]) hook(fn func(*Context[S])) bool {
	if fn == nil {
		return false
	}
	c := b.context(runIn{})
	defer c.run.end()
	fn(c)
	b.state = c.State
	return true
}
