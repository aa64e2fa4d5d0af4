// Package actors is ordo's entity runtime.
//
// An entity is identified by a Ref (a kind name and an ID) and lives as one
// protoactor actor on the node that owns its shard. It processes one
// message at a time, in mailbox order, so its handlers never need locks.
//
// A Kind declares an entity type: its protobuf state and its handlers, one
// per request message type (On for handlers that may change state, OnRead
// for handlers that only read it), and optional hooks (OnActivate,
// OnPassivate). A handler returns a reply or an error; a nil reply with a
// nil error is a programming error, answered with ErrInternal and rolled
// back like a panic. A Host runs the entities of the shards it is told it
// owns, each at a fencing epoch:
//
//   - Activation. The first message to an entity activates it: the host
//     fences the shard in the store (once per shard and epoch), loads the
//     entity's record, and then processes messages.
//
//   - Output gate and group commit. When a write handler returns, the new
//     state, its sequence number and the entity's recent replies go to the
//     host's write batcher, which coalesces many entities' writes into one
//     Store.Save. The reply, and every message the handler sent, are held
//     until that write is durable; the entity meanwhile goes on with its
//     next message. The batcher's saver that made the write durable
//     releases the reply itself, so that it waits for no turn of a busy
//     entity, and tells the entity only of the writes it waits for (a held
//     message, or its last write when it stops). Every reply, reads included, leaves only when every
//     write it may have observed is durable and while the host's lease is
//     valid. The exceptions are a handler's own choice: a run that calls
//     Context.WriteBehind makes no write, answers once the entity's earlier
//     writes are durable, and leaves its changes to the entity's next
//     write (a crash loses them); one that calls
//     Context.ReplyBeforeDurable answers at once; a message sent with
//     BeforeDurable leaves at once. Each is for a protocol that tells
//     afterwards whether what it showed early stands (the bank's held
//     credits).
//
//   - Dedup. Every call carries a request ID. The entity stores the IDs and
//     replies of its most recent requests (HostConfig.DedupWindow) written
//     atomically with its state: the newest in its record, the older ones in
//     a dedup record of its own (kind "<kind>/dedup", same shard, same
//     Save), which a write rewrites only every 16 replies, so that a write
//     costs a few replies' bytes, not the whole window's. A repeated ID gets
//     the stored reply and runs nothing.
//
//   - Failures. A write rejected by fencing, or one whose outcome the store
//     could not report, drops the whole shard: its entities stop, their
//     waiting callers get a retryable error, and HostDeps.ShardLost tells
//     placement to let the shard go, so that it is served again only under
//     a new epoch (whose fence rejects a write still on its way; restarting
//     under the same epoch could let such a late write overwrite newer
//     state). Callers retry with the same request ID. An entity whose own
//     state cannot be encoded, or whose handler panics, restarts from
//     storage.
//
//   - Fenced messages. A message an entity sends to an entity of another
//     shard carries the sender's shard and epoch. The receiver keeps, in
//     its record, the highest epoch it has accepted from each sender shard
//     (one entry per shard at most) and refuses with ErrFenced, running
//     nothing, a message from a lower epoch: one its sender's former owner
//     sent before the shard moved, delivered only after the new owner
//     carried the work on, when the receiver's dedup window may no longer
//     remember it. Work that must survive an owner change is re-driven from
//     durable state on activation (OnActivate), as a saga does.
//
//   - Timers and reminders. A timer (After) is in memory: it dies with
//     the activation and does not keep the entity active. A durable
//     reminder (SetReminder: a name, a due time, an optional period and a
//     message) is part of the entity's record, written, fenced and rolled
//     back with the run that set it, and survives passivation, crashes and
//     hand-offs; see Reminders below.
//
//   - Passivation. An entity idle for HostConfig.IdleTimeout stops, after
//     its writes are durable; above HostConfig.MaxActive active entities
//     the least recently used are passivated first; an entity that is
//     done for now (a settled saga) may ask to go as soon as it is quiet
//     (Context.Passivate). An OnPassivate hook runs first, on passivation
//     and on a graceful release of the shard, and its writes are durable
//     before the entity stops; it does not run when the shard is dropped
//     or lost (the entity may no longer write).
//
//   - Deferred replies. A write handler may Defer its reply under a key; a
//     later handler, hook or continuation Resolves the key. The answer is
//     recorded for deduplication and gated like any reply; a retry of a
//     pending request waits for the same answer; stopping fails it
//     retryably.
//
//   - Limits. Nothing a host holds grows without a bound, and no single
//     request can cost a shard its epoch. A payload over
//     HostConfig.MaxPayloadBytes, a message type the kind has no handler
//     for, a malformed target, request ID or metadata are refused before
//     any activation or store read (an undecodable payload before the
//     store read). A write that would leave a record over
//     HostConfig.MaxStateBytes fails its request with ErrTooLarge and is
//     rolled back; a record the store still refuses as too large
//     (persistence.ErrTooLarge: nothing was written) fails the requests
//     that waited for it with ErrTooLarge and restarts the entity from
//     storage, and a shard's group of records the store refuses only as
//     a whole is written in smaller groups. Beyond HostConfig.MaxMailbox
//     calls queued for one entity, or HostConfig.MaxInflight calls
//     admitted and unanswered by the host, calls are refused with a
//     retryable ErrUnavailable carrying a retry-after hint (RetryAfter),
//     which retries honour. Every call has a deadline
//     (HostConfig.DefaultDeadline when its envelope has none, capped at
//     HostConfig.MaxDeadline), so calls waiting in a mailbox and deferred
//     replies always end.
//
//     Overload refusals cannot deadlock a saga. An entity never waits for
//     another; everything it needs to finish work it already admitted
//     reaches it outside both bounds: its write results, the replies to
//     its own Requests (continuations), its retry and deadline timers.
//     Messages between co-located entities are never refused (they carry
//     on work their sender admitted, and count in no in-flight bound); a
//     message to another shard that is refused is retried by its
//     sender's RetryPolicy, no sooner than the hint; and every in-flight
//     call, a deferred one included, ends by its deadline at the latest,
//     which frees its slot.
//
//   - Event-sourced kinds. A kind declared EventSourced keeps its state as
//     a history: its write handlers emit events (Context.Emit), which the
//     kind's Apply folds into the state at once, and which are appended to
//     the entity's journal (persistence.Journal) in the same fenced,
//     atomic Save as its record and the request's dedup entry; the output
//     gate, dedup and group commit are those of any kind. The state itself
//     is written only as a snapshot, every EventSourcing.SnapshotEvery
//     events and on passivation, in a record of its own; activation loads
//     the latest snapshot and replays the events after it. The batcher
//     coalesces an entity's queued writes keeping every event, up to
//     HostConfig.BatchMaxEvents per shard's group. A stored event of a
//     type the kind no longer declares, or a snapshot that cannot be
//     rebuilt, fails the activation with ErrInternal. See eventsourced.go
//     for the record layout and schema evolution.
//
//   - Projections. Follow reads the journal of an event-sourced kind, or of
//     one entity, in commit order from a stored offset (OffsetStore), and
//     hands each page of decoded events to a handler that builds a read
//     model: at least once, resumable from any process.
//
// Entity-to-entity calls (Request, Send) never block the caller's mailbox:
// the reply comes back later as a continuation run on the caller's own
// goroutine. Outgoing calls pass the same output gate as replies, except
// those to an entity of the sender's own shard (co-located, see
// Colocated): they are handed over in memory at once, and the receiver's
// write is never durable before the sender's (the batcher puts both in
// one Save, or the receiver's in a later one). An attempt that fails with
// a retryable error is retried with the same request ID, with exponential
// backoff and jitter, as a RetryPolicy allows (HostConfig.Retry, or
// WithRetry per call); a continuation sees only the final outcome. The
// backoff is kept per target and request ID, so a continuation that
// resends a failed request waits for it too: no resend loop is a busy
// loop. A Send with AtMostOnce is one-way instead: sent once, never
// retried and never answered, for messages whose loss something else
// repairs.
//
// New entities. A call made with AsNew says its entity has never been
// written (its ID was just minted); a kind declared with TrustAsNew then
// activates the entity without reading the store, and writes its first
// record as a creation (persistence.Record.Create), which the store
// refuses if the entity exists. Nothing the entity says or sends leaves
// before that creation is durable, so a wrong hint loses nothing; it
// restarts the entity's shard. Invokers that retry drop the hint after the
// first attempt (ForRetry).
//
// Contexts and metadata. A handler's Context is a context.Context: its
// deadline is the caller's (the envelope's), it ends when the entity stops
// or the handler returns, and it carries the caller's metadata
// (WithMetadata, MetadataFrom), key/value pairs such as a W3C traceparent
// that Call puts in the envelope and the handler's own Send and Request
// carry on. Hooks have neither deadline nor metadata; a continuation has
// the metadata of the run that made its Request. A handler may block on
// I/O bounded by its context, but never waits for another entity (its
// entity handles nothing else meanwhile); a handler that returns its
// context's error gives no answer, and is rolled back.
//
// Tracing. With HostConfig.Tracer, a host makes OpenTelemetry spans of
// the calls its entities handle ("ordo.handle", from activation to
// commit), of continuations ("ordo.continue"), of the batcher's Saves
// ("ordo.save": a Save is traced when any write it carries is, as a child
// of the first sampled run among them, linked to the others) and of
// every store call ("ordo.store.load", ".save", ".fence"). A handling
// span's parent is the span whose context the envelope's metadata
// carries (traceparent); the handler's Context carries the span
// (trace.SpanFromContext), and its metadata the span's context, which the
// messages it sends carry on: one trace follows a call through every
// entity it reaches. Without a Tracer, each hook costs a nil check.
//
// Callers and authorization. A handler knows who sent its request
// (Context.Caller, CallerFrom): an entity, a node of the cluster, this
// process, an external client, or an unknown sender (plaintext). The host
// decides it at admission from the identity the transport verified
// (SubmitAs; Submit and Invoke are this process): only this process or a
// node may say that an entity sent a message, so a client cannot pose as
// one. A kind declares the message types only the cluster may send
// (Internal); an external client's request of such a type is refused with
// ErrPermissionDenied before the entity is activated. Unknown senders are
// external unless HostConfig.TrustUnauthenticated (plaintext clusters).
//
// Errors cross the wire as codes (see Error) and keep their identity:
// errors.Is(err, ErrNotHere) holds on the far side of a network.
//
// # Reminders
//
// A record's earliest reminder due time goes to the store with the record
// (persistence.Record.Due), and a store that is a persistence.ReminderIndex
// indexes it per shard, in the same atomic, fenced step. Nothing waits in
// memory: every HostConfig.ReminderTick the host reads, for each shard it
// owns that may have a reminder due, the shard's earliest index entries,
// and sends each entity listed as due a delivery through its mailbox,
// which activates it if it was not active. So an entity is activated for
// its reminder only once it is due, never before; a shard in which nothing
// is due costs no read per tick (the host knows each shard's next due time
// from its last read and from the due times its entities' writes carry);
// and at most HostConfig.ReminderBatch deliveries are outstanding at once
// across the host's shards, each until its entity's firings are durable,
// so a million reminders due at once never mean a million active entities:
// a delivery activates an entity only while the host has fewer than
// MaxActive + ReminderBatch active, and passivation brings them back
// within MaxActive as usual (an entity that cannot passivate when asked,
// its run or its writes still going, is asked again at the host's next
// sweep, at most a second later). After a crash or a
// hand-off, the shard's new owner reads the index when it takes the shard
// and fires whatever is due.
//
// A delivered entity fires its due reminders, earliest first, each as a
// request to its own handler of the reminder's message type (Caller: the
// entity itself), with the request ID "ordo.reminder/<name>/<due, Unix
// nanoseconds>". The write that applies the firing also advances the
// reminder (a periodic one to the first due + k·period later than now:
// missed periods are skipped, not caught up) or removes it (a one-shot
// one), unless the run set or cancelled that reminder itself. Hence:
//
//   - At least once, after the due time: nothing advances or removes a
//     due reminder but the write that applies its firing, a later write,
//     or CancelReminder. A firing whose run
//     ends with its context (ErrDeadline, ErrUnavailable) is delivered
//     again at a later tick; one answered by a read handler, answered from
//     the dedup window, or failed for good (no handler, a panic, a record
//     over MaxStateBytes: logged) is consumed by a write of its own.
//   - At most once per due time: the request ID is the reminder's name
//     and due time, so a firing delivered again (a reminder set again at
//     the same due time, or by a new owner after a failover) is answered
//     from the dedup window while it remembers it; and an owner whose
//     epoch has passed cannot write the firing, nor the advance.
//   - Tolerance: a reminder fires within about ReminderTick after its due
//     time, plus the store read, the entity's activation and its run, on
//     a host that keeps up; with more than ReminderBatch entities due at
//     once, the later ones wait for later ticks. Due times are wall-clock
//     times, read on the node that owns the entity when it fires: clock
//     differences between nodes add to the tolerance.
//
// What it costs: the reminders are written whole with every write of
// their entity (at most MaxReminders of them, within MaxStateBytes); a
// write that changes the earliest due time also moves one index entry; a
// shard costs one index read at a tick when one of its entries is due or
// one of its deliveries ended since the last, and none otherwise.
//
// # Faults
//
// HostDeps.Faults (nil in production, one nil check per message) is the
// seam through which a test harness holds the entities as a paused
// process would (Faults.Paused); Shutdown and Close end the wait.
package actors
