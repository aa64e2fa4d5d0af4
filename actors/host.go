package actors

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/ordo-actors/ordo/persistence"
	"github.com/ordo-actors/ordo/proto/ordopb"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Host runs the entities of the shards it owns. It is told which shards it
// owns, and at which epoch, by Own (placement drives this in a cluster;
// tests call it directly), and gives them up by Release (graceful) or Drop
// (at once).
//
// All methods are safe for concurrent use. Lock order: Host.mu, then a
// shard's fenceMu is never taken while holding Host.mu.
type Host struct {
	cfg   HostConfig
	deps  HostDeps
	store persistence.Store // raw, or raw with spans (HostConfig.Tracer)
	// raw is the store as given, for its optional interfaces
	// (persistence.BatchLoader, Journal, ReminderIndex), which store may
	// hide.
	raw    persistence.Store
	kinds  map[string]Kind
	log    *slog.Logger
	router Router
	// index is the store's reminder index (nil: the store keeps none).
	index persistence.ReminderIndex
	// journal is raw's journal when a kind is event-sourced (else nil).
	journal persistence.Journal

	system  *actor.ActorSystem
	batcher *batcher
	loader  *loader
	ctx     context.Context // ends at Shutdown
	cancel  context.CancelFunc

	bg        sync.WaitGroup // background fences
	startOnce sync.Once
	stopOnce  sync.Once
	stopped   chan struct{}

	mu      sync.Mutex
	started bool
	closed  bool
	shards  map[uint32]*shardState
	lru     lru // the active entries, most recently used first
	active  int
	evicts  int // entries asked to passivate and not yet gone
	// inflight counts the admitted calls not yet answered, co-located
	// messages excepted (HostConfig.MaxInflight).
	inflight int
	// parked holds the calls that arrived for a passivating entity
	// (entry.closing), for its next activation.
	parked map[*entry][]*call
	// reminding holds the entities the host is delivering due reminders
	// to (at most HostConfig.ReminderBatch; see remind).
	reminding map[Ref]struct{}

	timers       atomic.Int64 // pending timers of every entity
	activations  atomic.Uint64
	passivations atomic.Uint64
	overloaded   atomic.Uint64
	// dedupEntries is the number of dedup entries the active entities
	// hold in memory (each entity adds its window's change after every
	// message, and takes its count back when it stops).
	dedupEntries atomic.Int64
	// told counts the writes whose outcome the batcher told their entity
	// of (writeDone): the failed ones, and those it waited to hear of.
	told atomic.Uint64

	remindersFired, reminderScans, reminderWaits atomic.Uint64

	// props spawns every entity; its producer returns spawning, set under
	// mu just before each Spawn (which calls the producer synchronously),
	// so that no entity needs Props of its own.
	props    *actor.Props
	pool     *pool // runs the entities' mailboxes (dispatch.go)
	spawning *entity

	// stopping is closed when Shutdown or Close begins: entities that
	// HostDeps.Faults holds paused stop waiting (see waitFaults).
	stopping chan struct{}
}

// shardState is one owned shard. Fields are guarded by Host.mu except
// fenceMu/fenced.
type shardState struct {
	id    uint32
	epoch int64
	// ctx ends when the ownership does (dropState), with the reason as its
	// cause: the entities' outgoing calls and their runs' contexts derive
	// from it, so none is sent or resent by an ownership that is over.
	ctx      context.Context
	cancel   context.CancelCauseFunc
	draining bool
	dropped  bool
	// ended is set with dropped, before the batcher is told to cancel the
	// shard's writes: a write submitted after that is refused at once
	// (queue.add), so none waits in the queue for a co-located
	// dependency that can no longer become durable.
	ended    atomic.Bool
	calls    map[*call]struct{}
	idle     chan struct{} // closed once draining with no calls left
	entities map[Ref]*entry

	fenceMu sync.Mutex
	fenced  bool

	// Reminders (see reminderLoop): nextDue is the earliest due time the
	// last scan of the shard's index found (math.MaxInt64: none; 0: not
	// scanned yet), read and written by the loop only; hint is the
	// earliest due time written since that scan began (math.MaxInt64:
	// none), lowered by the entities' durable writes. passed is the
	// number of entries the last scan passed over (of no entity the host
	// runs here), by the loop only: the next scan reads that many more.
	nextDue atomic.Int64
	hint    atomic.Int64
	passed  int
}

// noteDue lowers sh.hint to due.
func (sh *shardState) noteDue(due int64) {
	for {
		cur := sh.hint.Load()
		if due >= cur || sh.hint.CompareAndSwap(cur, due) {
			return
		}
	}
}

// entry is one active entity as the host sees it.
type entry struct {
	ref   Ref
	pid   *actor.PID
	shard *shardState
	// prev and next link the entry into Host.lru (guarded by Host.mu).
	prev, next *entry
	queued     atomic.Int64 // invocations sent to the actor and not yet taken
	used       int64        // last call admitted, Unix nanoseconds (guarded by Host.mu)
	// durable is the highest sequence number of the entity's writes known
	// durable, advanced by the batcher: co-located writes that depend on
	// this entity's wait for it.
	durable atomic.Uint64
	// early holds the replies that wait for the entity's writes, for the
	// batcher to release as soon as they are durable (entity.hold).
	early earlyReplies
	// listen is the lowest write of the entity whose durability the entity
	// waits to hear of (0: none): the batcher tells it (writeDone) only of
	// those (entity.listen). A failed write it always tells.
	listen atomic.Uint64
	// stopC, made only when something waits for the actor to stop
	// (stoppedLocked), is closed then (guarded by Host.mu).
	stopC chan struct{}

	// The flags are guarded by Host.mu.
	evict bool // asked to passivate
	// closing: the entity is passivating; calls for it wait in
	// Host.parked and go to its next activation once it stopped.
	closing bool
	stopped bool // the actor has stopped, whatever the reason
	gone    bool // removed from the host's maps
}

// stoppedLocked returns a channel closed once en's actor has stopped.
// Host.mu is held.
func (en *entry) stoppedLocked() <-chan struct{} {
	if en.stopC == nil {
		en.stopC = make(chan struct{})
		if en.stopped {
			close(en.stopC)
		}
	}
	return en.stopC
}

// actorStopped records that en's actor has stopped.
func (h *Host) actorStopped(en *entry) {
	h.mu.Lock()
	defer h.mu.Unlock()
	en.stopped = true
	if en.stopC != nil {
		close(en.stopC)
	}
}

// lru is a doubly linked list of entries through their prev and next
// fields, front first: linking an entry costs it no allocation (an idle
// entity's memory counts, HostConfig.MaxActive of them).
type lru struct {
	root entry // root.next is the front, root.prev the back
}

func (l *lru) init() { l.root.next, l.root.prev = &l.root, &l.root }

func (l *lru) pushFront(en *entry) {
	en.prev, en.next = &l.root, l.root.next
	l.root.next.prev = en
	l.root.next = en
}

func (l *lru) remove(en *entry) {
	en.prev.next, en.next.prev = en.next, en.prev
	en.prev, en.next = nil, nil
}

func (l *lru) moveToFront(en *entry) {
	if l.root.next != en {
		l.remove(en)
		l.pushFront(en)
	}
}

// back returns the least recently used entry, nil when there is none.
func (l *lru) back() *entry { return l.prev(&l.root) }

// prev returns the entry used just after en, nil when en is the front.
func (l *lru) prev(en *entry) *entry {
	if en.prev == &l.root {
		return nil
	}
	return en.prev
}

// advanceDurable raises en.durable to seq.
func (en *entry) advanceDurable(seq uint64) {
	for {
		cur := en.durable.Load()
		if cur >= seq || en.durable.CompareAndSwap(cur, seq) {
			return
		}
	}
}

// earlyReplies are the replies that wait for writes of one entity to be
// durable. The batcher releases them, from the saver that made the write
// durable, so that a reply waits for no message to the entity; the entity
// fails those whose writes never will be (entity.failHeld).
type earlyReplies struct {
	mu      sync.Mutex
	replies []earlyReply // by dep, oldest first
}

type earlyReply struct {
	dep uint64 // the write the reply waits for
	c   *call
	rep *ordopb.Reply
}

// holdEarly adds the reply rep of c, which waits for write dep of en. It
// reports false, adding nothing, when that write is durable already.
func (en *entry) holdEarly(dep uint64, c *call, rep *ordopb.Reply) bool {
	er := &en.early
	er.mu.Lock()
	defer er.mu.Unlock()
	if en.durable.Load() >= dep { // read under mu: see takeEarly
		return false
	}
	er.replies = append(er.replies, earlyReply{dep: dep, c: c, rep: rep})
	return true
}

// takeEarly appends to rs, and forgets, the early replies of en that wait
// for writes up to seq, which the caller has just made durable
// (advanceDurable): a reply added after that finds its write durable.
func (en *entry) takeEarly(seq uint64, rs []earlyReply) []earlyReply {
	er := &en.early
	er.mu.Lock()
	defer er.mu.Unlock()
	n := 0
	for n < len(er.replies) && er.replies[n].dep <= seq {
		n++
	}
	if n == 0 {
		return rs
	}
	rs = append(rs, er.replies[:n]...)
	rest := copy(er.replies, er.replies[n:])
	clear(er.replies[rest:])
	er.replies = er.replies[:rest]
	if rest == 0 {
		er.replies = nil // an idle entity keeps no buffer
	}
	return rs
}

// dropEarly returns, and forgets, every early reply of en.
func (en *entry) dropEarly() []earlyReply {
	er := &en.early
	er.mu.Lock()
	defer er.mu.Unlock()
	rs := er.replies
	er.replies = nil
	return rs
}

// earlyHeld returns how many early replies en has, and the write the
// oldest waits for.
func (en *entry) earlyHeld() (int, uint64) {
	er := &en.early
	er.mu.Lock()
	defer er.mu.Unlock()
	if len(er.replies) == 0 {
		return 0, 0
	}
	return len(er.replies), er.replies[0].dep
}

// call is one admitted request; its reply is delivered exactly once.
type call struct {
	env   *ordopb.Envelope
	msg   proto.Message // the payload of a co-located message (env.Payload is then nil)
	after *writeDep     // the sender's write a co-located message depends on
	reply func(*ordopb.Reply)
	shard *shardState
	// caller is who sent the call, as admission established it.
	caller Caller
	// fence is the shard and epoch the sending entity sent the call under,
	// when its caller is an entity (believed from a trusted sender only).
	fence *ordopb.SenderFence
	// timer: the call is a timer's firing (After), not a request.
	timer bool
	// asNew: the caller's hint that the entity was never written
	// (Envelope.new_entity), for a kind that trusts it (TrustAsNew).
	asNew bool
	// remind, when not 0, makes the call a delivery of the entity's due
	// reminders (Host.remind), listed by the store's index as due then;
	// firing is set on the request one reminder's firing makes.
	remind int64
	firing *firing
	// deadline is the call's effective deadline, Unix nanoseconds: the
	// envelope's, or HostConfig.DefaultDeadline from admission, capped at
	// HostConfig.MaxDeadline. Never 0 once admitted.
	deadline int64
	counted  bool // counted in Host.inflight (guarded by Host.mu)
	done     atomic.Bool
}

// HostStats is a snapshot of a host's counters.
type HostStats struct {
	Active       int
	Activations  uint64
	Passivations uint64
	// Inflight is the number of calls admitted and not yet answered,
	// co-located messages excepted (see HostConfig.MaxInflight).
	Inflight int
	// Overloaded counts the calls refused because a mailbox was full or
	// too many calls were in flight (HostConfig.MaxMailbox, MaxInflight).
	Overloaded uint64
	// DedupEntries is the number of dedup entries (request IDs with their
	// replies) the active entities hold in memory: at most DedupWindow per
	// active entity.
	DedupEntries int64
	// Loads counts the store reads of activating entities, and
	// LoadedRecords the records they asked for: with a store that is a
	// persistence.BatchLoader, entities activating together share a read.
	Loads, LoadedRecords uint64
	// Timers is the number of timers (Context.After) pending.
	Timers int64
	Batch  BatchStats

	// RemindersFired counts the durable reminders' firings delivered to
	// entities (Context.SetReminder), and ReminderScans the reads of the
	// store's reminder index that looked for them. ReminderWaits counts
	// the passes of the reminder loop (one per HostConfig.ReminderTick)
	// that stopped for want of room: ReminderBatch deliveries outstanding,
	// or MaxActive + ReminderBatch entities active; the next pass goes on.
	RemindersFired, ReminderScans, ReminderWaits uint64
}

// NewHost validates cfg and returns a host for kinds over store. Call
// Start before use. A store for event-sourced kinds (EventSourced) must
// keep journals (persistence.Journal).
func NewHost(cfg HostConfig, deps HostDeps, kinds ...Kind) (*Host, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	store := deps.Store
	if store == nil {
		return nil, invalidConfig(errors.New("actors: HostDeps.Store is required"))
	}
	raw := store
	if cfg.Tracer != nil {
		store = tracedStore{Store: store, tracer: cfg.Tracer}
	}
	h := &Host{
		cfg:     cfg,
		deps:    deps,
		store:   store,
		raw:     raw,
		kinds:   make(map[string]Kind),
		log:     cfg.Logger,
		router:  deps.Router,
		shards:  make(map[uint32]*shardState),
		stopped: make(chan struct{}),
	}
	h.stopping = make(chan struct{})
	if h.log == nil {
		h.log = slog.Default()
	}
	h.lru.init()
	for _, k := range kinds {
		if k == nil {
			return nil, errors.New("actors: nil kind")
		}
		if _, dup := h.kinds[k.Name()]; dup {
			return nil, fmt.Errorf("actors: kind %q registered twice", k.Name())
		}
		h.kinds[k.Name()] = k
	}
	var err error
	if h.journal, err = journalFor(raw, h.kinds); err != nil {
		return nil, err
	}
	if h.router == nil {
		h.router = localRouter{h}
	}
	h.index, _ = raw.(persistence.ReminderIndex)
	return h, nil
}

// Start starts the host's actor system and write batcher. It does no I/O.
func (h *Host) Start(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	err := ErrClosed
	h.startOnce.Do(func() {
		quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
		h.system = actor.NewActorSystem(
			actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }),
			actor.WithDeadLetterRequestLogging(false),
			// Messages to stopped entities are expected (late write results);
			// keep the dead-letter throttle's timer goroutines short-lived.
			actor.WithDeadLetterThrottleInterval(10*time.Millisecond),
		)
		// A lock-free mailbox allocates no ring buffer up front: an idle
		// entity costs less memory.
		h.pool = newPool()
		h.props = actor.PropsFromProducer(func() actor.Actor { return h.spawning },
			actor.WithMailbox(actor.UnboundedLockfree()), actor.WithDispatcher(h.pool))
		h.ctx, h.cancel = context.WithCancel(context.WithoutCancel(ctx))
		h.batcher = newBatcher(h.store, h.cfg, h.deps.OnBatch)
		h.batcher.finish = h.finish
		h.loader = newLoader(h.ctx, h.store, h.raw, h.cfg.StoreTimeout)
		h.batcher.start(h.ctx)
		h.bg.Add(1)
		go h.sweepLoop()
		if h.index != nil {
			h.bg.Add(1)
			go h.reminderLoop()
		}
		h.mu.Lock()
		h.started = true
		h.mu.Unlock()
		err = nil
	})
	return err
}

// Shutdown drains every owned shard (as Release does), then stops the
// entities, the batcher and the actor system. If ctx ends first, the
// remaining shards are dropped. It is idempotent; the store is not closed.
func (h *Host) Shutdown(ctx context.Context) error { return h.stop(ctx, true) }

// Close stops the host at once: every owned shard is dropped as by Drop
// (replies not yet sent are discarded and their callers get a retryable
// error; unsent writes are withdrawn), then the entities, the batcher and
// the actor system stop. It is Shutdown without the drain, for a process
// that must stop now. Idempotent, and a no-op after Shutdown.
func (h *Host) Close() { _ = h.stop(context.Background(), false) }

// stop is Shutdown (drain: every shard released first, within ctx) and
// Close.
func (h *Host) stop(ctx context.Context, drain bool) error {
	var err error
	h.stopOnce.Do(func() {
		close(h.stopping)
		h.mu.Lock()
		started := h.started
		owned := make(map[uint32]int64, len(h.shards))
		for id, sh := range h.shards {
			owned[id] = sh.epoch
		}
		h.mu.Unlock()
		if started && drain {
			for id, epoch := range owned {
				if rerr := h.Release(ctx, id, epoch); rerr != nil && err == nil {
					err = rerr
				}
			}
		}
		h.mu.Lock()
		h.closed = true
		h.mu.Unlock()
		h.DropAll(ErrClosed)
		if started {
			h.cancel()
			h.bg.Wait()
			h.batcher.close()
			h.system.Shutdown()
			h.pool.close()
		}
		close(h.stopped)
	})
	return err
}

// Own makes the host serve shard at epoch. Owning a shard at the epoch it
// already has is a no-op; a higher epoch replaces (drops) the old
// ownership; a lower one is refused.
func (h *Host) Own(shard uint32, epoch int64) error {
	if shard >= h.cfg.Shards {
		return fmt.Errorf("actors: shard %d out of range [0, %d)", shard, h.cfg.Shards)
	}
	if err := persistence.ValidateEpoch(epoch); err != nil {
		return fmt.Errorf("actors: %w", err)
	}
	h.mu.Lock()
	if h.closed || !h.started {
		h.mu.Unlock()
		return ErrClosed
	}
	if sh, ok := h.shards[shard]; ok {
		switch {
		case sh.epoch == epoch && !sh.draining:
			h.mu.Unlock()
			return nil
		case sh.epoch > epoch:
			h.mu.Unlock()
			return fmt.Errorf("actors: shard %d already owned at epoch %d > %d", shard, sh.epoch, epoch)
		}
		h.mu.Unlock()
		h.Drop(shard, fmt.Errorf("%w: superseded by epoch %d", ErrNotHere, epoch))
		h.mu.Lock()
	}
	sh := &shardState{
		id:       shard,
		epoch:    epoch,
		calls:    make(map[*call]struct{}),
		entities: make(map[Ref]*entry),
	}
	sh.ctx, sh.cancel = context.WithCancelCause(h.ctx)
	sh.hint.Store(math.MaxInt64)
	h.shards[shard] = sh
	h.bg.Add(1)
	h.mu.Unlock()
	// Fence at once rather than at the first activation, so that from now
	// on no write under an older epoch can land, even in a shard whose
	// entities are not called for a while.
	go func() {
		defer h.bg.Done()
		if err := h.ensureFenced(sh); err != nil {
			if errors.Is(err, persistence.ErrFenced) {
				h.shardLost(sh, err)
			} else if h.ctx.Err() == nil {
				h.log.Warn("fencing shard failed; the first activation retries", "shard", shard, "epoch", epoch, "err", err)
			}
		}
	}()
	return nil
}

// Owned returns the shards the host serves (draining ones included) and
// their epochs.
func (h *Host) Owned() map[uint32]int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := make(map[uint32]int64, len(h.shards))
	for id, sh := range h.shards {
		m[id] = sh.epoch
	}
	return m
}

// Release gives shard up gracefully: new calls get ErrNotHere (retryable),
// calls already admitted finish, every entity's writes become durable, and
// the entities stop. When it returns nil the shard's state is durable and
// nothing more of it will be written, so placement may release the lock.
// If ctx ends first, the shard is dropped and ctx's error returned. A shard
// not owned at epoch is left alone (nil).
func (h *Host) Release(ctx context.Context, shard uint32, epoch int64) error {
	h.mu.Lock()
	sh, ok := h.shards[shard]
	if !ok || sh.epoch != epoch {
		h.mu.Unlock()
		return nil
	}
	if !sh.draining {
		sh.draining = true
		sh.idle = make(chan struct{})
		if len(sh.calls) == 0 {
			close(sh.idle)
		}
		// Deferred replies may wait for long (a saga): their callers retry
		// at the shard's next owner instead of holding the drain up.
		for _, en := range sh.entities {
			h.system.Root.Send(en.pid, releaseWaitersNow)
		}
	}
	idle := sh.idle
	h.mu.Unlock()

	select {
	case <-idle:
	case <-ctx.Done():
		h.dropState(sh, ctx.Err())
		return fmt.Errorf("actors: releasing shard %d: %w", shard, ctx.Err())
	}

	h.mu.Lock()
	var dones []<-chan struct{}
	for _, en := range sh.entities {
		dones = append(dones, en.stoppedLocked())
		h.system.Root.Send(en.pid, &drainReq{})
	}
	h.mu.Unlock()
	for _, d := range dones {
		select {
		case <-d:
		case <-ctx.Done():
			h.dropState(sh, ctx.Err())
			return fmt.Errorf("actors: releasing shard %d: %w", shard, ctx.Err())
		}
	}
	h.dropState(sh, ErrNotHere)
	return nil
}

// Drop gives shard up at once: its entities stop, replies not yet sent are
// discarded (their callers get a retryable error), and unsent writes are
// withdrawn. Used when the shard was fenced or the lease was lost.
func (h *Host) Drop(shard uint32, reason error) {
	h.mu.Lock()
	sh, ok := h.shards[shard]
	h.mu.Unlock()
	if ok {
		h.dropState(sh, reason)
	}
}

// DropAll drops every owned shard (the lease was lost).
func (h *Host) DropAll(reason error) {
	h.mu.Lock()
	var all []*shardState
	for _, sh := range h.shards {
		all = append(all, sh)
	}
	h.mu.Unlock()
	for _, sh := range all {
		h.dropState(sh, reason)
	}
}

// dropState ends the ownership sh. It reports whether this call ended it
// (false: it had ended already).
func (h *Host) dropState(sh *shardState, reason error) bool {
	h.mu.Lock()
	if sh.dropped {
		h.mu.Unlock()
		return false
	}
	sh.dropped = true
	sh.ended.Store(true)
	sh.cancel(reason)
	if h.shards[sh.id] == sh {
		delete(h.shards, sh.id)
	}
	calls := make([]*call, 0, len(sh.calls))
	for c := range sh.calls {
		calls = append(calls, c)
	}
	var pids []*actor.PID
	for _, en := range sh.entities {
		pids = append(pids, en.pid)
		h.removeLocked(en)
	}
	h.mu.Unlock()

	if h.batcher != nil {
		h.batcher.cancelShard(sh.id, sh.epoch)
	}
	code := ordopb.Code_CODE_NOT_HERE
	if errors.Is(reason, ErrFenced) {
		code = ordopb.Code_CODE_FENCED
	}
	for _, c := range calls {
		h.finish(c, errReply(c.env, errf(code, "shard %d given up: %v", sh.id, reason)))
	}
	for _, pid := range pids {
		h.system.Root.Stop(pid)
	}
	return true
}

// removeLocked forgets en. Host.mu is held.
func (h *Host) removeLocked(en *entry) {
	if en.gone {
		return
	}
	delete(h.parked, en) // a dropped shard answers them (dropState)
	en.gone = true
	delete(en.shard.entities, en.ref)
	h.lru.remove(en)
	h.active--
	if en.evict {
		h.evicts--
	}
}

// Submit delivers env, sent by this process (CallerProcess), to its
// entity; reply is called exactly once, from some goroutine, with the
// reply. It never blocks on the entity. It is SubmitAs with
// Caller{Class: CallerProcess}.
func (h *Host) Submit(env *ordopb.Envelope, reply func(*ordopb.Reply)) {
	h.SubmitAs(Caller{Class: CallerProcess}, env, reply)
}

// SubmitAs delivers env, sent by from, to its entity; reply is called
// exactly once, from some goroutine, with the reply. It never blocks on
// the entity. from is the sender as its transport authenticated it
// (CallerUnknown, CallerProcess, CallerNode or CallerClient); a trusted
// sender's claim that an entity sent env (env.Sender) makes the caller
// that entity, anyone else's is ignored (see Caller). The handler sees the
// result in Context.Caller.
//
// A call that cannot be handled is refused before its entity is activated
// and before any store read: a malformed or unknown target, a missing
// payload or one over HostConfig.MaxPayloadBytes (ErrTooLarge), a message
// type the kind has no handler for, an invalid request ID, metadata or
// sender, a deadline already passed, and a message type the kind declares
// internal (Internal) from a caller that is not trusted
// (ErrPermissionDenied). An overloaded host (a full mailbox, too many
// calls in flight) refuses with a retryable ErrUnavailable that carries a
// retry-after hint (see RetryAfter).
func (h *Host) SubmitAs(from Caller, env *ordopb.Envelope, reply func(*ordopb.Reply)) {
	if env.GetPayload() == nil {
		reply(errReply(env, errf(ordopb.Code_CODE_BAD_REQUEST, "missing payload")))
		return
	}
	if n := len(env.GetPayload().GetValue()); n > h.cfg.MaxPayloadBytes {
		reply(errReply(env, errf(ordopb.Code_CODE_TOO_LARGE, "payload of %d bytes exceeds MaxPayloadBytes %d", n, h.cfg.MaxPayloadBytes)))
		return
	}
	h.admit(from, &call{env: env, reply: reply})
}

// submitLocal delivers a co-located message, unencoded, that depends on
// the sender's write after (nil when it is durable).
func (h *Host) submitLocal(env *ordopb.Envelope, msg proto.Message, after *writeDep, reply func(*ordopb.Reply)) {
	h.admit(Caller{Class: CallerProcess}, &call{env: env, msg: msg, after: after, reply: reply})
}

func (h *Host) admit(from Caller, c *call) {
	env, reply := c.env, c.reply
	ref, err := RefFromProto(env.GetTarget())
	if err != nil {
		reply(errReply(env, errf(ordopb.Code_CODE_BAD_REQUEST, "%v", err)))
		return
	}
	kind, ok := h.kinds[ref.Kind]
	if !ok {
		reply(errReply(env, errf(ordopb.Code_CODE_UNKNOWN_KIND, "kind %q", ref.Kind)))
		return
	}
	if env.GetRequestId() == "" || len(env.GetRequestId()) > maxRequestIDLen {
		reply(errReply(env, errf(ordopb.Code_CODE_BAD_REQUEST, "request ID must be 1 to %d bytes", maxRequestIDLen)))
		return
	}
	if err := validateMetadata(env.GetMetadata()); err != nil {
		reply(errReply(env, errf(ordopb.Code_CODE_BAD_REQUEST, "%v", err)))
		return
	}
	var name protoreflect.FullName
	if c.msg != nil {
		name = c.msg.ProtoReflect().Descriptor().FullName()
	} else {
		name = env.GetPayload().MessageName()
	}
	if !kind.handles(name) {
		reply(errReply(env, errf(ordopb.Code_CODE_BAD_REQUEST, "kind %q has no handler for %q", ref.Kind, name)))
		return
	}
	caller, trusted, err := h.resolveCaller(from, env)
	if err != nil {
		reply(errReply(env, errf(ordopb.Code_CODE_BAD_REQUEST, "%v", err)))
		return
	}
	if !trusted && kind.internal(name) {
		reply(errReply(env, errf(ordopb.Code_CODE_PERMISSION_DENIED,
			"%s is internal to kind %q: %s may not send it", name, ref.Kind, caller)))
		return
	}
	c.caller = caller
	c.asNew = env.GetNewEntity() && kind.trustsAsNew()
	if caller.Class == CallerEntity {
		c.fence = env.GetSenderFence()
	}
	now := timeNow().UnixNano()
	c.deadline = h.deadlineOf(env.GetDeadlineUnixNano(), now)
	if c.deadline <= now {
		reply(errReply(env, errf(ordopb.Code_CODE_DEADLINE, "deadline passed before %s was admitted", ref)))
		return
	}
	h.enqueue(c, ref, kind, now)
}

// enqueue hands an admitted call to its entity, activating it if needed,
// or refuses it (host closed, shard not owned, overload).
func (h *Host) enqueue(c *call, ref Ref, kind Kind, now int64) {
	env, reply := c.env, c.reply
	shard := ShardOf(ref, h.cfg.Shards)
	h.mu.Lock()
	if h.closed || !h.started {
		h.mu.Unlock()
		reply(errReply(env, errf(ordopb.Code_CODE_UNAVAILABLE, "host closed")))
		return
	}
	sh, ok := h.shards[shard]
	if !ok || sh.draining {
		h.mu.Unlock()
		reply(errReply(env, errf(ordopb.Code_CODE_NOT_HERE, "shard %d of %s", shard, ref)))
		return
	}
	if c.after != nil && c.after.en.shard != sh {
		// A co-located message whose sender's write is not yet durable
		// goes only to the ownership that write belongs to: the sender's
		// ownership has ended, its write will never be durable under this
		// one, and a receiver here would wait for it forever.
		h.mu.Unlock()
		reply(errReply(env, errf(ordopb.Code_CODE_NOT_HERE, "shard %d: the sender's ownership (epoch %d) has ended", shard, c.after.en.shard.epoch)))
		return
	}
	en := sh.entities[ref]
	if c.msg == nil {
		// Co-located messages are never refused: they carry on work their
		// sender already admitted, and their number is bounded by it.
		if err := h.overloadLocked(en); err != nil {
			h.mu.Unlock()
			h.overloaded.Add(1)
			reply(errReply(env, err))
			return
		}
		h.inflight++
		c.counted = true
	}
	c.shard = sh
	sh.calls[c] = struct{}{}
	if en != nil && en.closing {
		if h.parked == nil {
			h.parked = make(map[*entry][]*call)
		}
		h.parked[en] = append(h.parked[en], c) // for its next activation
		h.mu.Unlock()
		return
	}
	if en == nil {
		en = h.spawnLocked(ref, kind, sh)
	} else {
		h.lru.moveToFront(en)
	}
	en.used = now
	en.queued.Add(1)
	h.system.Root.Send(en.pid, c)
	if h.active-h.evicts > h.cfg.MaxActive {
		h.evictLocked()
	}
	h.mu.Unlock()
}

const maxRequestIDLen = 256

// deadlineOf returns the effective deadline of a call admitted at now
// whose envelope says d (see call.deadline).
func (h *Host) deadlineOf(d, now int64) int64 {
	if d == 0 {
		return now + int64(h.cfg.DefaultDeadline)
	}
	return min(d, now+int64(h.cfg.MaxDeadline))
}

// overloadLocked returns the refusal of a call for en (nil: not active)
// when the host or the entity's mailbox is full, or nil. Host.mu is held.
func (h *Host) overloadLocked(en *entry) *Error {
	var why string
	switch {
	case h.inflight >= h.cfg.MaxInflight:
		why = fmt.Sprintf("%d calls in flight (MaxInflight)", h.inflight)
	case en == nil:
		return nil
	case en.closing && len(h.parked[en]) >= h.cfg.MaxMailbox:
		why = fmt.Sprintf("%d calls wait for %s to passivate (MaxMailbox)", len(h.parked[en]), en.ref)
	case !en.closing && en.queued.Load() >= int64(h.cfg.MaxMailbox):
		why = fmt.Sprintf("%d calls queued for %s (MaxMailbox)", en.queued.Load(), en.ref)
	default:
		return nil
	}
	after := h.cfg.RetryAfter
	if j := after / 2; j > 0 {
		after += rand.N(j)
	}
	return &Error{Code: ordopb.Code_CODE_UNAVAILABLE, Message: "overloaded: " + why, RetryAfter: after}
}

func (h *Host) spawnLocked(ref Ref, kind Kind, sh *shardState) *entry {
	en := &entry{ref: ref, shard: sh, used: timeNow().UnixNano()}
	e := &entity{h: h, en: en, epoch: sh.epoch, beh: kind.newBehavior()}
	e.beh.bind(e)
	h.spawning = e
	en.pid = h.system.Root.Spawn(h.props)
	h.spawning = nil
	h.lru.pushFront(en)
	sh.entities[ref] = en
	h.active++
	h.activations.Add(1)
	return en
}

// evictLocked asks the least recently used entities to passivate until the
// cap would hold. Host.mu is held.
func (h *Host) evictLocked() {
	for en := h.lru.back(); en != nil && h.active-h.evicts > h.cfg.MaxActive; en = h.lru.prev(en) {
		if en.evict {
			continue
		}
		en.evict = true
		h.evicts++
		h.system.Root.Send(en.pid, passivateNow)
	}
}

// keep withdraws a passivation request an entity cannot honour yet (it has
// writes or replies in flight, or runs); a later sweep asks again (sweep).
func (h *Host) keep(en *entry) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if en.evict && !en.gone {
		en.evict = false
		h.evicts--
	}
}

// sweep asks entities idle for IdleTimeout to passivate, and enough of
// the least recently used others to bring the host within MaxActive. The
// LRU list is ordered by last use, so the idle walk stops at the first
// recent entry.
func (h *Host) sweep() {
	h.mu.Lock()
	defer h.mu.Unlock()
	cutoff := timeNow().Add(-h.cfg.IdleTimeout).UnixNano()
	for en := h.lru.back(); en != nil && en.used <= cutoff; en = h.lru.prev(en) {
		if !en.evict {
			en.evict = true
			h.evicts++
			h.system.Root.Send(en.pid, passivateNow)
		}
	}
	// The cap is asked for again: the entities asked to passivate for it
	// when others activated may not have been able to (keep), and the
	// host would otherwise stay above MaxActive until the next activation,
	// which a reminder delivery does not make while the host is full
	// (remind).
	if h.active-h.evicts > h.cfg.MaxActive {
		h.evictLocked()
	}
}

func (h *Host) sweepLoop() {
	defer h.bg.Done()
	every := h.cfg.IdleTimeout / 4
	if every > time.Second {
		every = time.Second
	}
	if every < time.Millisecond {
		every = time.Millisecond
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-h.ctx.Done():
			return
		case <-t.C:
			h.sweep()
		}
	}
}

// beginPassivate is called by a quiescent entity asked to passivate. It
// succeeds only if no invocation is on its way to the entity; from then
// on, calls for it are parked until it stopped (retire).
func (h *Host) beginPassivate(en *entry) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if en.gone {
		return false
	}
	if en.queued.Load() != 0 {
		if en.evict {
			en.evict = false
			h.evicts--
		}
		return false
	}
	en.closing = true
	return true
}

// retire forgets an entity that is stopping (passivated: its writes are
// durable; or crashed) and hands the calls parked meanwhile to a new
// activation. An entity already removed (its shard was dropped) is left
// alone: dropState answered its parked calls.
func (h *Host) retire(en *entry, passivated bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if en.gone {
		return
	}
	parked := h.parked[en]
	h.removeLocked(en)
	if passivated {
		h.passivations.Add(1)
	}
	if len(parked) == 0 {
		return
	}
	next := h.spawnLocked(en.ref, h.kinds[en.ref.Kind], en.shard)
	for _, c := range parked {
		next.queued.Add(1)
		h.system.Root.Send(next.pid, c)
	}
	if h.active-h.evicts > h.cfg.MaxActive {
		h.evictLocked()
	}
}

// finish delivers c's reply once. A reply that may reveal state (success or
// handler error) is withheld while the lease is not valid.
func (h *Host) finish(c *call, rep *ordopb.Reply) {
	if !c.done.CompareAndSwap(false, true) {
		return
	}
	h.mu.Lock()
	if c.counted {
		h.inflight--
	}
	delete(c.shard.calls, c)
	if c.shard.draining && len(c.shard.calls) == 0 {
		select {
		case <-c.shard.idle:
		default:
			close(c.shard.idle)
		}
	}
	h.mu.Unlock()
	if code := rep.GetError().GetCode(); (code == ordopb.Code_CODE_OK || code == ordopb.Code_CODE_HANDLER) &&
		h.deps.Lease != nil && !h.deps.Lease.Valid() {
		rep = errReply(c.env, errf(ordopb.Code_CODE_UNAVAILABLE, "lease not valid: reply withheld"))
	}
	c.reply(rep)
}

// ensureFenced fences the shard in the store once per ownership.
func (h *Host) ensureFenced(sh *shardState) error {
	sh.fenceMu.Lock()
	defer sh.fenceMu.Unlock()
	if sh.fenced {
		return nil
	}
	ctx, cancel := context.WithTimeout(h.ctx, h.cfg.StoreTimeout)
	defer cancel()
	if err := h.store.Fence(ctx, sh.id, sh.epoch); err != nil {
		return err
	}
	sh.fenced = true
	return nil
}

// shardLost drops a shard whose fence moved past its epoch, or one of
// whose writes failed with an outcome the store could not report, and tells
// placement (OnShardLost) so that the shard is served again under a new
// epoch.
func (h *Host) shardLost(sh *shardState, err error) {
	fenced := errors.Is(err, persistence.ErrFenced)
	if !fenced {
		err = fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if !h.dropState(sh, err) {
		return // dropped already, and told so once
	}
	if fenced {
		h.log.Warn("shard fenced by a newer owner; dropped it", "shard", sh.id, "epoch", sh.epoch, "err", err)
	} else {
		h.log.Warn("a write of the shard failed; dropped the shard until it is owned under a new epoch",
			"shard", sh.id, "epoch", sh.epoch, "err", err)
	}
	if h.deps.ShardLost != nil {
		h.deps.ShardLost(sh.id, sh.epoch, err)
	}
}

// Invoke submits env and waits for its reply or the end of ctx. ctx's
// deadline becomes the envelope's deadline when it has none, and ctx's
// metadata (WithMetadata) its metadata when it has none. With tracing on
// (HostConfig.Tracer), ctx's span becomes the parent of the call's span
// when the envelope carries no trace context.
func (h *Host) Invoke(ctx context.Context, env *ordopb.Envelope) (*ordopb.Reply, error) {
	if d, ok := ctx.Deadline(); ok && env.GetDeadlineUnixNano() == 0 {
		env.DeadlineUnixNano = d.UnixNano()
	}
	if md := metadataOf(ctx); len(md) > 0 && len(env.GetMetadata()) == 0 {
		env.Metadata = md
	}
	if h.cfg.Tracer != nil {
		traceEnvelope(ctx, env)
	}
	w := invokeWaiters.Get().(*invokeWaiter)
	h.Submit(env, w.done)
	select {
	case r := <-w.ch:
		// Submit has called w.done, its only call: w serves another call.
		invokeWaiters.Put(w)
		return r, nil
	case <-ctx.Done():
		return nil, ctx.Err() // the reply may still come: w is not reused
	}
}

// invokeWaiter is Invoke's channel for one reply, with the function that sends
// to it. Submit calls the function exactly once, so a waiter whose reply
// has been received is free; one given up on (the caller's context ended)
// is left to the collector.
type invokeWaiter struct {
	ch   chan *ordopb.Reply
	done func(*ordopb.Reply)
}

var invokeWaiters = sync.Pool{New: func() any {
	w := &invokeWaiter{ch: make(chan *ordopb.Reply, 1)}
	w.done = func(r *ordopb.Reply) { w.ch <- r }
	return w
}}

// Stats returns the host's counters.
func (h *Host) Stats() HostStats {
	h.mu.Lock()
	active, inflight := h.active, h.inflight
	h.mu.Unlock()
	s := HostStats{Active: active, Activations: h.activations.Load(), Passivations: h.passivations.Load(),
		Inflight: inflight, Overloaded: h.overloaded.Load(), Timers: h.timers.Load(), DedupEntries: h.dedupEntries.Load(),
		RemindersFired: h.remindersFired.Load(), ReminderScans: h.reminderScans.Load(),
		ReminderWaits: h.reminderWaits.Load()}
	if h.loader != nil {
		s.Loads, s.LoadedRecords = h.loader.stats()
	}
	if h.batcher != nil {
		s.Batch = h.batcher.Stats()
	}
	return s
}

// waitFaults waits while HostDeps.Faults (not nil) holds the entities
// paused, or until the host stops.
func (h *Host) waitFaults() {
	if ch := h.deps.Faults.Paused(); ch != nil {
		select {
		case <-ch:
		case <-h.stopping:
		}
	}
}

// localRouter routes entity-to-entity messages within one host.
type localRouter struct{ h *Host }

// Route submits env once its sender may send (Sender.Current): a message
// sent while the lease is not valid waits for it, one whose sender's
// ownership ends first is given up.
func (r localRouter) Route(ctx context.Context, env *ordopb.Envelope, from Sender, done func(*ordopb.Reply)) {
	if from == nil || from.Current() {
		r.h.Submit(env, done)
		return
	}
	go func() {
		for {
			changed := from.Changed()
			if from.Current() {
				r.h.Submit(env, done)
				return
			}
			select {
			case <-ctx.Done():
				done(errReply(env, errf(ordopb.Code_CODE_UNAVAILABLE, "%v: %v", ErrSenderGone, ctx.Err())))
				return
			case <-changed:
			}
		}
	}()
}

func errReply(env *ordopb.Envelope, err error) *ordopb.Reply {
	return &ordopb.Reply{RequestId: env.GetRequestId(), Error: ErrorToProto(err)}
}

var _ Invoker = (*Host)(nil)

// timeNow is replaced by tests that need a fixed clock.
var timeNow = time.Now
