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
// The record of an event-sourced entity holds its dedup window and sender
// fences, as always, the Seq of its last event (EntityRecord.last_event)
// and which snapshot is current (snapshot_seq, snapshot_version), but not
// its state. A snapshot (the state as of event snapshot_seq) is a record
// of its own, of kind "<kind>/snapshot" and the entity's ID, written in
// the same Save as the entity's record: by the write that brings the
// events since the last snapshot to EventSourcing.SnapshotEvery, and on
// passivation and on a graceful release of the shard when events came
// after it. Other writes carry neither the state nor its snapshot: a
// write costs its events and the record's few hundred bytes whatever the
// state's size, and the state is encoded once per SnapshotEvery events,
// not on every write. Activation loads the record and the snapshot it
// names, and applies the events after it, read from the journal: at most
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
//     snapshot at event 0 (their state is the whole state), stored as the
//     entity's snapshot by its first write, and its events start at 1.

// replayPage is how many events activation reads from the journal at once.
const replayPage = 1000

// DefaultSnapshotEvery is EventSourcing.SnapshotEvery's default.
const DefaultSnapshotEvery = 1000

// SnapshotKindSuffix makes the kind of an event-sourced kind's snapshot
// records: "<kind>" + SnapshotKindSuffix. No kind's name holds a "/".
const SnapshotKindSuffix = "/snapshot"

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
// lost at the next activation, and at the next rollback. Read handlers
// must not emit.
//
// A run that fails is rolled back to the state as of the last run kept:
// an active entity that has emitted keeps a second copy of its state for
// that, which Apply brings up to date with each kept run's events (a copy
// of each), so that a run costs its events, not a copy of the state.
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
		if n := len(k.name) + len(SnapshotKindSuffix); n > persistence.MaxKindLen {
			return fmt.Errorf("EventSourced: the kind's name is too long for its snapshots' kind (%d bytes with %q, at most %d)",
				n, SnapshotKindSuffix, persistence.MaxKindLen)
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
	// An Any: type_url (1) and value (2), as proto.Marshal would write it.
	b := make([]byte, 0, len(name)+len(value)+2*protowire.SizeVarint(uint64(len(value)))+2)
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, string(name))
	if len(value) > 0 {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendBytes(b, value)
	}
	return b, nil
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
		panic(fmt.Sprintf("actors: Emit in kind %q, which is not event-sourced (EventSourced)", e.en.ref.Kind))
	}
	ek := b.kind.es
	data, err := ek.encodeEvent(e.en.ref.Kind, event)
	if err != nil {
		panic(fmt.Sprintf("actors: %s: Emit: %v", e.en.ref, err))
	}
	if b.rb == nil {
		b.rb = &rollbackPoint[S]{base: proto.Clone(c.State).(S)}
	}
	b.rb.dirty = true
	if err := ek.es.Apply(c.State, event); err != nil {
		panic(fmt.Sprintf("actors: %s: Emit: applying %s: %v", e.en.ref, event.ProtoReflect().Descriptor().FullName(), err))
	}
	b.rb.events = append(b.rb.events, event)
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

// rollbackPoint is an event-sourced entity's rollback point: base is a
// second copy of its state as of the last run kept, made by the entity's
// first Emit and brought up to date by keep, which applies the kept runs'
// events to it too; restore copies it back. events are the run's events
// not yet applied to base; dirty says the state may have changed since
// base. It lives apart from typedBehavior, so that entities of other
// kinds do not carry its fields.
type rollbackPoint[S proto.Message] struct {
	base   S
	events []proto.Message
	dirty  bool
}

// keep makes the state the rollback point: it applies the run's events
// to the base copy as well, which costs each event's Apply again rather
// than a copy of the whole state per run. Each event is applied as a
// copy of its own, since Apply may keep parts of it in the state, which
// later events may change in place. An Apply that fails on the base (it
// succeeded on the state: Apply is not deterministic) drops the base, to
// be copied again by the next Emit.
func (b *typedBehavior[S]) keep() {
	rb := b.rb
	if rb == nil {
		return
	}
	apply := b.kind.es.es.Apply
	for _, ev := range rb.events {
		if err := apply(rb.base, proto.Clone(ev)); err != nil {
			b.rb = nil
			return
		}
	}
	clear(rb.events)
	rb.events, rb.dirty = rb.events[:0], false
}

// restore rolls the state back to the last run kept, if an event changed
// it since.
func (b *typedBehavior[S]) restore() {
	rb := b.rb
	if rb == nil {
		return
	}
	if rb.dirty {
		b.state = proto.Clone(rb.base).(S)
	}
	clear(rb.events)
	rb.events, rb.dirty = rb.events[:0], false
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
	// unsaved: the state at snapSeq is not in a snapshot record (a record
	// of a kind that was state-based holds it): the next write stores it.
	unsaved bool
	// run holds the events not written yet, encoded, in order: the first
	// behind (behindBytes) of runs that wrote behind
	// (Context.WriteBehind), then the current run's.
	run                 [][]byte
	runBytes            int
	behind, behindBytes int
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
	// snapshot is the Data of the entity's new snapshot record, nil when
	// the write stores none.
	snapshot []byte
	bytes    int // of the events' data and the snapshot
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

// begin readies the event buffers of a run: the events written behind
// stay.
func (es *eventState) begin() {
	es.run, es.runBytes = es.run[:es.behind], es.behindBytes
}

// keepBehind keeps the run's events, unwritten, for the next write, and
// makes the state the rollback point.
func (es *eventState) keepBehind() {
	es.behind, es.behindBytes = len(es.run), es.runBytes
	es.beh.keep()
}

// dropBehind forgets the events written behind (the entity restarts).
func (es *eventState) dropBehind() {
	es.behind, es.behindBytes = 0, 0
	es.begin()
}

// emitted reports whether the current run emitted events.
func (e *entity) emitted() bool { return e.es != nil && len(e.es.run) > e.es.behind }

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
	es.final = es.lastEvent > es.snapSeq || es.snapVersion != es.version || es.unsaved
	return es.final
}

// commitEvents is commit's write for an event-sourced entity: it writes
// the run's events, the dedup window, fences and reminders (rem; remWrite:
// they must be written), and a snapshot when one is due, when anything
// changed. Like commit, it returns an ErrTooLarge *Error after rolling the
// run back when the run cannot be written, and another error when the
// entity must restart.
func (e *entity) commitEvents(added int, rem *reminderSet, remWrite bool) error {
	es := e.es
	n := len(es.run)
	if n == 0 && added == 0 && !e.dirty && e.behindRuns == 0 && !es.final && !remWrite {
		return nil
	}
	if n-es.behind > e.h.cfg.BatchMaxEvents {
		e.unremember(added)
		e.rollback()
		return errf(ordopb.Code_CODE_TOO_LARGE, "a run of %s emitted %d events, over BatchMaxEvents %d; nothing applied",
			e.en.ref, n-es.behind, e.h.cfg.BatchMaxEvents)
	}
	if size, ok := e.fit(len(e.fences.encoded())+len(rem.enc)+es.runBytes, added); !ok {
		e.unremember(added)
		e.rollback()
		return errf(ordopb.Code_CODE_TOO_LARGE, "the record of %s with the events of the run would be %d bytes at least (events %d, reminders %d), over MaxStateBytes %d; nothing applied",
			e.en.ref, size, es.runBytes, len(rem.enc), e.h.cfg.MaxStateBytes)
	}
	last := es.lastEvent + uint64(n)
	jw := journalWrite{bytes: es.runBytes}
	snapSeq, version := es.snapSeq, es.snapVersion
	if es.final || es.unsaved || version != es.version || last-snapSeq >= es.every {
		state, err := e.beh.snapshot()
		if err != nil {
			return fmt.Errorf("encoding the state of %s for a snapshot: %w", e.en.ref, err)
		}
		if len(state) <= e.h.cfg.MaxStateBytes {
			snapSeq, version = last, es.version
			jw.snapshot, err = proto.Marshal(&ordopb.EntityRecord{State: state, SnapshotSeq: snapSeq, SnapshotVersion: version})
			if err != nil {
				return fmt.Errorf("encoding the snapshot of %s: %w", e.en.ref, err)
			}
			jw.bytes += len(jw.snapshot)
			es.unsaved = false
		} else if !es.warned {
			es.warned = true
			e.h.log.Warn("a snapshot of the entity's state would exceed MaxStateBytes; keeping the previous one (activation replays more events)",
				"entity", e.en.ref, "state_bytes", len(state), "max_state_bytes", e.h.cfg.MaxStateBytes)
		}
	}
	jw.meta = encodeJournalMeta(snapSeq, last, version)
	if n > 0 {
		jw.events = make([]persistence.Event, n)
		for i, data := range es.run {
			jw.events[i] = persistence.Event{Seq: es.lastEvent + 1 + uint64(i), Data: data}
		}
	}
	if es.deleteEvents && snapSeq > es.snapSeq {
		jw.deleteBefore = snapSeq + 1
	}
	es.lastEvent, es.snapSeq, es.snapVersion = last, snapSeq, version
	es.final = false
	es.run, es.runBytes = nil, 0 // the write owns the events' data
	es.behind, es.behindBytes = 0, 0
	es.beh.keep()
	return e.persist(nil, rem, jw)
}

// activateEvents loads an event-sourced entity from its stored record:
// the snapshot the record names (unless it is of another SnapshotVersion),
// then the events after it, read from the journal and applied in order.
func (e *entity) activateEvents(ctx context.Context, stored *ordopb.EntityRecord) error {
	es := e.es
	es.dropBehind()
	es.warned, es.final, es.unsaved = false, false, false
	es.lastEvent, es.snapSeq, es.snapVersion = stored.GetLastEvent(), stored.GetSnapshotSeq(), stored.GetSnapshotVersion()
	snap, from, err := e.h.snapshotOf(ctx, e.en.ref, stored, es.version, e.h.loader.load)
	if err != nil {
		return err
	}
	if es.snapVersion == 0 {
		// Never written as event-sourced: a new entity, or the record of a
		// kind that was state-based, whose state is the snapshot at 0.
		es.snapVersion, es.unsaved = es.version, len(snap) > 0
	}
	if err := e.beh.load(snap); err != nil {
		return errf(ordopb.Code_CODE_INTERNAL, "decoding the snapshot of %s (as of event %d): %v", e.en.ref, es.snapSeq, err)
	}
	es.beh.keep()
	return e.h.replay(ctx, e.en.ref, from, stored, es.version, es.beh.applyStored)
}

// snapshotOf returns the snapshot an event-sourced entity's stored record
// names (nil: the empty state), loaded with load, and the first event to
// apply after it: 1 when the snapshot is of another version than
// version, which is then not loaded.
func (h *Host) snapshotOf(ctx context.Context, ref Ref, stored *ordopb.EntityRecord, version uint32,
	load func(ctx context.Context, kind, id string) (persistence.Record, error)) ([]byte, uint64, error) {
	snapSeq, snapVersion, last := stored.GetSnapshotSeq(), stored.GetSnapshotVersion(), stored.GetLastEvent()
	switch {
	case snapSeq > last:
		return nil, 0, errf(ordopb.Code_CODE_INTERNAL, "the record of %s names a snapshot as of event %d but its journal ends at %d",
			ref, snapSeq, last)
	case snapVersion == 0 && last != 0:
		return nil, 0, errf(ordopb.Code_CODE_INTERNAL, "the record of %s has events up to %d but no snapshot version", ref, last)
	case snapVersion == 0:
		return stored.GetState(), 1, nil // a new entity, or a state-based kind's record
	case snapVersion != version:
		return nil, 1, nil // rebuilt from the journal; the next write stores a new snapshot
	case snapSeq == 0:
		return nil, 1, nil
	}
	rec, err := load(ctx, ref.Kind+SnapshotKindSuffix, ref.ID)
	if err != nil {
		return nil, 0, errf(ordopb.Code_CODE_UNAVAILABLE, "loading the snapshot of %s: %v", ref, err)
	}
	var sr ordopb.EntityRecord
	if err := proto.Unmarshal(rec.Data, &sr); err != nil {
		return nil, 0, errf(ordopb.Code_CODE_INTERNAL, "decoding the snapshot record of %s: %v", ref, err)
	}
	if sr.GetSnapshotSeq() != snapSeq || sr.GetSnapshotVersion() != snapVersion {
		return nil, 0, errf(ordopb.Code_CODE_INTERNAL, "the snapshot of %s is as of event %d (version %d), its record names event %d (version %d)",
			ref, sr.GetSnapshotSeq(), sr.GetSnapshotVersion(), snapSeq, snapVersion)
	}
	return sr.GetState(), snapSeq + 1, nil
}

// replay applies the events from..last_event of ref's journal, in pages,
// with apply. stored is the entity's record and version its kind's
// SnapshotVersion (for the error of a rebuild that cannot be).
func (h *Host) replay(ctx context.Context, ref Ref, from uint64, stored *ordopb.EntityRecord, version uint32,
	apply func(data []byte) error) error {
	last := stored.GetLastEvent()
	for from <= last {
		rctx, cancel := context.WithTimeout(ctx, h.cfg.StoreTimeout)
		evs, err := h.journal.ReadEvents(rctx, ref.Kind, ref.ID, from, int(min(last-from+1, replayPage)))
		cancel()
		if err != nil {
			return errf(ordopb.Code_CODE_UNAVAILABLE, "reading the journal of %s from event %d: %v", ref, from, err)
		}
		if len(evs) == 0 {
			return errf(ordopb.Code_CODE_INTERNAL, "the journal of %s ends before event %d, which its record says was written (last %d)",
				ref, from, last)
		}
		for _, ev := range evs {
			if ev.Seq != from {
				why := ""
				if v := stored.GetSnapshotVersion(); from == 1 && v != 0 && v != version {
					why = fmt.Sprintf(" (rebuilding the state: its snapshot has version %d, the kind %d; events before %d were deleted)",
						v, version, ev.Seq)
				}
				return errf(ordopb.Code_CODE_INTERNAL, "the journal of %s has event %d where event %d was expected%s", ref, ev.Seq, from, why)
			}
			if err := apply(ev.Data); err != nil {
				return errf(ordopb.Code_CODE_INTERNAL, "replaying event %d of %s: %v", ev.Seq, ref, trimActors(err))
			}
			from++
		}
	}
	return nil
}

// rebuild returns the state of the event-sourced entity ref of kind k
// whose record is stored, as its activation would rebuild it, without
// activating it (LoadRecord).
func (h *Host) rebuild(ctx context.Context, ref Ref, k Kind, stored *ordopb.EntityRecord) (proto.Message, error) {
	b := k.newBehavior()
	tb, ok := b.(interface {
		journaled
		stateMessage() proto.Message
		snapshotVersion() uint32
	})
	if !ok {
		return nil, ErrNoState
	}
	load := func(ctx context.Context, kind, id string) (persistence.Record, error) {
		return h.store.Load(ctx, kind, id)
	}
	snap, from, err := h.snapshotOf(ctx, ref, stored, tb.snapshotVersion(), load)
	if err != nil {
		return nil, err
	}
	if err := b.load(snap); err != nil {
		return nil, fmt.Errorf("decoding the snapshot: %w", err)
	}
	if err := h.replay(ctx, ref, from, stored, tb.snapshotVersion(), tb.applyStored); err != nil {
		return nil, err
	}
	return tb.stateMessage(), nil
}

func (b *typedBehavior[S]) snapshotVersion() uint32 { return b.kind.es.es.SnapshotVersion }

// trimActors drops the package prefix of an error made in this package,
// for messages that already say where they come from.
func trimActors(err error) string { return strings.TrimPrefix(err.Error(), "actors: ") }
