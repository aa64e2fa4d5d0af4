package actors

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ordo-actors/ordo/proto/ordopb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// MaxReminders is the most durable reminders (SetReminder) one entity may
// have. They are part of its record, written whole with every write.
const MaxReminders = 256

// maxReminderNameLen is the longest reminder name, in bytes.
const maxReminderNameLen = 128

// errNoIndex refuses reminders over a store that cannot index them.
var errNoIndex = errors.New("actors: the host's store keeps no reminder index (persistence.ReminderIndex): durable reminders are not available")

// SetReminder sets the durable reminder name: once due has passed, msg is
// delivered to this entity's own handler of its type, run as any request
// (a write handler's changes are written and gated as usual) with Caller
// the entity itself. A reminder is part of the entity's record: it is
// set only if the run succeeds and its write is durable (a run rolled back
// sets nothing), it survives passivation, crashes and hand-offs, and it
// does not keep the entity active: the owner of the entity's shard finds
// it in the store's reminder index and activates the entity when it is due
// (see the package documentation for the tolerance, HostConfig.ReminderTick).
//
// A period > 0 makes the reminder periodic: after a firing it is due again
// at the first due + k·period later than the firing's time (periods missed
// while it could not fire are skipped, not caught up); a reminder with
// period 0 is removed once it fired. A firing is delivered at least once
// and applied at most once per due time: its request ID is
// "ordo.reminder/<name>/<due, Unix nanoseconds>", and the reminder is
// advanced or removed by the same write that applies the message. A run
// that handles a firing may set or cancel that same reminder: its change
// wins over the advance.
//
// SetReminder with the name of an existing reminder replaces it. msg is
// encoded at the call. SetReminder returns an error, and sets nothing,
// when name is empty, over 128 bytes or not valid UTF-8, when due is
// before 1970 or period negative, when the kind has no handler for msg's
// type, when the entity already has MaxReminders reminders, or when the
// host's store is not a persistence.ReminderIndex. A read handler (OnRead)
// may not change reminders: it panics, which answers its request with
// ErrInternal.
func (c *Context[S]) SetReminder(name string, due time.Time, period time.Duration, msg proto.Message) error {
	return c.ent.setReminder(name, due, period, msg)
}

// CancelReminder removes the durable reminder name, if the run succeeds,
// and reports whether the entity had it (or set it earlier in this run).
// A read handler may not call it (see SetReminder).
func (c *Context[S]) CancelReminder(name string) bool {
	return c.ent.cancelReminder(name)
}

// Reminder returns when the reminder name is next due and its period, as
// this run leaves them so far, and false when the entity has no such
// reminder. While a run handles a reminder's firing, the reminder is
// still due at the firing's time: it is advanced or removed when the run
// ends.
func (c *Context[S]) Reminder(name string) (due time.Time, period time.Duration, ok bool) {
	r, ok := c.ent.runReminderSet().get(name)
	if !ok {
		return time.Time{}, 0, false
	}
	return time.Unix(0, r.due), time.Duration(r.period), true
}

// reminder is one durable reminder. Immutable once made.
type reminder struct {
	name   string
	due    int64 // Unix nanoseconds
	period int64 // nanoseconds; 0: fires once
	msg    *anypb.Any
	enc    []byte // as an EntityRecord.reminders field
}

// reminderField is the field number of EntityRecord.reminders.
const reminderField = 7

func newReminder(name string, due, period int64, msg *anypb.Any) *reminder {
	r := &reminder{name: name, due: due, period: period, msg: msg}
	body, err := deterministic.Marshal(&ordopb.Reminder{Name: name, DueUnixNano: due, PeriodNanos: period, Message: msg})
	if err != nil {
		// A valid UTF-8 name, two integers and an encoded message: a bug.
		panic(fmt.Sprintf("actors: encoding reminder %q: %v", name, err))
	}
	b := protowire.AppendTag(make([]byte, 0, len(body)+8), reminderField, protowire.BytesType)
	r.enc = protowire.AppendBytes(b, body)
	return r
}

// next returns r as it stands after a firing at now: due again at the
// first due + k·period after now, or nil when it fires once (or its next
// due time is past the end of time).
func (r *reminder) next(now int64) *reminder {
	if r.period <= 0 {
		return nil
	}
	k := int64(1)
	if now >= r.due {
		k = (now-r.due)/r.period + 1
	}
	if r.period > (math.MaxInt64-r.due)/k {
		return nil
	}
	return newReminder(r.name, r.due+k*r.period, r.period, r.msg)
}

// reminderSet is an entity's reminders by name ascending. A set written
// or loaded is never changed in place (a write shares its encoding with
// the batcher); a run changes a copy.
type reminderSet struct {
	list []*reminder
	enc  []byte // the reminders' encodings, concatenated (see seal)
}

func (s *reminderSet) find(name string) (int, bool) {
	return slices.BinarySearchFunc(s.list, name, func(r *reminder, n string) int { return strings.Compare(r.name, n) })
}

func (s *reminderSet) get(name string) (*reminder, bool) {
	if i, ok := s.find(name); ok {
		return s.list[i], true
	}
	return nil, false
}

// put sets r (replacing the reminder of its name) in a set the caller
// owns.
func (s *reminderSet) put(r *reminder) {
	if i, ok := s.find(r.name); ok {
		s.list[i] = r
	} else {
		s.list = slices.Insert(s.list, i, r)
	}
}

// remove removes the reminder name from a set the caller owns.
func (s *reminderSet) remove(name string) bool {
	i, ok := s.find(name)
	if ok {
		s.list = slices.Delete(s.list, i, i+1)
	}
	return ok
}

// clone returns a copy the caller may change.
func (s *reminderSet) clone() *reminderSet {
	return &reminderSet{list: slices.Clone(s.list)}
}

// seal encodes the set, which is not changed from then on.
func (s *reminderSet) seal() {
	s.enc = nil
	for _, r := range s.list {
		s.enc = append(s.enc, r.enc...)
	}
	if len(s.list) == 0 {
		s.list = nil
	}
}

// earliest returns the earliest due time, 0 when the set is empty.
func (s *reminderSet) earliest() int64 {
	var min int64
	for _, r := range s.list {
		if min == 0 || r.due < min {
			min = r.due
		}
	}
	return min
}

// load sets s from a stored record.
func (s *reminderSet) load(rec *ordopb.EntityRecord) {
	*s = reminderSet{}
	for _, r := range rec.GetReminders() {
		s.put(newReminder(r.GetName(), r.GetDueUnixNano(), r.GetPeriodNanos(), r.GetMessage()))
	}
	s.seal()
}

// recordDue returns the record's due time as of the last write or load.
func (e *entity) recordDue() int64 {
	if e.rm == nil {
		return 0
	}
	return e.rm.due
}

// firing is one due reminder being delivered.
type firing struct {
	name string
	due  int64
	// consumed: a write advanced or removed the reminder (or the run that
	// handled it set or cancelled it). retry: the run ended without an
	// answer that may be kept (its context ended): a later tick fires it
	// again.
	consumed, retry bool
	// failed is the error the firing was answered with at once, if any.
	failed *ordopb.Error
}

// reminderRequestID is the request ID of a reminder's firing at due.
func reminderRequestID(name string, due int64) string {
	return "ordo.reminder/" + name + "/" + strconv.FormatInt(due, 10)
}

// reminderState is an entity's durable reminders, allocated when it has
// any (loaded or set): entities that use none pay one pointer.
type reminderState struct {
	set reminderSet // as of the last write or load
	// due is the record's due time as of the last write or load
	// (persistence.Record.Due, the earliest reminder's): the index entry
	// the next write moves.
	due int64
	// run is the current run's copy of set once it changed a reminder,
	// touched the names it set or cancelled.
	run     *reminderSet
	touched map[string]bool
	// firing is the reminder the current run delivers.
	firing *firing
	// fix is the due time of a stale index entry, removed by the next
	// write.
	fix int64
}

var noReminders reminderSet

// reminders returns the reminders as of the last write or load.
func (e *entity) reminders() *reminderSet {
	if e.rm == nil {
		return &noReminders
	}
	return &e.rm.set
}

// runReminderSet returns the reminders as the current run leaves them so
// far.
func (e *entity) runReminderSet() *reminderSet {
	if e.rm != nil && e.rm.run != nil {
		return e.rm.run
	}
	return e.reminders()
}

// changeReminders returns the run's own copy of the reminders.
func (e *entity) changeReminders(name string) *reminderSet {
	if e.reading {
		panic("actors: a read handler may not change reminders (SetReminder, CancelReminder)")
	}
	if e.rm == nil {
		e.rm = &reminderState{}
	}
	if e.rm.run == nil {
		e.rm.run = e.rm.set.clone()
	}
	if e.rm.touched == nil {
		e.rm.touched = make(map[string]bool)
	}
	e.rm.touched[name] = true
	return e.rm.run
}

func (e *entity) setReminder(name string, due time.Time, period time.Duration, msg proto.Message) error {
	switch {
	case e.h.index == nil:
		return errNoIndex
	case name == "" || len(name) > maxReminderNameLen || !utf8.ValidString(name):
		return fmt.Errorf("actors: reminder name must be 1 to %d bytes of UTF-8", maxReminderNameLen)
	case due.IsZero() || due.UnixNano() <= 0:
		return fmt.Errorf("actors: reminder %q: due time %v is not after 1970", name, due)
	case period < 0:
		return fmt.Errorf("actors: reminder %q: negative period %v", name, period)
	case nilMessage(msg):
		return fmt.Errorf("actors: reminder %q: nil message", name)
	case !e.handles(msg):
		return fmt.Errorf("actors: reminder %q: kind %q has no handler for %s", name, e.en.ref.Kind, msg.ProtoReflect().Descriptor().FullName())
	}
	if _, ok := e.runReminderSet().get(name); !ok && len(e.runReminderSet().list) >= MaxReminders {
		return fmt.Errorf("actors: %s has %d reminders (MaxReminders)", e.en.ref, MaxReminders)
	}
	payload := new(anypb.Any)
	if err := anypb.MarshalFrom(payload, msg, deterministic); err != nil {
		return fmt.Errorf("actors: reminder %q: encoding %s: %w", name, msg.ProtoReflect().Descriptor().FullName(), err)
	}
	e.changeReminders(name).put(newReminder(name, due.UnixNano(), int64(period), payload))
	return nil
}

func (e *entity) cancelReminder(name string) bool {
	if e.reading {
		e.changeReminders(name) // panics
	}
	if _, ok := e.runReminderSet().get(name); !ok {
		return false
	}
	return e.changeReminders(name).remove(name)
}

// beginReminders readies the reminders for a run; f is the firing it
// delivers, if any.
func (e *entity) beginReminders(f *firing) {
	if e.rm == nil && f == nil {
		return
	}
	if e.rm == nil {
		e.rm = &reminderState{}
	}
	e.rollbackReminders()
	e.rm.firing = f
}

// rollbackReminders forgets the current run's reminder changes, not the
// firing it delivers: a run whose handler returned an error is rolled
// back, and its answer, recorded, still consumes the firing.
func (e *entity) rollbackReminders() {
	if e.rm == nil {
		return
	}
	e.rm.run = nil
	clear(e.rm.touched)
}

// runReminders returns the reminders the run leaves (its changes, and the
// advance of the reminder it fired unless it changed that one itself) and
// whether the run must write: they differ from the last write's, or a
// stale index entry is to be removed.
func (e *entity) runReminders() (*reminderSet, bool) {
	rm := e.rm
	if rm == nil {
		return &noReminders, false
	}
	set, changed := &rm.set, false
	if rm.run != nil {
		set, changed = rm.run, true
	}
	if f := rm.firing; f != nil && !rm.touched[f.name] {
		if r, ok := set.get(f.name); ok && r.due == f.due {
			if !changed {
				set, changed = set.clone(), true
			}
			if n := r.next(timeNow().UnixNano()); n != nil {
				set.put(n)
			} else {
				set.remove(f.name)
			}
		}
	}
	if changed {
		set.seal()
	}
	return set, changed || rm.fix != 0
}

// commitReminders makes set the reminders as of the write being made, and
// returns the record's due time and the one the store indexed the entity
// under so far (or a stale entry's, to remove): persistence.Record.Due
// and PrevDue.
func (e *entity) commitReminders(set *reminderSet) (due, prevDue int64) {
	rm := e.rm
	if rm == nil {
		return 0, 0
	}
	if set != &rm.set {
		rm.set = *set
	}
	due, prevDue = rm.set.earliest(), rm.due
	if rm.fix != 0 {
		prevDue, rm.fix = rm.fix, 0
	}
	rm.due = due
	return due, prevDue
}

// committedReminders ends a run whose write was made: the firing it
// delivered is consumed.
func (e *entity) committedReminders() {
	if e.rm == nil {
		return
	}
	if e.rm.firing != nil {
		e.rm.firing.consumed = true
		e.rm.firing = nil
	}
	e.rollbackReminders()
	if len(e.rm.set.list) == 0 && e.rm.due == 0 {
		e.rm = nil // an entity without reminders keeps no state for them
	}
}

// loadReminders sets the reminders from a stored record whose due time is
// due.
func (e *entity) loadReminders(rec *ordopb.EntityRecord, due int64) {
	e.rm = nil
	if len(rec.GetReminders()) > 0 || due != 0 {
		e.rm = &reminderState{due: due}
		e.rm.set.load(rec)
	}
}

// handleRemind delivers the entity's due reminders: c is the host's
// delivery (Host.remind), sent because the store's index lists the entity
// as due at c.remind. Each due reminder fires as its own run and write;
// the delivery is answered once their writes are durable, which is what
// bounds the entities the host is reminding at once.
func (e *entity) handleRemind(c *call) {
	switch {
	case timeNow().UnixNano() > c.deadline:
		e.h.finish(c, errReply(c.env, errf(ordopb.Code_CODE_DEADLINE, "deadline passed before %s was reminded", e.en.ref)))
		return
	case e.hookRan:
		e.h.finish(c, errReply(c.env, errf(ordopb.Code_CODE_NOT_HERE, "entity %s is stopping", e.en.ref)))
		return
	}
	if !e.loaded {
		if err := e.activate(false); err != nil {
			e.h.finish(c, errReply(c.env, err))
			return
		}
	}
	now := timeNow().UnixNano()
	var due []*reminder
	for _, r := range e.reminders().list {
		if r.due <= now {
			due = append(due, r)
		}
	}
	slices.SortStableFunc(due, func(a, b *reminder) int { return cmp.Compare(a.due, b.due) })
	fired := 0
	for _, r := range due {
		if !e.loaded || e.hookRan {
			break // a failed write restarted the entity
		}
		// An earlier firing's run may have changed it; one set due again
		// by its own run fires at a later delivery.
		if cur, ok := e.reminders().get(r.name); !ok || cur != r {
			continue
		}
		e.fire(r)
		fired++
	}
	switch {
	case !e.loaded || fired > 0:
	case e.behindRuns > 0:
		// A run written behind (Context.WriteBehind) changed the reminders
		// the index lists: the write that saves it moves the entry.
		e.begin()
		if err := e.commit(0); err != nil {
			e.h.log.Warn("saving reminders written behind failed", "entity", e.en.ref, "err", err)
		}
	case c.remind != e.recordDue() && e.seq == e.durable:
		// Listed under a due time the entity's durable record does not
		// have: an index entry left behind (see
		// persistence.ReminderIndex). The next write removes it.
		e.begin()
		if e.rm == nil {
			e.rm = &reminderState{}
		}
		e.rm.fix = c.remind
		if err := e.commit(0); err != nil {
			e.h.log.Warn("removing a stale reminder index entry failed", "entity", e.en.ref, "err", err)
		}
	}
	e.hold(e.seq, c, &ordopb.Reply{RequestId: c.env.GetRequestId()}, nil)
}

// fire delivers one due reminder as a request to the entity's own
// handler: deduplicated by its request ID, and advanced or removed by the
// write that applies it (runReminders). A firing that was answered
// without such a write (a read handler, a request ID already answered) or
// that failed for good (no handler, a panic, a record too large) is
// consumed by a write of its own; one whose run's context ended is left
// for a later delivery.
func (e *entity) fire(r *reminder) {
	f := &firing{name: r.name, due: r.due}
	c := &call{
		env:   &ordopb.Envelope{Target: e.en.ref.Proto(), RequestId: reminderRequestID(r.name, r.due), Payload: r.msg},
		shard: e.en.shard,
		reply: func(rep *ordopb.Reply) {
			if f.failed == nil && rep.GetError().GetCode() != ordopb.Code_CODE_HANDLER {
				f.failed = rep.GetError()
			}
		},
		caller:   Caller{Class: CallerEntity, Entity: e.en.ref},
		deadline: timeNow().Add(e.h.cfg.DefaultDeadline).UnixNano(),
		firing:   f,
	}
	e.h.remindersFired.Add(1)
	e.handleInvoke(c)
	if f.consumed || f.retry || !e.loaded {
		return
	}
	if f.failed != nil {
		e.h.log.Error("a reminder's firing failed; it is not retried", "entity", e.en.ref, "reminder", r.name,
			"due", time.Unix(0, r.due), "err", ErrorFromProto(f.failed))
	}
	e.begin()
	e.beginReminders(f)
	if err := e.commit(0); err != nil {
		e.h.log.Warn("advancing a fired reminder failed", "entity", e.en.ref, "reminder", r.name, "err", err)
	}
}

// reminderLoop fires the due reminders of the shards the host owns: every
// HostConfig.ReminderTick it scans the reminder index of each shard that
// may have one due (scan) and delivers them (remind).
func (h *Host) reminderLoop() {
	defer h.bg.Done()
	t := time.NewTicker(h.cfg.ReminderTick)
	defer t.Stop()
	for {
		select {
		case <-h.ctx.Done():
			return
		case <-t.C:
			h.remindTick()
		}
	}
}

// remindTick scans the shards that may have a reminder due now: those not
// scanned since the host took them, those whose last scan found one due
// by now, and those an entity wrote a due time to since (hint). A shard
// with nothing due costs no store read.
func (h *Host) remindTick() {
	now := timeNow().UnixNano()
	h.mu.Lock()
	var scan []*shardState
	for _, sh := range h.shards {
		if !sh.draining && min(sh.nextDue.Load(), sh.hint.Load()) <= now {
			scan = append(scan, sh)
		}
	}
	h.mu.Unlock()
	for _, sh := range scan {
		if sh.ctx.Err() == nil && !h.scan(sh, now) {
			h.reminderWaits.Add(1)
			return // no room for more deliveries: the next tick goes on
		}
	}
}

// scan reads the earliest entries of sh's reminder index and delivers
// the ones due by now. It reports false when the host has no room for
// more deliveries (see remind).
func (h *Host) scan(sh *shardState, now int64) bool {
	h.mu.Lock()
	room := h.cfg.ReminderBatch - len(h.reminding)
	full := h.active >= h.cfg.MaxActive+h.cfg.ReminderBatch // see remind
	h.mu.Unlock()
	if room <= 0 || full {
		return false
	}
	// From here on, writes that become durable note their due times in
	// the hint again; the read below sees every earlier one.
	hint := sh.hint.Swap(math.MaxInt64)
	// Entries of kinds the host does not run (one removed, or a rolling
	// deploy that has not reached this node) stay in the index, due: the
	// read asks for as many more as the last one passed over, so that
	// however many there are, the entries behind them are reached.
	limit := h.cfg.ReminderBatch + min(sh.passed, maxPassed*h.cfg.ReminderBatch)
	ctx, cancel := context.WithTimeout(sh.ctx, h.cfg.StoreTimeout)
	entries, err := h.index.Due(ctx, sh.id, math.MaxInt64, limit)
	cancel()
	h.reminderScans.Add(1)
	if err != nil {
		sh.noteDue(hint)
		if sh.ctx.Err() == nil {
			h.log.Warn("reading the reminder index failed; the next tick tries again", "shard", sh.id, "err", err)
		}
		return true
	}
	// The shard is read again once its next entry is due, or at once when
	// it had more entries due than it read, or when a delivery that may
	// leave its entry in place ends (remind).
	next := int64(math.MaxInt64)
	passed := 0
	for _, en := range entries {
		if en.Due > now {
			next = en.Due
			break
		}
		ref := Ref{Kind: en.Kind, ID: en.ID}
		if !h.runsHere(sh, ref) {
			passed++
			continue
		}
		if !h.remind(sh, ref, en.Due) {
			sh.nextDue.Store(en.Due)
			sh.passed = passed
			return false
		}
	}
	if len(entries) == limit && next == math.MaxInt64 {
		next = entries[len(entries)-1].Due
	}
	sh.passed = passed
	sh.nextDue.Store(next)
	return true
}

// maxPassed bounds, in ReminderBatch units, how many index entries of no
// entity the host runs a scan reads past.
const maxPassed = 16

// runsHere reports whether ref, listed in sh's reminder index, is an
// entity of a kind the host runs, in shard sh.
func (h *Host) runsHere(sh *shardState, ref Ref) bool {
	if _, ok := h.kinds[ref.Kind]; !ok || ref.Validate() != nil || ShardOf(ref, h.cfg.Shards) != sh.id {
		h.log.Debug("passing over a reminder index entry of no entity of this host's shard", "shard", sh.id, "entity", ref)
		return false
	}
	return true
}

// remindRequestID is the request ID of a delivery of due reminders.
const remindRequestID = "ordo.reminders"

// remind asks the entity ref (one the host runs in sh: runsHere), listed
// in sh's reminder index as due at due, to fire its due reminders: a call
// through the entity's mailbox, which activates it if it is not active,
// and which is answered once the firings' writes are durable. An entity
// has one delivery outstanding at most, and the host
// HostConfig.ReminderBatch; and a delivery activates an entity only while
// the host has fewer than MaxActive + ReminderBatch active. remind reports
// false when either bound is reached. A delivery refused (overload, the shard moving)
// leaves the index as it is. When a delivery ends, the shard is read
// again at the next tick: its entry may still be there (refused, or a
// firing to deliver again) or another one due.
func (h *Host) remind(sh *shardState, ref Ref, due int64) bool {
	kind := h.kinds[ref.Kind] // runsHere(sh, ref)
	h.mu.Lock()
	if _, busy := h.reminding[ref]; busy {
		h.mu.Unlock()
		return true
	}
	if len(h.reminding) >= h.cfg.ReminderBatch {
		h.mu.Unlock()
		return false
	}
	if sh.entities[ref] == nil && h.active >= h.cfg.MaxActive+h.cfg.ReminderBatch {
		// Passivation lags behind activation (entities asked to
		// passivate have yet to run): a delivery would activate one more.
		h.mu.Unlock()
		return false
	}
	if h.reminding == nil {
		h.reminding = make(map[Ref]struct{})
	}
	h.reminding[ref] = struct{}{}
	h.mu.Unlock()
	now := timeNow().UnixNano()
	c := &call{
		env:    &ordopb.Envelope{Target: ref.Proto(), RequestId: remindRequestID},
		caller: Caller{Class: CallerProcess},
		remind: due,
		reply: func(*ordopb.Reply) {
			h.mu.Lock()
			delete(h.reminding, ref)
			h.mu.Unlock()
			sh.noteDue(due)
		},
		deadline: now + int64(h.cfg.DefaultDeadline),
	}
	h.enqueue(c, ref, kind, now)
	return true
}
