package actors

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/ordo-actors/ordo/persistence"
	"github.com/ordo-actors/ordo/proto/ordopb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
)

// Event-sourced kinds. The state of an event-sourced entity changes only
// through events: a write handler (or hook, or continuation) validates its
// request and emits events (Context.Emit), each folded into the state at
// once by the kind's Apply function, so the rest of the run sees it. When
// the run succeeds its events are appended to the entity's journal
// (persistence.Journal) in the same fenced, atomic Save as the entity's
// record, which keeps the request's dedup entry; its reply leaves once
// that Save is durable, exactly as for a state-based kind (output gate,
// group commit and dedup are unchanged). A run that fails or is rolled
// back leaves no event.
//
// The record of an event-sourced entity holds a snapshot (the state as of
// some event K, EntityRecord.snapshot_seq), the Seq of its last event
// (last_event) and the snapshot's version, with its dedup window and
// sender fences as always. A write that brings the events since the
// snapshot to EventSourcing.SnapshotEvery carries a new snapshot of the
// state as of its last event; other writes carry the previous snapshot
// unchanged (the state is not encoded on every write). Passivation and a
// graceful release of the shard write a snapshot when events came after
// the last one. Activation loads the record, decodes the snapshot and
// applies the events after it, read from the journal: at most
// SnapshotEvery and one run's events, whatever the journal's length.
//
// Events are stored as google.protobuf.Any (the event's full type name,
// without the type.googleapis.com/ prefix, and its bytes, deterministic),
// so that a stored event names its type: one the kind no longer declares
// (EventSourcing.Events) fails the activation with ErrInternal naming the
// event and its type, rather than decoding as anything else.
//
// Schema evolution (see also the package doc):
//
//   - An event type gains a field: stored events decode with the field
//     unset (protobuf's rule), so Apply must give it its meaning for old
//     events (use field presence, optional, where unset and zero differ).
//     Never reuse a field number or change a field's type.
//   - The state type changes incompatibly (a field's meaning, or what
//     Apply folds into it): bump EventSourcing.SnapshotVersion. Snapshots
//     of another version are not loaded; the state is rebuilt from event
//     1, and the next write (or passivation) stores a snapshot of the new
//     version. This needs the whole journal: with DeleteEvents, the
//     activation fails with ErrInternal instead of rebuilding a state from
//     part of its history.
//   - An event type is retired: keep it in Events (and Apply) as long as
//     journals hold it; a stored event of a type the kind does not declare
//     fails the activation (ErrInternal) instead of being skipped.
//   - A state-based kind becomes event-sourced: its records load as a
//     snapshot at event 0 (their state is the whole state), and the
//     entity's events start at 1.

// replayPage is how many events activation reads from the journal at once.
const replayPage = 1000

// DefaultSnapshotEvery is EventSourcing.SnapshotEvery's default.
const DefaultSnapshotEvery = 1000

// EventSourcing declares how an event-sourced kind keeps its state (see
// EventSourced). The zero values of SnapshotEvery and SnapshotVersion
// are replaced by their defaults.
type EventSourcing[S proto.Message] struct {
	// Events are the kind's event types (their values are not used: nil
	// pointers of generated types will do). Emit refuses any other type,
	// and a stored event of another type fails the entity's activation.
	Events []proto.Message
	// Apply folds one event into the state, changing state in place. It is
	// called by Emit during a run and by activation for every event after
	// the snapshot, on the entity's goroutine. It must depend on nothing
	// but the state and the event (no clock, no I/O), so that a replay
	// rebuilds exactly the state the runs saw. An error means the event
	// cannot be applied: from Emit it is a programming error (the run
	// panics, and is rolled back and answered with ErrInternal); during
	// activation it fails the activation with ErrInternal.
	Apply func(state S, event proto.Message) error
	// SnapshotEvery is how many events may follow the stored snapshot: the
	// write that reaches it stores a new one (and passivation stores one
	// whenever events follow it). It bounds the events an activation
	// replays, at the cost of encoding the state once per SnapshotEvery
	// events. Default DefaultSnapshotEvery.
	SnapshotEvery int
	// SnapshotVersion is the version of the state's encoding as the
	// snapshots store it. Bump it when the state changes incompatibly:
	// snapshots of another version are discarded and the state rebuilt
	// from the journal. Default 1.
	SnapshotVersion uint32
	// DeleteEvents deletes the events a new snapshot covers, in the same
	// Save (persistence.Record.DeleteEventsBefore; the store keeps the
	// last event). Off by default: the journal keeps the entity's whole
	// history for projections (Follow) and for rebuilding the state under
	// a new SnapshotVersion, which DeleteEvents makes impossible.
	DeleteEvents bool
}

// EventSourced declares the kind event-sourced: its write handlers, hooks
// and continuations change the state only by emitting events
// (Context.Emit), which es.Apply folds into it; the events are the
// entity's durable history, kept in a journal by the store, which must
// implement persistence.Journal (NewHost refuses the kind otherwise).
// Handlers must not change c.State directly: a change no event carries is
// lost at the next activation. Read handlers must not emit.
//
// The kind's requests, replies, dedup, output gate and group commit are
// those of any kind; the difference is what a write stores (see the
// package doc and EventSourcing).
func EventSourced[S proto.Message](es EventSourcing[S]) Option[S] {
	return func(k *KindOf[S]) error {
		if k.es != nil {
			return errors.New("EventSourced declared twice")
		}
		if es.Apply == nil {
			return errors.New("EventSourced: nil Apply")
		}
		if len(es.Events) == 0 {
			return errors.New("EventSourced: no event types (Events)")
		}
		if es.SnapshotEvery < 0 {
			return fmt.Errorf("EventSourced: SnapshotEvery %d is negative", es.SnapshotEvery)
		}
		ek := &eventKind[S]{es: es, types: make(map[protoreflect.FullName]protoreflect.MessageType, len(es.Events))}
		if ek.es.SnapshotEvery == 0 {
			ek.es.SnapshotEvery = DefaultSnapshotEvery
		}
		if ek.es.SnapshotVersion == 0 {
			ek.es.SnapshotVersion = 1
		}
		for _, m := range es.Events {
			if m == nil {
				return errors.New("EventSourced: nil event type")
			}
			mt := m.ProtoReflect().Type()
			name := mt.Descriptor().FullName()
			if _, dup := ek.types[name]; dup {
				return fmt.Errorf("EventSourced: event type %s declared twice", name)
			}
			ek.types[name] = mt
		}
		k.es = ek
		return nil
	}
}

// eventKind is a kind's EventSourcing, with its event types by name.
type eventKind[S proto.Message] struct {
	es    EventSourcing[S]
	types map[protoreflect.FullName]protoreflect.MessageType
}

func (k *KindOf[S]) eventSourced() bool { return k.es != nil }

// DecodeEvent decodes one stored event of the kind (persistence.Event's
// Data, as the runtime writes it) into a message of its declared type. It
// fails for a kind that is not event-sourced, for malformed data, and for
// an event of a type the kind does not declare (EventSourcing.Events).
// It is safe for concurrent use.
func (k *KindOf[S]) DecodeEvent(data []byte) (proto.Message, error) {
	if k.es == nil {
		return nil, fmt.Errorf("actors: kind %q is not event-sourced", k.name)
	}
	return k.es.decode(k.name, data)
}

// decode decodes a stored event (see encodeEvent).
func (ek *eventKind[S]) decode(kind string, data []byte) (proto.Message, error) {
	var a anypb.Any
	if err := proto.Unmarshal(data, &a); err != nil {
		return nil, fmt.Errorf("actors: decoding an event of kind %q: %w", kind, err)
	}
	name := a.MessageName()
	if name == "" {
		return nil, fmt.Errorf("actors: an event of kind %q has no valid type name (%q)", kind, a.GetTypeUrl())
	}
	mt, ok := ek.types[name]
	if !ok {
		return nil, fmt.Errorf("actors: an event of kind %q has type %s, which the kind does not declare (EventSourcing.Events)", kind, name)
	}
	m := mt.New().Interface()
	if err := proto.Unmarshal(a.GetValue(), m); err != nil {
		return nil, fmt.Errorf("actors: decoding an event %s of kind %q: %w", name, kind, err)
	}
	return m, nil
}

// encodeEvent encodes an event for the journal: an Any whose type URL is
// the event's full name (the type.googleapis.com/ prefix would be written
// with every event), and whose value is the event, deterministic.
func (ek *eventKind[S]) encodeEvent(kind string, ev proto.Message) ([]byte, error) {
	if nilMessage(ev) {
		return nil, errors.New("nil event")
	}
	name := ev.ProtoReflect().Descriptor().FullName()
	if _, ok := ek.types[name]; !ok {
		return nil, fmt.Errorf("kind %q does not declare event type %s (EventSourcing.Events)", kind, name)
	}
	value, err := deterministic.Marshal(ev)
	if err != nil {
		return nil, fmt.Errorf("encoding event %s: %w", name, err)
	}
	return proto.Marshal(&anypb.Any{TypeUrl: string(name), Value: value})
}

// Emit records event as having happened: it folds event into c.State at
// once (EventSourcing.Apply), so the rest of the run sees its effect, and
// queues it for the run's write, which appends the run's events to the
// entity's journal, in the order emitted, atomically with its record. If
// the run fails (an error, a panic, a rollback) its events are dropped
// and the state is as before the run. event must not be changed after the
// call.
//
// Emit may be called from write handlers, hooks and continuations of an
// event-sourced kind (EventSourced). It panics, which fails and rolls the
// run back (ErrInternal), in a kind that is not event-sourced, for an
// event type the kind does not declare or that cannot be encoded, and
// when Apply returns an error. A read handler that emits is answered with
// ErrInternal; a run that emits more than HostConfig.BatchMaxEvents events
// with ErrTooLarge.
func (c *Context[S]) Emit(event proto.Message) {
	e := c.ent
	b, _ := e.beh.(*typedBehavior[S])
	if e.es == nil || b == nil || b.kind.es == nil {
		panic(fmt.Sprintf("actors: Emit in kind %q, which is not event-sourced (EventSourced)", e.ref.Kind))
	}
	ek := b.kind.es
	data, err := ek.encodeEvent(e.ref.Kind, event)
	if err != nil {
		panic(fmt.Sprintf("actors: %s: Emit: %v", e.ref, err))
	}
	if !b.cloned {
		b.pre, b.cloned = proto.Clone(c.State).(S), true
	}
	if err := ek.es.Apply(c.State, event); err != nil {
		panic(fmt.Sprintf("actors: %s: Emit: applying %s: %v", e.ref, event.ProtoReflect().Descriptor().FullName(), err))
	}
	e.es.run = append(e.es.run, data)
	e.es.runBytes += len(data)
}

// journaled is the state-typed half of an event-sourced entity.
type journaled interface {
	// applyStored decodes a stored event and folds it into the state.
	applyStored(data []byte) error
	// keep makes the current state the run's rollback point (it was
	// written).
	keep()
	// restore rolls the state back to the run's start, if an event
	// changed it.
	restore()
}

func (b *typedBehavior[S]) applyStored(data []byte) error {
	ek := b.kind.es
	ev, err := ek.decode(b.kind.name, data)
	if err != nil {
		return err
	}
	if err := ek.es.Apply(b.state, ev); err != nil {
		return fmt.Errorf("applying %s: %w", ev.ProtoReflect().Descriptor().FullName(), err)
	}
	return nil
}

func (b *typedBehavior[S]) keep() {
	var zero S
	b.pre, b.cloned = zero, false
}

func (b *typedBehavior[S]) restore() {
	if b.cloned {
		b.state = b.pre
		b.keep()
	}
}

// eventState is the event-sourcing side of one entity, used from its
// goroutine only.
type eventState struct {
	beh          journaled
	every        uint64
	version      uint32
	deleteEvents bool

	lastEvent   uint64 // Seq of the last event written (or on its way)
	snapSeq     uint64 // the last event the stored snapshot covers
	snapVersion uint32 // the stored snapshot's version
	snapshot    []byte // the stored snapshot; immutable
	// run holds the current run's events, encoded, in order.
	run      [][]byte
	runBytes int
	// final: the next write stores a snapshot (passivation, release).
	final bool
	// warned: a snapshot did not fit MaxStateBytes (logged once per
	// activation).
	warned bool
}

func (ek *eventKind[S]) newEventState(b *typedBehavior[S]) *eventState {
	return &eventState{beh: b, every: uint64(ek.es.SnapshotEvery), version: ek.es.SnapshotVersion,
		deleteEvents: ek.es.DeleteEvents}
}

// journalWrite is what an event-sourced write adds to its record.
type journalWrite struct {
	events []persistence.Event
	// meta is EntityRecord fields 16 to 18, encoded.
	meta         []byte
	deleteBefore uint64
	bytes        int // of the events' data
}

// encodeJournalMeta returns EntityRecord's fields snapshot_seq,
// last_event and snapshot_version.
func encodeJournalMeta(snapSeq, last uint64, version uint32) []byte {
	b := make([]byte, 0, 32)
	if snapSeq != 0 {
		b = protowire.AppendTag(b, 16, protowire.VarintType)
		b = protowire.AppendVarint(b, snapSeq)
	}
	if last != 0 {
		b = protowire.AppendTag(b, 17, protowire.VarintType)
		b = protowire.AppendVarint(b, last)
	}
	b = protowire.AppendTag(b, 18, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(version))
}

// journalFor returns the store's journal when a kind is event-sourced,
// and an error when the store keeps none. raw is the store as given to
// NewHost (a tracing wrapper hides its optional interfaces).
func journalFor(raw persistence.Store, kinds map[string]Kind) (persistence.Journal, error) {
	j, _ := raw.(persistence.Journal)
	for name, k := range kinds {
		if k.eventSourced() && j == nil {
			return nil, fmt.Errorf("actors: kind %q is event-sourced, but the store (%T) keeps no journal (persistence.Journal)", name, raw)
		}
	}
	return j, nil
}

// beginEvents readies the event buffers of a run.
func (es *eventState) begin() {
	es.run, es.runBytes = es.run[:0], 0
}

// emitted reports whether the current run emitted events.
func (e *entity) emitted() bool { return e.es != nil && len(e.es.run) > 0 }

// rollbackEvents drops the run's events and restores the state as of the
// run's start.
func (e *entity) rollbackEvents() {
	e.es.begin()
	e.es.beh.restore()
}

// finalSnapshot prepares the write of an entity that stops gracefully: for
// an event-sourced entity with events after its snapshot (or a snapshot
// of another version), the next write stores a snapshot. It reports
// whether one is due.
func (e *entity) finalSnapshot() bool {
	if e.es == nil {
		return false
	}
	es := e.es
	es.final = es.lastEvent > es.snapSeq || es.snapVersion != es.version
	return es.final
}

// commitEvents is commit's write for an event-sourced entity: it writes
// the run's events, the dedup window and fences, and the snapshot (a new
// one when due), when anything changed. Like commit, it returns an
// ErrTooLarge *Error after rolling the run back when the run cannot be
// written, and another error when the entity must restart.
func (e *entity) commitEvents(added int) error {
	es := e.es
	n := len(es.run)
	if n == 0 && added == 0 && !e.dirty && !es.final {
		return nil
	}
	if n > e.h.cfg.BatchMaxEvents {
		e.unremember(added)
		e.rollback()
		return errf(ordopb.Code_CODE_TOO_LARGE, "a run of %s emitted %d events, over BatchMaxEvents %d; nothing applied",
			e.ref, n, e.h.cfg.BatchMaxEvents)
	}
	last := es.lastEvent + uint64(n)
	snap, snapSeq, version := es.snapshot, es.snapSeq, es.snapVersion
	fences := len(e.fences.encoded())
	fitted := false
	if es.final || version != es.version || last-snapSeq >= es.every {
		state, err := e.beh.snapshot()
		if err != nil {
			return fmt.Errorf("encoding the state of %s for a snapshot: %w", e.ref, err)
		}
		if _, ok := e.fit(len(state)+fences+es.runBytes, added); ok {
			snap, snapSeq, version, fitted = state, last, es.version, true
		} else if !es.warned {
			es.warned = true
			e.h.log.Warn("a snapshot of the entity's state would exceed MaxStateBytes; keeping the previous one (activation replays more events)",
				"entity", e.ref, "state_bytes", len(state), "max_state_bytes", e.h.cfg.MaxStateBytes)
		}
	}
	if !fitted {
		if size, ok := e.fit(len(snap)+fences+es.runBytes, added); !ok {
			e.unremember(added)
			e.rollback()
			return errf(ordopb.Code_CODE_TOO_LARGE, "the record of %s with the events of the run would be %d bytes at least (snapshot %d, events %d), over MaxStateBytes %d; nothing applied",
				e.ref, size, len(snap), es.runBytes, e.h.cfg.MaxStateBytes)
		}
	}
	jw := journalWrite{meta: encodeJournalMeta(snapSeq, last, version), bytes: es.runBytes}
	if n > 0 {
		jw.events = make([]persistence.Event, n)
		for i, data := range es.run {
			jw.events[i] = persistence.Event{Seq: es.lastEvent + 1 + uint64(i), Data: data}
		}
	}
	if es.deleteEvents && snapSeq > es.snapSeq {
		jw.deleteBefore = snapSeq + 1
	}
	es.lastEvent, es.snapshot, es.snapSeq, es.snapVersion = last, snap, snapSeq, version
	es.final = false
	es.run, es.runBytes = nil, 0 // the write owns the events' data
	es.beh.keep()
	return e.persist(snap, jw)
}

// activateEvents loads an event-sourced entity from its stored record:
// the snapshot (unless it is of another SnapshotVersion), then the events
// after it, read from the journal and applied in order.
func (e *entity) activateEvents(ctx context.Context, stored *ordopb.EntityRecord) error {
	es := e.es
	es.begin()
	es.warned, es.final = false, false
	es.lastEvent = stored.GetLastEvent()
	es.snapSeq, es.snapVersion, es.snapshot = stored.GetSnapshotSeq(), stored.GetSnapshotVersion(), stored.GetState()
	if es.snapshot == nil {
		es.snapshot = []byte{}
	}
	switch {
	case es.snapSeq > es.lastEvent:
		return errf(ordopb.Code_CODE_INTERNAL, "the record of %s has a snapshot as of event %d but its journal ends at %d",
			e.ref, es.snapSeq, es.lastEvent)
	case es.snapVersion == 0 && es.lastEvent != 0:
		return errf(ordopb.Code_CODE_INTERNAL, "the record of %s has events up to %d but no snapshot version", e.ref, es.lastEvent)
	case es.snapVersion == 0:
		// Never written as event-sourced: a new entity, or the record of a
		// kind that was state-based, whose state is the snapshot at 0.
		es.snapVersion = es.version
	}
	snap, from := es.snapshot, es.snapSeq+1
	if es.snapVersion != es.version {
		snap, from = nil, 1 // rebuilt from the journal; the next write stores a new snapshot
	}
	if err := e.beh.load(snap); err != nil {
		return errf(ordopb.Code_CODE_INTERNAL, "decoding the snapshot of %s (as of event %d): %v", e.ref, es.snapSeq, err)
	}
	es.beh.keep()
	for from <= es.lastEvent {
		rctx, cancel := context.WithTimeout(ctx, e.h.cfg.StoreTimeout)
		evs, err := e.h.journal.ReadEvents(rctx, e.ref.Kind, e.ref.ID, from, int(min(es.lastEvent-from+1, replayPage)))
		cancel()
		if err != nil {
			return errf(ordopb.Code_CODE_UNAVAILABLE, "reading the journal of %s from event %d: %v", e.ref, from, err)
		}
		if len(evs) == 0 {
			return errf(ordopb.Code_CODE_INTERNAL, "the journal of %s ends before event %d, which its record says was written (last %d)",
				e.ref, from, es.lastEvent)
		}
		for _, ev := range evs {
			if ev.Seq != from {
				why := ""
				if from == 1 && es.snapVersion != es.version {
					why = fmt.Sprintf(" (rebuilding the state: its snapshot has version %d, the kind %d; events before %d were deleted)",
						es.snapVersion, es.version, ev.Seq)
				}
				return errf(ordopb.Code_CODE_INTERNAL, "the journal of %s has event %d where event %d was expected%s", e.ref, ev.Seq, from, why)
			}
			if err := es.beh.applyStored(ev.Data); err != nil {
				return errf(ordopb.Code_CODE_INTERNAL, "replaying event %d of %s: %v", ev.Seq, e.ref, trimActors(err))
			}
			from++
		}
	}
	return nil
}

// trimActors drops the package prefix of an error made in this package,
// for messages that already say where they come from.
func trimActors(err error) string { return strings.TrimPrefix(err.Error(), "actors: ") }
