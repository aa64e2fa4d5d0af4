package actors

import (
	"fmt"
	"regexp"

	"github.com/ordo-actors/ordo/proto/ordopb"
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
}

var kindNameRE = regexp.MustCompile(`^[a-z][a-z0-9_.-]{0,63}$`)

// KindOf is a Kind whose state is the protobuf message S.
type KindOf[S proto.Message] struct {
	name       string
	newState   func() S
	handlers   map[protoreflect.FullName]*handler[S]
	onActivate func(c *Context[S])
}

// Option configures a KindOf: a handler (On, OnRead) or a hook (OnActivate).
type Option[S proto.Message] func(k *KindOf[S]) error

type handler[S proto.Message] struct {
	write  bool
	newMsg func() proto.Message
	run    func(c *Context[S], m proto.Message) (proto.Message, error)
}

// NewKind declares a kind. name must match [a-z][a-z0-9_.-]{0,63};
// newState returns a fresh, empty state. NewKind returns an error for an
// invalid name, a nil newState, or two handlers for one message type.
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
// changes to c.State are rolled back.
func On[S proto.Message, M proto.Message, R proto.Message](fn func(c *Context[S], m M) (R, error)) Option[S] {
	return addHandler(true, fn)
}

// OnRead registers a read-only handler for requests of type M. It must not
// change c.State (changes are discarded at the entity's next restart and
// never written). Nothing is written; the reply still waits for every
// earlier write of the entity to be durable.
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

// Context is what a handler sees: the entity's state and the means to talk
// to other entities. It is used from the entity's goroutine only and must
// not be retained after the handler returns.
type Context[S proto.Message] struct {
	// State is the entity's state; write handlers change it in place.
	State S

	ent       *entity
	requestID string
}

// Ref returns the entity's ref.
func (c *Context[S]) Ref() Ref { return c.ent.ref }

// Epoch returns the fencing epoch under which the entity runs.
func (c *Context[S]) Epoch() int64 { return c.ent.epoch }

// RequestID returns the ID of the request being handled ("" in hooks and
// continuations).
func (c *Context[S]) RequestID() string { return c.requestID }

// Defer makes the write handler's reply wait: the handler's return value
// is ignored (return nil, nil), its state changes are written as usual, and
// the request stays pending under key until a later handler, hook or
// continuation of this entity calls Resolve(key, ...). Several requests
// may wait on one key; a retry of a pending request (same request ID)
// waits for the same answer. The answer is recorded for deduplication and
// leaves, like any reply, once it is durable. A pending request fails with
// a retryable error when the entity stops (passivation, handoff, failover,
// a lost shard) or its deadline passes; its retry runs the handler again
// where the entity lives next, so durable state must let it find the
// outcome (a saga's status). Defer may be called from write handlers only.
func (c *Context[S]) Defer(key string) {
	if c.requestID == "" {
		panic("actors: Defer outside a request handler")
	}
	c.ent.deferKey = key
}

// Resolve answers every request pending under key (see Defer) with reply,
// or with err (a handler error, as a handler would return it). The
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

// Send sends msg to the entity ref without waiting for a reply. The
// message leaves only once the state the handler wrote is durable; to a
// co-located entity (same shard) it leaves at once, unencoded, and the
// receiver's write is never durable before this entity's. msg must not be
// changed after the call.
// requestID identifies the message for the receiver's deduplication: use
// an ID derived from durable state so that a resend is recognised.
func (c *Context[S]) Send(ref Ref, msg proto.Message, requestID string) {
	c.ent.outgoing(ref, msg, requestID, nil)
}

// Request sends msg to ref and later runs then, on this entity's
// goroutine, with the reply or the error (a retryable error when no answer
// came in time: HostConfig.RequestTimeout). Like Send, the message leaves
// only once the state written so far is durable. If the entity stops
// before the reply arrives (passivation, restart, failover), then never
// runs: durable state plus OnActivate must carry the work forward.
func Request[S proto.Message, R proto.Message](c *Context[S], ref Ref, msg proto.Message, requestID string,
	then func(c *Context[S], reply R, err error)) {
	c.ent.outgoing(ref, msg, requestID, func(payload *anypb.Any, err error) {
		var zero R
		b := c.ent.beh.(*typedBehavior[S])
		c2 := b.context("")
		defer func() { b.state = c2.State }()
		if err != nil {
			then(c2, zero, err)
			return
		}
		r := zero.ProtoReflect().New().Interface().(R)
		if uerr := payload.UnmarshalTo(r); uerr != nil {
			then(c2, zero, errf(ordopb.Code_CODE_BAD_REQUEST, "decoding reply to %s: %v", ref, uerr))
			return
		}
		then(c2, r, nil)
	})
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
	run(requestID string, m proto.Message) (proto.Message, error)
	// activate runs the OnActivate hook, if any; it reports whether one ran.
	activate() bool
	bind(e *entity)
}

type typedBehavior[S proto.Message] struct {
	kind  *KindOf[S]
	ent   *entity
	state S
}

func (k *KindOf[S]) newBehavior() behavior {
	return &typedBehavior[S]{kind: k, state: k.newState()}
}

func (b *typedBehavior[S]) bind(e *entity) { b.ent = e }

func (b *typedBehavior[S]) context(requestID string) *Context[S] {
	return &Context[S]{State: b.state, ent: b.ent, requestID: requestID}
}

func (b *typedBehavior[S]) load(data []byte) error {
	s := b.kind.newState()
	if data != nil {
		if err := proto.Unmarshal(data, s); err != nil {
			return err
		}
	}
	b.state = s
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

func (b *typedBehavior[S]) run(requestID string, m proto.Message) (proto.Message, error) {
	h := b.kind.handlers[m.ProtoReflect().Descriptor().FullName()]
	c := b.context(requestID)
	r, err := h.run(c, m)
	b.state = c.State // a handler may replace the state wholesale
	return r, err
}

func (b *typedBehavior[S]) activate() bool {
	if b.kind.onActivate == nil {
		return false
	}
	c := b.context("")
	b.kind.onActivate(c)
	b.state = c.State
	return true
}
