package main

// The guard mutations. Each one names a file, an exact snippet of it (which
// must occur exactly once) and its replacement, and the packages whose
// tests must fail once it is applied. A snippet no longer found is an
// ERROR: update it when the guarded code changes, keeping the mutation's
// meaning. Add a mutation for every new guard.

var mutants = []Mutant{
	// ---- actors: the entity runtime ----
	{
		Name:  "actors/output-gate",
		Guard: "S2: a reply leaves only once the writes it depends on are durable",
		File:  "actors/entity.go",
		Orig:  `for n < len(e.held) && e.held[n].dep <= e.durable {`,
		Repl:  `for n < len(e.held) {`,
		Pkgs:  []string{"./actors"},
	},
	{
		Name:  "actors/read-gate",
		Guard: "S2: every reply is gated, reads included (a read after a hook's or continuation's write)",
		File:  "actors/entity.go",
		Orig: `			e.h.finish(c, errReply(env, err))
			return
		}
		e.hold(e.seq, c, rep, nil)`,
		Repl: `			e.h.finish(c, errReply(env, err))
			return
		}
		e.hold(0, c, rep, nil)`,
		Pkgs: []string{"./actors"},
	},
	{
		Name:  "actors/early-reply-gate",
		Guard: "S2: a reply the saver releases waits for its own write to be durable, not the one before",
		File:  "actors/host.go",
		Orig:  `	if en.durable.Load() >= dep { // read under mu: see takeEarly`,
		Repl:  `	if en.durable.Load()+1 >= dep { // read under mu: see takeEarly`,
		Pkgs:  []string{"./actors"},
	},
	{
		Name:  "actors/early-take-only-durable",
		Guard: "S2: a Save releases the replies of the writes it made durable, not those of the entity's later writes",
		File:  "actors/host.go",
		Orig:  `	for n < len(er.replies) && er.replies[n].dep <= seq {`,
		Repl:  `	for n < len(er.replies) {`,
		Pkgs:  []string{"./actors"},
	},
	{
		Name:  "actors/listen-held-messages",
		Guard: "a message held for a write leaves once the write is durable, with no later message to the entity",
		File:  "actors/entity.go",
		Orig:  `			want = e.held[0].dep`,
		Repl:  `			want = 0`,
		Pkgs:  []string{"./actors"},
	},
	{
		Name:  "actors/listen-draining",
		Guard: "a draining or passivating entity hears of its last write, and stops, with no later message",
		File:  "actors/entity.go",
		Orig:  `		case e.seq != e.durable && (e.passivating || e.drain != nil || e.passivateAsked):`,
		Repl:  `		case e.seq != e.durable && (e.passivating || e.passivateAsked):`,
		Pkgs:  []string{"./actors"},
	},
	{
		Name:  "actors/told-only-when-listened",
		Guard: "the batcher tells an entity only of the writes it waits for (a message per write costs a turn of the entity)",
		File:  "actors/entity.go",
		Orig:  `				if w := en.listen.Load(); w == 0 || w > seq {`,
		Repl:  `				if w := en.listen.Load(); false && (w == 0 || w > seq) {`,
		Pkgs:  []string{"./actors"},
	},
	{
		Name:  "actors/learn-durable-at-receive",
		Guard: "an entity takes in the writes made durable unheard of before it handles its next message",
		File:  "actors/entity.go",
		Orig: `	}
	e.learnDurable()
	switch m := ctx.Message().(type) {`,
		Repl: `	}
	switch m := ctx.Message().(type) {`,
		Pkgs: []string{"./actors"},
	},
	{
		Name:  "actors/flush-second-look",
		Guard: "a write whose co-located dependency was queued after it goes in that dependency's Save, not the next",
		File:  "actors/batcher.go",
		Orig:  `	for progress := len(later) > 0 && len(f.batch) > 0; progress && len(f.batch) < n; {`,
		Repl:  `	for progress := false; progress && len(f.batch) < n; {`,
		Pkgs:  []string{"./actors"},
	},
	{
		Name:  "actors/save-span-sampled-parent",
		Guard: "a Save is traced when any write it carries comes from a sampled run",
		File:  "actors/trace.go",
		Orig:  `		if first < 0 && sc.IsSampled() {`,
		Repl:  `		if first < 0 {`,
		Pkgs:  []string{"./actors"},
	},
	{
		Name:  "actors/dedup-lookup",
		Guard: "S3: a repeated request ID gets the stored reply without running the handler",
		File:  "actors/entity.go",
		Orig:  `if d := e.lookupRecent(id); d != nil {`,
		Repl:  `if d := e.lookupRecent(id); d != nil && false {`,
		Pkgs:  []string{"./actors"},
	},
	{
		Name:  "actors/dedup-in-record",
		Guard: "S3: the dedup entries are written with the state, in the same record",
		File:  "actors/batcher.go",
		Orig: `	for _, b := range w.recent {
		arena = append(arena, b...)
	}`,
		Repl: ``,
		Pkgs: []string{"./actors"},
	},
	{
		Name:  "actors/deferred-reply-gate",
		Guard: "S2: a deferred reply leaves only once the write that resolved it (and recorded it) is durable",
		File:  "actors/entity.go",
		Orig:  "	e.holdResolved(resolved, false, e.seq)",
		Repl:  "	e.holdResolved(resolved, false, before)",
		Pkgs:  []string{"./actors"},
	},
	{
		Name:  "actors/colocated-dependency",
		Guard: "S1/S5: a co-located receiver's write never becomes durable before the sender's write it depends on",
		File:  "actors/batcher.go",
		Orig:  `if len(p.after) > 0 && !p.ready(f.inBatch) {`,
		Repl:  `if false {`,
		Pkgs:  []string{"./actors"},
	},
	{
		Name:  "actors/colocated-waits-acyclic",
		Guard: "liveness: co-located writes never wait for each other in a cycle (entities whose writes never go stop answering)",
		File:  "actors/batcher.go",
		Orig:  `p.add(w, b.maxEvents, len(w.after) > 0 && q.waitsFor(w.after, p.last()), &q.pool)`,
		Repl:  `p.add(w, b.maxEvents, false, &q.pool)`,
		Pkgs:  []string{"./actors"},
	},
	{
		Name:  "actors/requeue-keeps-waits-acyclic",
		Guard: "liveness: a write refused as too large is not merged into a newer one that waits for a co-located write",
		File:  "actors/batcher.go",
		Orig:  `			len(p.after) == 0 && len(o.after) == 0 {`,
		Repl:  `			true {`,
		Pkgs:  []string{"./actors"},
	},
	{
		Name:  "actors/close-waits-for-saves",
		Guard: "a host's batcher closes only once the Saves in flight have ended and their writes learned their outcome",
		File:  "actors/batcher.go",
		Orig:  `	q.stopSavers() // they run the Saves sent to them first`,
		Repl:  `	go q.stopSavers()`,
		Pkgs:  []string{"./actors"},
	},
	{
		Name:  "actors/cancel-waits-through-close",
		Guard: "a cancel returns only once no write it withdraws is in flight, even when the batcher closes meanwhile",
		File:  "actors/batcher.go",
		Orig: `func (q *queue) shutdown() {
	q.stopTimers()`,
		Repl: `func (q *queue) shutdown() {
	for _, r := range q.waiting {
		close(r.ack)
	}
	q.waiting = nil
	q.stopTimers()`,
		Pkgs: []string{"./actors"},
	},
	{
		Name:  "actors/pool-most-recently-idle",
		Guard: "resources: mailbox runs go to the most recently idle worker, so spare workers exit under a steady load",
		File:  "actors/dispatch.go",
		Orig: `		w := p.free[n-1]
		p.free[n-1] = nil
		p.free = p.free[:n-1]`,
		Repl: `		w := p.free[0]
		p.free = p.free[1:]`,
		Pkgs: []string{"./actors"},
	},
	{
		Name:  "actors/pool-max-idle",
		Guard: "resources: workers a burst started beyond the pool's maxIdle exit when their run ends",
		File:  "actors/dispatch.go",
		Orig:  `		if p.closed || p.idle <= 0 || (p.maxIdle > 0 && len(p.free) >= p.maxIdle) {`,
		Repl:  `		if p.closed || p.idle <= 0 {`,
		Pkgs:  []string{"./actors"},
	},
	{
		Name:  "actors/pool-reaper",
		Guard: "resources: workers left idle for the pool's idle time exit",
		File:  "actors/dispatch.go",
		Orig:  `		for n < len(p.free) && p.free[n].idleAt+1 < p.tick {`,
		Repl:  `		for n < len(p.free) && p.free[n].idleAt+1 < 0 {`,
		Pkgs:  []string{"./actors"},
	},
	{
		Name:  "stack/grow-frame",
		Guard: "speed: Grow leaves a 32-KiB stack",
		File:  "internal/stack/stack.s",
		Orig:  `TEXT ·Grow(SB), 0, $16384-0`,
		Repl:  `TEXT ·Grow(SB), 0, $0-0`,
		Pkgs:  []string{"./internal/stack"},
	},
	{
		Name:  "actors/asnew-create",
		Guard: "S3: the first write of an entity activated as new (AsNew) is a creation, refused if the entity is stored",
		File:  "actors/entity.go",
		Orig:  `		create:  create,`,
		Repl:  `		create:  create && false,`,
		Pkgs:  []string{"./actors"},
	},
	{
		Name:  "actors/asnew-read-loads",
		Guard: "S3: an entity activated as new that wrote nothing reads the store before answering a read",
		File:  "actors/entity.go",
		Orig:  `	} else if e.presumed && !write && e.seq == 0 {`,
		Repl:  `	} else if false {`,
		Pkgs:  []string{"./actors"},
	},
	{
		Name:  "actors/asnew-output-gated",
		Guard: "S3: an entity activated as new writes its creation before its first message or answer",
		File:  "actors/entity.go",
		Orig:  `		e.presumed && e.seq == 0 && (len(e.outbox) > 0 || len(resolved) > 0) {`,
		Repl:  `		false {`,
		Pkgs:  []string{"./actors"},
	},
	{
		Name:  "actors/resolve-now-ahead-of-messages",
		Guard: "speed: an answer resolved with ResolveNow waits for the writes before its run, not behind the messages the run sends",
		File:  "actors/entity.go",
		Orig: `	e.holdResolved(resolved, true, before)
	e.flushOutbox(e.seq)`,
		Repl: `	e.flushOutbox(e.seq)
	e.holdResolved(resolved, true, before)`,
		Pkgs: []string{"./actors"},
	},
	{
		Name:  "actors/write-behind-read-writes-first",
		Guard: "S2: a read answers only once the changes written behind that it may see are durable",
		File:  "actors/entity.go",
		Orig: `		if e.behindRuns == 0 {
			e.flushOutbox(e.seq)`,
		Repl: `		if true {
			e.flushOutbox(e.seq)`,
		Pkgs: []string{"./actors"},
	},
	{
		Name:  "actors/write-behind-keeps-sender-dependency",
		Guard: "S2: a co-located receiver's changes written behind never become durable before its sender's write",
		File:  "actors/entity.go",
		Orig: `	if e.seq != seq || e.behindRuns == 0 {
		c.after = nil
	}`,
		Repl: `	if e.seq != seq || e.behindRuns == 0 {
		c.after = nil
	} else if c.after != nil {
		e.after = e.after[:len(e.after)-1]
	}`,
		Pkgs: []string{"./actors"},
	},
	{
		Name:  "actors/write-behind-fence-written-now",
		Guard: "S6: a run that accepts a sender's newer epoch writes at once, even when it asked to write behind",
		File:  "actors/entity.go",
		Orig:  `		e.wantBehind = false // a sender's fence moved: written now, like the run`,
		Repl:  `		_ = 0`,
		Pkgs:  []string{"./actors"},
	},
	{
		Name:  "actors/write-behind-saved-on-passivation",
		Guard: "write-behind: passivation and a graceful handoff save the changes written behind (Context.WriteBehind)",
		File:  "actors/entity.go",
		Orig:  `	if final := e.finalSnapshot(); !ran && !final && e.behindRuns == 0 {`,
		Repl:  `	if final := e.finalSnapshot(); !ran && !final {`,
		Pkgs:  []string{"./actors"},
	},
	{
		Name:  "pgstore/create-refused",
		Guard: "S3: PostgreSQL refuses a record written as new when the entity is stored",
		File:  "persistence/pgstore/pgstore.go",
		Orig:  `	return "\n), dup AS MATERIALIZED (\n" + cte, " AND req.shard NOT IN (SELECT shard FROM dup)",`,
		Repl:  `	return "\n), dup AS MATERIALIZED (\n" + cte, "",`,
		Pkgs:  []string{"./persistence/pgstore"},
	},
	{
		Name:  "pgstore/save-variant",
		Guard: "S3: a Save with records written as new runs the statement that checks them",
		File:  "persistence/pgstore/pgstore.go",
		Orig:  `		if recs[i].Create {`,
		Repl:  `		if false {`,
		Pkgs:  []string{"./persistence/pgstore"},
		Needs: []string{"ORDO_PG_URL"},
	},
	{
		Name:  "pgstore/delete-variant",
		Guard: "a Save with events to delete runs the statement that deletes them",
		File:  "persistence/pgstore/pgstore.go",
		Orig:  `		if recs[i].DeleteEventsBefore > 0 {`,
		Repl:  `		if false {`,
		Pkgs:  []string{"./persistence/pgstore"},
		Needs: []string{"ORDO_PG_URL"},
	},
	{
		Name:  "pgstore/backend-heap-cold",
		Guard: "speed: a store's connections warm their server process's heap, which then keeps a statement's executor memory",
		File:  "persistence/pgstore/pgstore.go",
		Orig:  `		sql += "; " + warmBackendHeap(heap)`,
		Repl:  `		sql += ""`,
		Pkgs:  []string{"./persistence/pgstore"},
		Needs: []string{"ORDO_PG_URL"},
	},
	{
		Name:  "pgstore/generic-plans",
		Guard: "speed: a store's connections keep one plan per statement instead of planning Saves for their arguments",
		File:  "persistence/pgstore/pgstore.go",
		Orig:  `const genericPlans = "SET plan_cache_mode = force_generic_plan"`,
		Repl:  `const genericPlans = "SELECT 1"`,
		Pkgs:  []string{"./persistence/pgstore"},
		Needs: []string{"ORDO_PG_URL"},
	},
	{
		Name:  "pgstore/backend-heap-bounded",
		Guard: "a BackendHeap over the size glibc adapts to is refused",
		File:  "persistence/pgstore/pgstore.go",
		Orig:  `	case c.BackendHeap > MaxBackendHeap:`,
		Repl:  `	case c.BackendHeap > 2*MaxBackendHeap:`,
		Pkgs:  []string{"./persistence/pgstore"},
	},
	{
		Name:  "pgstore/params-types-checked",
		Guard: "a Save's encoded parameters are refused, before anything is sent, unless they have the types its statement declares",
		File:  "persistence/pgstore/params.go",
		Orig:  `	if !slices.Equal(p.oids, sd.ParamOIDs) {`,
		Repl:  `	if slices.Equal(p.oids, nil) && false {`,
		Pkgs:  []string{"./persistence/pgstore"},
		Needs: []string{"ORDO_PG_URL"},
	},
	{
		Name:  "pgstore/params-bytea-nulls",
		Guard: "a bytea[] parameter with NULL elements says so in its header, as PostgreSQL's array_recv expects",
		File:  "persistence/pgstore/params.go",
		Orig:  `		binary.BigEndian.PutUint32(p.buf[start+4:], 1)`,
		Repl:  `		_ = start`,
		Pkgs:  []string{"./persistence/pgstore"},
	},
	{
		Name:  "pgstore/row-skip-read",
		Guard: "events a delete cut from a row of several stay deleted: reads pass over the row's skip",
		File:  "persistence/pgstore/rows.go",
		Orig:  `		if seq := first + i; i >= uint64(r.skip) && seq >= from && !fn(persistence.Event{Seq: seq, Data: data}) {`,
		Repl:  `		if seq := first + i; seq >= from && !fn(persistence.Event{Seq: seq, Data: data}) {`,
		Pkgs:  []string{"./persistence/pgstore"},
		Needs: []string{"ORDO_PG_URL"},
	},
	{
		Name:  "pgstore/row-end-of-journal",
		Guard: "a journal ends with the last event of its last row, not the row's first: appends continue a journal stored by version 4",
		File:  "persistence/pgstore/pgstore.go",
		Orig:  "FROM (SELECT kind, id, max(seq + n - 1) AS last FROM",
		Repl:  "FROM (SELECT kind, id, max(seq) AS last FROM",
		Pkgs:  []string{"./persistence/pgstore"},
		Needs: []string{"ORDO_PG_URL"},
	},
	{
		Name:  "pgstore/journal-end-is-last-event",
		Guard: "the Journal contract: an append moves the journal's end (jend) to its last event, where the next append must start",
		File:  "persistence/pgstore/journal.go",
		Orig:  "	SELECT r.kind, r.id, r.shard, CASE WHEN r.first > 1 THEN -r.epoch ELSE r.epoch END, r.data, r.due, r.last FROM r",
		Repl:  "	SELECT r.kind, r.id, r.shard, CASE WHEN r.first > 1 THEN -r.epoch ELSE r.epoch END, r.data, r.due, r.first FROM r",
		Pkgs:  []string{"./persistence/pgstore"},
		Needs: []string{"ORDO_PG_URL"},
	},
	{
		Name:  "pgstore/feed-row-read-in-part",
		Guard: "a feed page that ends inside a row of several events goes on from there: no event is passed over",
		File:  "persistence/pgstore/journal.go",
		Orig:  `				read.seq = e.Seq`,
		Repl:  `				_ = e.Seq`,
		Pkgs:  []string{"./persistence/pgstore"},
		Needs: []string{"ORDO_PG_URL"},
	},
	{
		Name:  "pgstore/row-delete-cut",
		Guard: "a delete that cuts a row of several events marks the events below the bound deleted",
		File:  "persistence/pgstore/journal.go",
		Orig:  "	UPDATE ` + events + ` AS e SET skip = (` + bound + ` - e.seq)::integer",
		Repl:  "	UPDATE ` + events + ` AS e SET skip = e.skip",
		Pkgs:  []string{"./persistence/pgstore"},
		Needs: []string{"ORDO_PG_URL"},
	},
	{
		Name:  "pgstore/journal-starts-at-one",
		Guard: "the Journal contract: a journal's first append starts at Seq 1, also when the Save runs without its snapshot check",
		File:  "persistence/pgstore/journal.go",
		Orig:  "SET jpos = CASE WHEN fe.shard IN (SELECT shard FROM w WHERE epoch < 0) THEN -1 ELSE m.pos END",
		Repl:  "SET jpos = m.pos",
		Pkgs:  []string{"./persistence/pgstore"},
		Needs: []string{"ORDO_PG_URL"},
	},
	{
		Name:  "actors/stop-fails-durable-replies",
		Guard: "an entity that stops after its write is durable, before the saver takes the write's replies, answers them",
		File:  "actors/entity.go",
		Orig:  "		if r.dep <= durable {",
		Repl:  "		if r.dep <= durable && false {",
		Pkgs:  []string{"./actors"},
	},
	{
		Name:  "actors/refusal-recorded",
		Guard: "a handler's refusal for now (Unavailable) is not recorded: the retry runs the handler again",
		File:  "actors/entity.go",
		Orig:  "	return errors.As(err, &ae) && Retryable(ae)",
		Repl:  "	return false && errors.As(err, &ae) && Retryable(ae)",
		Pkgs:  []string{"./actors"},
	},
	{
		Name:  "pgstore/large-values-toasted",
		Guard: "a record the size of a dedup window stays in its row, where PostgreSQL's default target moves it to the TOAST table",
		File:  "persistence/pgstore/pgstore.go",
		Orig:  "` SET (toast_tuple_target = ` + strconv.Itoa(largeTarget) + `)`",
		Repl:  "` SET (autovacuum_enabled = true)`",
		Pkgs:  []string{"./persistence/pgstore"},
		Needs: []string{"ORDO_PG_URL"},
	},
	{
		Name:  "pgstore/large-values-pglz",
		Guard: "new large values are compressed with lz4 where the server has it",
		File:  "persistence/pgstore/pgstore.go",
		Orig:  "		stmt += `, ALTER COLUMN data SET COMPRESSION lz4`",
		Repl:  "		stmt += ``",
		Pkgs:  []string{"./persistence/pgstore"},
		Needs: []string{"ORDO_PG_URL"},
	},
	{
		Name:  "pgstore/journal-checked-again",
		Guard: "a Save whose journal does not continue refuses its shard (SequenceError) and writes the rest of the batch",
		File:  "persistence/pgstore/journal.go",
		Orig:  "	if isStaleJournal(err) && b.variant&checkJournals == 0 {",
		Repl:  "	if false && isStaleJournal(err) && b.variant&checkJournals == 0 {",
		Pkgs:  []string{"./persistence/pgstore"},
		Needs: []string{"ORDO_PG_URL"},
	},
	{
		Name:  "pgstore/journal-end-under-lock",
		Guard: "the Journal contract: two writers under one epoch never write a Seq twice, even from a stale snapshot",
		File:  "persistence/pgstore/journal.go",
		Orig:  "			ELSE -1 END",
		Repl:  "			ELSE excluded.jend END",
		Pkgs:  []string{"./persistence/pgstore"},
		Needs: []string{"ORDO_PG_URL"},
	},
	{
		Name:  "pgstore/reserve-write",
		Guard: "the hot path: a large Save is sent from the connection's own write buffer, not one pgx grows anew",
		File:  "persistence/pgstore/params.go",
		Orig:  "	pc.Frontend().Send(takeBuffer{buf})",
		Repl:  "	_ = takeBuffer{buf}",
		Pkgs:  []string{"./persistence/pgstore"},
		Needs: []string{"ORDO_PG_URL"},
	},
	{
		Name:  "lab/work-over-the-window",
		Guard: "measurement: an approach's counts of its work cover the measured window only",
		File:  "lab/runner.go",
		Orig:  "		c := Count{Name: a.Name, N: a.N - b.N}",
		Repl:  "		c := Count{Name: a.Name, N: a.N}",
		Pkgs:  []string{"./lab"},
	},
	{
		Name:  "lab/checkpoint-before-run",
		Guard: "measurement: a run on PostgreSQL starts right after a checkpoint, and a refused one is reported",
		File:  "lab/runner.go",
		Orig:  `	if err := checkpoint(ctx, a); err != nil {`,
		Repl:  `	if err := error(nil); err != nil {`,
		Pkgs:  []string{"./lab"},
	},
	{
		Name:  "etcdstore/create-refused",
		Guard: "S3: etcd refuses a record written as new when the entity is stored",
		File:  "persistence/etcdstore/etcd.go",
		Orig:  `			g.cmps = append(g.cmps, clientv3.Compare(clientv3.CreateRevision(key), "=", 0))`,
		Repl:  ``,
		Pkgs:  []string{"./persistence/etcdstore"},
	},
	{
		Name:  "pgstore/create-check-by-key",
		Guard: "speed: a Save looks the records written as new up in the primary key, whatever plan PostgreSQL keeps",
		File:  "persistence/pgstore/pgstore.go",
		Orig:  "	CROSS JOIN LATERAL (SELECT 1 FROM `+entities+` AS x WHERE x.kind = c.kind AND x.id = c.id LIMIT 1) AS e",
		Repl:  "	JOIN `+entities+` AS x ON x.kind = c.kind AND x.id = c.id",
		Pkgs:  []string{"./persistence/pgstore"},
	},
	{
		Name:  "pgstore/load-many-by-key",
		Guard: "speed: a read of many records looks each up in the primary key, whatever plan PostgreSQL keeps",
		File:  "persistence/pgstore/loadmany.go",
		Orig:  "AND x.id = k.id LIMIT 1) AS e`",
		Repl:  "AND x.id = k.id) AS e`",
		Pkgs:  []string{"./persistence/pgstore"},
		Needs: []string{"ORDO_PG_URL"},
	},
	{
		Name:  "actors/reminders-past-other-kinds",
		Guard: "liveness: due reminders of kinds the host does not run never keep its own from firing",
		File:  "actors/reminder.go",
		Orig:  `	limit := h.cfg.ReminderBatch + min(sh.passed, maxPassed*h.cfg.ReminderBatch)`,
		Repl:  `	limit := h.cfg.ReminderBatch`,
		Pkgs:  []string{"./actors"},
	},
	{
		Name:  "actors/dedup-window-from-both-records",
		Guard: "S3: a retry is recognised after a reload when its reply is in the entity's dedup record",
		File:  "actors/entity.go",
		Orig:  `	all := append(cold.GetRecent(), recent...)`,
		Repl:  `	all := recent`,
		Pkgs:  []string{"./actors"},
	},
	{
		Name:  "actors/dedup-generation-check",
		Guard: "S3: a dedup record of another generation than the record names is refused",
		File:  "actors/entity.go",
		Orig:  `	if cold.GetGeneration() != gen {`,
		Repl:  `	if false {`,
		Pkgs:  []string{"./actors"},
	},
	{
		Name:  "actors/lease-check",
		Guard: "S2: no reply that reveals state leaves while the lease is not valid",
		File:  "actors/host.go",
		Orig:  `h.deps.Lease != nil && !h.deps.Lease.Valid() {`,
		Repl:  `false {`,
		Pkgs:  []string{"./actors"},
	},
	{
		Name:  "actors/fence-before-load",
		Guard: "S1: a new owner fences the shard before it reads any state",
		File:  "actors/entity.go",
		Orig: `	if err := e.h.ensureFenced(e.en.shard); err != nil {
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
`,
		Repl: `	var rec persistence.Record
	var err error
	e.presumed = presume && !e.noPresume && e.es == nil
	if e.presumed {
		err = persistence.ErrNotFound
	} else {
		rec, err = e.h.loader.load(e.withSpan(e.h.ctx), e.en.ref.Kind, e.en.ref.ID)
	}
	if ferr := e.h.ensureFenced(e.en.shard); ferr != nil {
		if errors.Is(ferr, persistence.ErrFenced) {
			e.h.shardLost(e.en.shard, ferr)
			return errf(ordopb.Code_CODE_FENCED, "shard %d: %v", e.en.shard.id, ferr)
		}
		return errf(ordopb.Code_CODE_UNAVAILABLE, "fencing shard %d: %v", e.en.shard.id, ferr)
	}
`,
		Pkgs: []string{"./actors"},
	},
	{
		Name:  "actors/no-fence-at-activation",
		Guard: "S1: an activation fences the shard itself when the background fence has not completed",
		File:  "actors/entity.go",
		Orig: `	if err := e.h.ensureFenced(e.en.shard); err != nil {
		if errors.Is(err, persistence.ErrFenced) {
			e.h.shardLost(e.en.shard, err)
			return errf(ordopb.Code_CODE_FENCED, "shard %d: %v", e.en.shard.id, err)
		}
		return errf(ordopb.Code_CODE_UNAVAILABLE, "fencing shard %d: %v", e.en.shard.id, err)
	}
`,
		Repl: ``,
		Pkgs: []string{"./actors"},
	},
	{
		Name:  "actors/rollback-state",
		Guard: "a failed handler's changes to the state are rolled back",
		File:  "actors/entity.go",
		Orig:  `if err := e.beh.load(e.lastState); err != nil {`,
		Repl:  `if err := error(nil); err != nil {`,
		Pkgs:  []string{"./actors"},
	},
	{
		Name:  "actors/rollback-outbox",
		Guard: "a failed handler's messages are not sent",
		File:  "actors/entity.go",
		Orig: `func (e *entity) rollback() {
	e.outbox = e.outbox[:0]
`,
		Repl: `func (e *entity) rollback() {
`,
		Pkgs: []string{"./actors"},
	},

	{
		Name:  "actors/resend-backoff",
		Guard: "no busy loop: a request sent again after it failed waits for the backoff its attempts reached",
		File:  "actors/entity.go",
		Orig:  `if wait := e.backoffWait(backoffKey{out.to, out.env.GetRequestId()}, timeNow()); wait > 0 {`,
		Repl:  `if wait := e.backoffWait(backoffKey{out.to, out.env.GetRequestId()}, timeNow()); false && wait > 0 {`,
		Pkgs:  []string{"./actors"},
	},
	{
		Name:  "actors/no-retry-of-permanent-errors",
		Guard: "an outgoing message that failed for good is not retried",
		File:  "actors/entity.go",
		Orig:  `if out.err == nil && retryableAttempt(err) &&`,
		Repl:  `if out.err == nil &&`,
		Pkgs:  []string{"./actors"},
	},
	{
		Name:  "actors/undecodable-reply-backoff",
		Guard: "a reply that does not decode counts as a failed attempt: a resend loop on it waits for the backoff",
		File:  "actors/entity.go",
		Orig:  `	if undecodable != nil {`,
		Repl:  `	if _ = undecodable; false {`,
		Pkgs:  []string{"./actors"},
	},
	{
		Name:  "actors/passivate-parks-calls",
		Guard: "S4: nothing runs in an activation after its OnPassivate; a call arriving meanwhile goes to the next one",
		File:  "actors/host.go",
		Orig:  `if en != nil && en.closing {`,
		Repl:  `if false {`,
		Pkgs:  []string{"./actors"},
	},
	{
		Name:  "actors/stop-once-durable",
		Guard: "S2: a passivating or draining entity stops only once its writes (OnPassivate's included) are durable",
		File:  "actors/entity.go",
		Orig:  `if e.stopping || e.seq != e.durable || len(e.held) != 0 {`,
		Repl:  `if e.stopping {`,
		Pkgs:  []string{"./actors"},
	},

	// ---- actors: event-sourced kinds ----
	{
		Name:  "actors/es-rollback-point-copies-events",
		Guard: "an event-sourced entity's rollback point shares nothing with the state, even when Apply keeps parts of an event",
		File:  "actors/eventsourced.go",
		Orig:  `if err := apply(rb.base, proto.Clone(ev)); err != nil {`,
		Repl:  `if err := apply(rb.base, ev); err != nil {`,
		Pkgs:  []string{"./actors"},
	},
	{
		Name:  "actors/es-emit-copies-no-state",
		Guard: "a run's events cost their Apply, not a copy of the state",
		File:  "actors/eventsourced.go",
		Orig: `	if b.rb == nil {
		b.rb = &rollbackPoint[S]{base: proto.Clone(c.State).(S)}`,
		Repl: `	if true {
		b.rb = &rollbackPoint[S]{base: proto.Clone(c.State).(S)}`,
		Pkgs: []string{"./actors"},
	},
	{
		Name:  "actors/at-most-once-retried",
		Guard: "a message sent with AtMostOnce makes one attempt, whatever its retry policy, and is forgotten once it leaves",
		File:  "actors/entity.go",
		Orig: `	if out.oneWay {
		e.attempt(out)
		e.forgetOut(out)
		return
	}`,
		Repl: ``,
		Pkgs: []string{"./actors"},
	},
	{
		Name:  "actors/retry-names-sender",
		Guard: "S5: a retried message names its sender and carries its fence, as its first attempt did",
		File:  "actors/entity.go",
		Orig:  `Metadata: env.Metadata, DeadlineUnixNano: deadline, Sender: env.Sender, SenderFence: env.SenderFence}`,
		Repl:  `Metadata: env.Metadata, DeadlineUnixNano: deadline}`,
		Pkgs:  []string{"./actors"},
	},
	{
		Name:  "actors/dedup-entry-bytes",
		Guard: "a dedup entry is stored in the bytes proto.Marshal makes of its compact form",
		File:  "actors/entity.go",
		Orig:  `typeURL = strings.TrimPrefix(p.GetTypeUrl(), anyPrefix)`,
		Repl:  `typeURL = p.GetTypeUrl()`,
		Pkgs:  []string{"./actors"},
	},
	{
		Name:  "actors/events-with-record",
		Guard: "S1, S3: a run's events are appended in the same Save as its record and dedup entry",
		File:  "actors/batcher.go",
		Orig:  `Events: p.events, DeleteEventsBefore: p.deleteBefore,`,
		Repl:  `DeleteEventsBefore: p.deleteBefore,`,
		Pkgs:  []string{"./actors"},
	},
	{
		Name:  "actors/coalescing-keeps-events",
		Guard: "a newer queued write of an event-sourced entity keeps the events of the writes it replaces",
		File:  "actors/batcher.go",
		Orig:  `	p.events = append(p.events, w.journal.events...)`,
		Repl:  `	p.events = w.journal.events`,
		Pkgs:  []string{"./actors"},
	},
	{
		Name:  "actors/group-event-cap",
		Guard: "a shard's group in a Save carries at most BatchMaxEvents events",
		File:  "actors/batcher.go",
		Orig:  `		len(p.events) > 0 && g.evts+len(p.events) > b.maxEvents) {`,
		Repl:  `		false) {`,
		Pkgs:  []string{"./actors"},
	},
	{
		Name:  "actors/replay-after-snapshot",
		Guard: "activation applies the events after the snapshot",
		File:  "actors/eventsourced.go",
		Orig:  `	return e.h.replay(ctx, e.en.ref, from, stored, es.version, es.beh.applyStored)`,
		Repl: `	_ = from
	return nil`,
		Pkgs: []string{"./actors"},
	},
	{
		Name:  "actors/emit-rollback",
		Guard: "a run rolled back leaves no event and the state as before it",
		File:  "actors/eventsourced.go",
		Orig: `	e.es.begin()
	e.es.beh.restore()`,
		Repl: `	e.es.begin()`,
		Pkgs: []string{"./actors"},
	},
	{
		Name:  "actors/snapshot-version",
		Guard: "a snapshot of another SnapshotVersion is not loaded: the state is rebuilt from the journal",
		File:  "actors/eventsourced.go",
		Orig: `	case snapVersion != version:
		return nil, 1, nil`,
		Repl: `	case false:
		return nil, 1, nil`,
		Pkgs: []string{"./actors"},
	},
	{
		Name:  "actors/undeclared-event-refused",
		Guard: "a stored event of a type the kind does not declare fails the activation",
		File:  "actors/eventsourced.go",
		Orig: `	mt, ok := ek.types[name]
	if !ok {`,
		Repl: `	mt, ok := ek.types[name]
	if !ok && false {`,
		Pkgs: []string{"./actors"},
	},

	// ---- actors: limits (sizes, overload, deadlines) ----
	{
		Name:  "actors/payload-limit",
		Guard: "a payload over MaxPayloadBytes is refused before decoding, activation or any store read",
		File:  "actors/host.go",
		Orig:  `if n := len(env.GetPayload().GetValue()); n > h.cfg.MaxPayloadBytes {`,
		Repl:  `if n := len(env.GetPayload().GetValue()); false && n > h.cfg.MaxPayloadBytes {`,
		Pkgs:  []string{"./actors"},
	},
	{
		Name:  "actors/junk-refused-at-admission",
		Guard: "a message type the kind has no handler for is refused before its entity is activated",
		File:  "actors/host.go",
		Orig:  `if !kind.handles(name) {`,
		Repl:  `if false {`,
		Pkgs:  []string{"./actors"},
	},
	{
		Name:  "actors/state-limit",
		Guard: "a write whose record would exceed MaxStateBytes fails its request alone, rolled back",
		File:  "actors/entity.go",
		Orig:  `if size, ok := e.fit(len(state)+len(e.fences.encoded())+len(rem.enc), added); !ok {`,
		Repl:  `if size, ok := e.fit(len(state)+len(e.fences.encoded())+len(rem.enc), added); false && !ok {`,
		Pkgs:  []string{"./actors"},
	},
	{
		Name:  "actors/state-limit-records-nothing",
		Guard: "S3: a request refused as too large is not recorded for deduplication (a retry is refused again)",
		File:  "actors/entity.go",
		Orig: `			e.unremember(added)
`,
		Repl: ``,
		Pkgs: []string{"./actors"},
	},
	{
		Name:  "actors/dedup-fits-state-limit",
		Guard: "the oldest dedup entries make room within MaxStateBytes: writes do not start failing as replies pile up",
		File:  "actors/entity.go",
		Orig:  `for stateLen+size > e.h.cfg.MaxStateBytes && over < n-added {`,
		Repl:  `for false && over < n-added {`,
		Pkgs:  []string{"./actors"},
	},
	{
		Name:  "actors/store-refusal-keeps-shard",
		Guard: "a record the store refuses as too large fails its requests and restarts its entity, never drops the shard",
		File:  "actors/entity.go",
		Orig: `	case errors.Is(m.err, persistence.ErrTooLarge):
		e.refused(m.err)
`,
		Repl: ``,
		Pkgs: []string{"./actors"},
	},
	{
		Name:  "actors/store-refusal-splits-groups",
		Guard: "a shard group the store refuses only as a whole is written in smaller groups",
		File:  "actors/batcher.go",
		Orig:  `errors.Is(err, persistence.ErrTooLarge) && groupSize(res.batch, p.w.shard) > 1 {`,
		Repl:  `errors.Is(err, persistence.ErrTooLarge) && false {`,
		Pkgs:  []string{"./actors"},
	},
	{
		Name:  "actors/mailbox-limit",
		Guard: "at most MaxMailbox calls wait for one entity; more are refused retryably with a retry-after hint",
		File:  "actors/host.go",
		Orig:  `case !en.closing && en.queued.Load() >= int64(h.cfg.MaxMailbox):`,
		Repl:  `case false:`,
		Pkgs:  []string{"./actors"},
	},
	{
		Name:  "actors/inflight-limit",
		Guard: "at most MaxInflight calls are admitted and unanswered; more are refused before activation",
		File:  "actors/host.go",
		Orig:  `case h.inflight >= h.cfg.MaxInflight:`,
		Repl:  `case false:`,
		Pkgs:  []string{"./actors"},
	},
	{
		Name:  "actors/colocated-never-refused",
		Guard: "no deadlock: a co-located message (work already admitted) is never refused for overload",
		File:  "actors/host.go",
		Orig: `	if c.msg == nil {
		// Co-located messages are never refused`,
		Repl: `	if true {
		// Co-located messages are never refused`,
		Pkgs: []string{"./actors"},
	},
	{
		Name:  "actors/default-deadline",
		Guard: "a call without a deadline gets DefaultDeadline: a deferred reply always ends",
		File:  "actors/host.go",
		Orig:  `return now + int64(h.cfg.DefaultDeadline)`,
		Repl:  `return now + int64(h.cfg.MaxDeadline)`,
		Pkgs:  []string{"./actors"},
	},
	{
		Name:  "actors/max-deadline",
		Guard: "a deadline beyond MaxDeadline is brought forward to it",
		File:  "actors/host.go",
		Orig:  `return min(d, now+int64(h.cfg.MaxDeadline))`,
		Repl:  `return d`,
		Pkgs:  []string{"./actors"},
	},
	{
		Name:  "actors/retry-after-hint",
		Guard: "an entity's message refused for overload is retried no sooner than the retry-after hint",
		File:  "actors/entity.go",
		Orig:  `wait := max(p.backoff(st.failures), hint)`,
		Repl:  `wait := p.backoff(st.failures)`,
		Pkgs:  []string{"./actors"},
	},
	{
		Name:  "actors/reminder-advanced-with-firing",
		Guard: "S7: the write that applies a reminder's firing advances or removes the reminder",
		File:  "actors/reminder.go",
		Orig:  `if f := rm.firing; f != nil && !rm.touched[f.name] {`,
		Repl:  `if f := rm.firing; false && f != nil && !rm.touched[f.name] {`,
		Pkgs:  []string{"./actors"},
	},
	{
		Name:  "actors/reminder-activation-cap",
		Guard: "a reminder delivery activates an entity only while fewer than MaxActive + ReminderBatch are active",
		File:  "actors/reminder.go",
		Orig:  `if sh.entities[ref] == nil && h.active >= h.cfg.MaxActive+h.cfg.ReminderBatch {`,
		Repl:  `if false && sh.entities[ref] == nil && h.active >= h.cfg.MaxActive+h.cfg.ReminderBatch {`,
		Pkgs:  []string{"./actors"},
	},
	{
		Name:  "actors/sweep-asks-for-the-cap",
		Guard: "liveness: a host above MaxActive asks for passivations again at its sweep, so reminder deliveries waiting for room go on",
		File:  "actors/host.go",
		Orig: `	// (remind).
	if h.active-h.evicts > h.cfg.MaxActive {`,
		Repl: `	// (remind).
	if false && h.active-h.evicts > h.cfg.MaxActive {`,
		Pkgs: []string{"./actors"},
	},
	{
		Name:  "actors/invoke-reuses-abandoned-waiter",
		Guard: "a reply that comes after Invoke gave up on it reaches no later call",
		File:  "actors/host.go",
		Orig:  "\t\treturn nil, ctx.Err() // the reply may still come: w is not reused",
		Repl:  "\t\tinvokeWaiters.Put(w)\n\t\treturn nil, ctx.Err()",
		Pkgs:  []string{"./actors"},
	},
	{
		Name:  "actors/pace-holds-a-full-save",
		Guard: "a paced queue still sends a Save as soon as BatchMaxRecords are queued",
		File:  "actors/batcher.go",
		Orig:  "\treturn len(q.order) >= b.maxRecords || q.bytes >= b.maxBytes || q.wait(time.Now()) <= 0",
		Repl:  "\treturn q.wait(time.Now()) <= 0",
		Pkgs:  []string{"./actors"},
	},
	{
		Name:  "actors/pace-ignored",
		Guard: "writes queued after a busy Save wait for the gap BatchPace sets",
		File:  "actors/batcher.go",
		Orig:  "\tif !q.paceUntil.IsZero() {",
		Repl:  "\tif false && !q.paceUntil.IsZero() {",
		Pkgs:  []string{"./actors"},
	},
	{
		Name:  "actors/pace-after-few",
		Guard: "a Save of few entities spaces nothing: a lone caller's writes never wait",
		File:  "actors/batcher.go",
		Orig:  "len(res.batch) < paceMinBatch || ",
		Repl:  "",
		Pkgs:  []string{"./actors"},
	},
	{
		Name:  "memory/rewrite-copies",
		Guard: "the memory store rewrites a record in the buffer it keeps for it",
		File:  "persistence/memory/memory.go",
		Orig:  `	return append(buf[:0], data...)`,
		Repl:  `	return bytes.Clone(data)`,
		Pkgs:  []string{"./persistence/memory"},
	},
	{
		Name:  "memory/rewrite-shares-loaded",
		Guard: "a record the memory store returned (Load) does not change when the record is rewritten",
		File:  "persistence/memory/memory.go",
		Orig:  "\tr.Data = bytes.Clone(r.Data)\n\treturn r, nil",
		Repl:  "\treturn r, nil",
		Pkgs:  []string{"./persistence/memory"},
	},
	{
		Name:  "cluster/attempt-bounded",
		Guard: "a remote attempt whose owner does not answer ends after AttemptTimeout, and is retried",
		File:  "cluster/invoke.go",
		Orig:  `	bound.Reset(r.policy.AttemptTimeout)`,
		Repl:  `	bound.Reset(time.Hour)`,
		Pkgs:  []string{"./cluster"},
	},
	{
		Name:  "actors/passivate-listens",
		Guard: "liveness: an entity that asked to passivate hears of its last write's durability, and stops, without another message",
		File:  "actors/entity.go",
		Orig:  `(e.passivating || e.drain != nil || e.passivateAsked)`,
		Repl:  `(e.passivating || e.drain != nil)`,
		Pkgs:  []string{"./actors"},
	},
	{
		Name:  "actors/passivate-when-not-quiet",
		Guard: "a reply deferred or held, or a write in flight, keeps an entity that asked to passivate active until they are done",
		File:  "actors/entity.go",
		Orig:  `	if !e.quiescent() || !e.h.beginPassivate(e.en) {`,
		Repl:  `	if !e.h.beginPassivate(e.en) {`,
		Pkgs:  []string{"./actors"},
	},
	{
		Name:  "pgstore/entities-fill-pages",
		Guard: "performance: inserts leave room on the entities' pages, so that a record's updates stay on its page (HOT)",
		File:  "persistence/pgstore/pgstore.go",
		Orig:  `const entityFill = 75`,
		Repl:  `const entityFill = 100`,
		Pkgs:  []string{"./persistence/pgstore"},
	},
	{
		Name:  "actors/reminder-request-id",
		Guard: "S7: a firing's request ID is its reminder's name and due time (at most once per due time)",
		File:  "actors/reminder.go",
		Orig:  `return "ordo.reminder/" + name + "/" + strconv.FormatInt(due, 10)`,
		Repl:  `return "ordo.reminder/" + name + "/" + strconv.FormatInt(time.Now().UnixNano(), 10)`,
		Pkgs:  []string{"./actors"},
	},
	{
		Name:  "actors/reminder-rollback",
		Guard: "S7: a run rolled back sets no reminder",
		File:  "actors/reminder.go",
		Orig: `	e.rm.run = nil
	clear(e.rm.touched)`,
		Repl: `	clear(e.rm.touched)`,
		Pkgs: []string{"./actors"},
	},
	{
		Name:  "actors/reminder-scan-hint",
		Guard: "S7: a due time written after a shard's last index read makes the host read it again",
		File:  "actors/entity.go",
		Orig:  `sh.noteDue(due) // the host's reminder scan looks at the shard again`,
		Repl:  `_ = sh`,
		Pkgs:  []string{"./actors"},
	},
	{
		Name:  "actors/reminder-prev-due-coalesced",
		Guard: "S7: a write that replaces a queued one keeps its PrevDue (the index entry the store has)",
		File:  "actors/batcher.go",
		Orig:  `w.prevDue = p.w.prevDue // the replaced write is never sent`,
		Repl:  ``,
		Pkgs:  []string{"./actors"},
	},
	{
		Name:  "actors/pool-refused-pending",
		Guard: "a pending the store refused as too large goes again: only a settled one serves a later write",
		File:  "actors/batcher.go",
		Orig: `			refused[p.w.shard] = append(refused[p.w.shard], p)
			continue`,
		Repl: `			refused[p.w.shard] = append(refused[p.w.shard], p)
			q.pool.put(p)
			continue`,
		Pkgs: []string{"./actors"},
	},
	{
		Name:  "actors/save-bound-renewed",
		Guard: "a Save gets a deadline at least StoreTimeout ahead: a saver's context is replaced once it has ended or would end sooner",
		File:  "actors/batcher.go",
		Orig:  `if sb.ctx == nil || sb.end.Sub(now) < d || sb.ctx.Err() != nil {`,
		Repl:  `if sb.ctx == nil {`,
		Pkgs:  []string{"./actors"},
	},

	{
		Name:  "placement/setlive-unchanged",
		Guard: "the same live set again neither recomputes desired owners nor wakes a reconcile",
		File:  "placement/node.go",
		Orig: `	if same {
		return
	}`,
		Repl: `	_ = same`,
		Pkgs: []string{"./placement"},
	},
	// ---- cluster ----
	{
		Name:  "cluster/transport-fixed-window",
		Guard: "a call and its result are a write each way, with no flow-control PING per round trip",
		File:  "cluster/transport.go",
		Orig: `			grpc.WithStaticStreamWindowSize(windowBytes),
			grpc.WithStaticConnWindowSize(windowBytes),`,
		Repl: ``,
		Pkgs: []string{"./cluster"},
	},
	{
		Name:  "cluster/one-way-sends-no-result",
		Guard: "a one-way call is answered to nobody: its stream sends no result for it",
		File:  "cluster/transport.go",
		Orig:  `				s.fn(ss.caller, env, func(*ordopb.Reply) { ss.settle() })`,
		Repl:  `				s.fn(ss.caller, env, func(rep *ordopb.Reply) { ss.put(&ordopb.Result{Id: id, Reply: rep}, true) })`,
		Pkgs:  []string{"./cluster"},
	},
	{
		Name:  "cluster/one-way-not-invoked",
		Guard: "a caller cannot invoke a one-way envelope, which nothing would answer",
		File:  "cluster/invoke.go",
		Orig: `	if env.GetOneWay() {
		return &ordopb.Reply{`,
		Repl: `	if false {
		return &ordopb.Reply{`,
		Pkgs: []string{"./cluster"},
	},
	{
		Name:  "cluster/lease-wiring",
		Guard: "S2: the host's replies are gated on the placement lease",
		File:  "cluster/node.go",
		Orig:  `Router: n.router, Lease: n.place,`,
		Repl:  `Router: n.router, Lease: nil,`,
		Pkgs:  []string{"./cluster"},
	},
	{
		Name:  "cluster/same-request-id",
		Guard: "S3: a call is retried with the same request ID",
		File:  "cluster/invoke.go",
		Orig:  `rep, err = r.attempt(ctx, shard, env)`,
		Repl: `if attempt > 0 {
				env.RequestId = actors.NewRequestID()
			}
			rep, err = r.attempt(ctx, shard, env)`,
		Pkgs: []string{"./cluster"},
	},
	{
		Name:  "cluster/retry-after-hint",
		Guard: "a call refused for overload is retried no sooner than the owner's retry-after hint",
		File:  "cluster/invoke.go",
		Orig:  `return max(p.backoff(attempt), actors.RetryAfter(err)), true`,
		Repl:  `return p.backoff(attempt), true`,
		Pkgs:  []string{"./cluster"},
	},
	{
		Name:  "cluster/max-attempts",
		Guard: "a call's retries are bounded by RetryPolicy.MaxAttempts, not only by its context",
		File:  "cluster/invoke.go",
		Orig:  `if p.MaxAttempts > 0 && sent >= p.MaxAttempts {`,
		Repl:  `if false {`,
		Pkgs:  []string{"./cluster"},
	},
	{
		Name:  "cluster/backoff-restarts-with-owner",
		Guard: "a call's backoff starts over when its shard's owner changes (handoff tail latency)",
		File:  "cluster/invoke.go",
		Orig:  `if s.n > 0 && (owned != s.owned || owner != s.owner) {`,
		Repl:  `if false {`,
		Pkgs:  []string{"./cluster"},
	},
	{
		Name:  "cluster/no-owner-is-no-attempt",
		Guard: "waiting for a shard to get an owner (failover, start) spends none of a call's MaxAttempts",
		File:  "cluster/invoke.go",
		Orig:  `if !errors.Is(err, errNoOwner) && !errors.Is(err, actors.ErrSenderGone) {`,
		Repl:  `if true {`,
		Pkgs:  []string{"./cluster"},
	},

	// ---- placement ----
	{
		Name:  "placement/acquire-guard",
		Guard: "S1: a shard lock is taken only when nobody holds it",
		File:  "placement/keys.go",
		Orig: `If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, nodeID, clientv3.WithLease(lease))).`,
		Repl: `If().
		Then(clientv3.OpPut(key, nodeID, clientv3.WithLease(lease))).`,
		Pkgs: []string{"./placement"},
	},
	{
		Name:  "placement/mislaid-lock",
		Guard: "L1: a lock the node's session holds but the node does not own (an Acquire reply lost) is served, not left locked",
		File:  "placement/reconcile.go",
		Orig:  `if taken && o.NodeID == self && o.Lease == int64(s.ID()) {`,
		Repl:  `if false {`,
		Pkgs:  []string{"./placement"},
	},
	{
		Name:  "placement/mislaid-never-acquires",
		Guard: "a lock of the session the node does not own is taken back only as etcd holds it, never acquired anew (the table may show a lock an unlock just deleted)",
		File:  "placement/reconcile.go",
		Orig: `	epoch, ok := mislaid[shard]
	if !ok {`,
		Repl: `	epoch, ok := mislaid[shard]
	if !ok || true {`,
		Pkgs: []string{"./placement"},
	},
	{
		Name:  "placement/unlocking-not-mislaid",
		Guard: "S1: a relinquished shard is served again only under a new epoch, never by taking back the lock being deleted",
		File:  "placement/reconcile.go",
		Orig:  `if n.acquiring[shard] || n.unlocking[shard] > 0 {`,
		Repl:  `if n.acquiring[shard] {`,
		Pkgs:  []string{"./placement"},
	},
	{
		Name:  "placement/deadline-from-send",
		Guard: "S1/S2: the validity deadline counts from the keepalive's send time",
		File:  "placement/session.go",
		Orig:  `nd := sent + int64(time.Duration(resp.TTL)*time.Second-s.margin)`,
		Repl:  `nd := monoNow() + int64(time.Duration(resp.TTL)*time.Second-s.margin)`,
		Pkgs:  []string{"./placement"},
	},
	{
		Name:  "placement/table-watch-current",
		Guard: "the routing table's watch starts at etcd's current revision (a past one is caught up only every 100 ms: handoff latency)",
		File:  "placement/table.go",
		Orig:  `clientv3.WithRange(end), clientv3.WithCreatedNotify())`,
		Repl:  `clientv3.WithRange(end), clientv3.WithCreatedNotify(), clientv3.WithRev(t.Revision()+1))`,
		Pkgs:  []string{"./placement"},
	},
	{
		Name:  "placement/table-skips-listed-events",
		Guard: "the routing table applies no watch event its list already holds (it never goes back to an older owner)",
		File:  "placement/table.go",
		Orig:  `if ev.Kv.ModRevision <= t.rev {`,
		Repl:  `if false {`,
		Pkgs:  []string{"./placement"},
	},

	// ---- persistence ----
	{
		Name:  "memory/save-fence",
		Guard: "S1: a write is accepted only under the shard's current fence",
		File:  "persistence/memory/memory.go",
		Orig:  `if have := s.fences[r.Shard]; have != r.Epoch {`,
		Repl:  `if have := s.fences[r.Shard]; false && have != r.Epoch {`,
		Pkgs:  []string{"./persistence/memory"},
	},
	{
		Name:  "memory/fence-upward",
		Guard: "S1: a fence only rises",
		File:  "persistence/memory/memory.go",
		Orig:  `if have := s.fences[shard]; have > epoch {`,
		Repl:  `if have := s.fences[shard]; false && have > epoch {`,
		Pkgs:  []string{"./persistence/memory"},
	},
	{
		Name:  "etcd/save-fence",
		Guard: "S1: a write is accepted only under the shard's current fence (= in the compare)",
		File:  "persistence/etcdstore/etcd.go",
		Orig:  `clientv3.Compare(clientv3.Value(g.fence), "=", formatFence(g.epoch))`,
		Repl:  `clientv3.Compare(clientv3.Value(g.fence), ">=", formatFence(g.epoch))`,
		Pkgs:  []string{"./persistence/etcdstore"},
	},
	{
		Name:  "etcd/fence-upward",
		Guard: "S1: a fence only rises",
		File:  "persistence/etcdstore/etcd.go",
		Orig: `		case have > epoch:
			return &persistence.FencedError{Shard: shard, Have: epoch, Want: have}`,
		Repl: `		case false && have > epoch:
			return &persistence.FencedError{Shard: shard, Have: epoch, Want: have}`,
		Pkgs: []string{"./persistence/etcdstore"},
	},
	{
		Name:  "etcd/split-refused-txn",
		Guard: "a transaction the server refuses as too large is split: only a shard too large alone is refused",
		File:  "persistence/etcdstore/etcd.go",
		Orig:  `if len(groups) > 1 && errors.Is(err, persistence.ErrTooLarge) {`,
		Repl:  `if false {`,
		Pkgs:  []string{"./persistence/etcdstore"},
	},
	{
		Name:  "postgres/save-fence",
		Guard: "S1: a write is accepted only under the shard's current fence",
		File:  "persistence/pgstore/pgstore.go",
		Orig:  `JOIN f ON f.shard = req.shard AND f.epoch = req.epoch`,
		Repl:  `JOIN f ON f.shard = req.shard`,
		Pkgs:  []string{"./persistence/pgstore"},
		Needs: []string{"ORDO_PG_URL"},
	},
	{
		Name:  "postgres/for-share",
		Guard: "S1: the fence rows are locked (FOR SHARE) for the write's transaction",
		File:  "persistence/pgstore/pgstore.go",
		Orig:  `ORDER BY shard FOR SHARE`,
		Repl:  `ORDER BY shard`,
		Pkgs:  []string{"./persistence/pgstore"},
		Needs: []string{"ORDO_PG_URL"},
	},
	{
		Name:  "postgres/fence-upward",
		Guard: "S1: a fence only rises",
		File:  "persistence/pgstore/pgstore.go",
		Orig:  `ON CONFLICT (shard) DO UPDATE SET epoch = excluded.epoch WHERE f.epoch <= excluded.epoch`,
		Repl:  `ON CONFLICT (shard) DO UPDATE SET epoch = excluded.epoch`,
		Pkgs:  []string{"./persistence/pgstore"},
		Needs: []string{"ORDO_PG_URL"},
	},
	{
		Name:  "memory/reminder-index-moves",
		Guard: "S7: a record's index entry moves with its due time",
		File:  "persistence/memory/reminders.go",
		Orig:  `t.Delete(dueItem{old.Due, k})`,
		Repl:  ``,
		Pkgs:  []string{"./persistence/memory"},
	},
	{
		Name:  "etcd/reminder-index-prev-due",
		Guard: "S7: a Save removes the record's index entry at its PrevDue",
		File:  "persistence/etcdstore/reminders.go",
		Orig:  `g.ops = append(g.ops, clientv3.OpDelete(k))`,
		Repl:  `_ = k`,
		Pkgs:  []string{"./persistence/etcdstore"},
	},
	{
		Name:  "postgres/reminder-index-due",
		Guard: "S7: a Save writes the record's due time with it",
		File:  "persistence/pgstore/pgstore.go",
		Orig:  `data = excluded.data, due = excluded.due`,
		Repl:  `data = excluded.data`,
		Pkgs:  []string{"./persistence/pgstore"},
		Needs: []string{"ORDO_PG_URL"},
	},

	// ---- the bank example ----
	{
		Name:  "bank/debit-records-transfer",
		Guard: "S5: an account debits a transfer ID once, whatever the request ID",
		File:  "examples/bank/ledger/ledger.go",
		Orig: `		a.Debits[ev.TransferId] = ev.Amount
`,
		Repl: ``,
		Pkgs: []string{"./examples/bank/ledger"},
	},
	{
		Name:  "bank/credit-records-transfer",
		Guard: "S5: an account credits a transfer ID once, whatever the request ID",
		File:  "examples/bank/ledger/ledger.go",
		Orig: `		a.Credits[ev.TransferId] = ev.Amount
`,
		Repl: ``,
		Pkgs: []string{"./examples/bank/ledger"},
	},
	{
		Name:  "bank/rejection-waits-for-its-write",
		Guard: "S5: a rejected transfer is answered only once its outcome is durable (a replay could debit)",
		File:  "examples/bank/ledger/transfer.go",
		Orig: `	if status == rejected {
		c.Resolve(outcome, state(c.State), nil)`,
		Repl: `	if status == rejected {
		c.ResolveNow(outcome, state(c.State), nil)`,
		Pkgs: []string{"./examples/bank/ledger"},
	},
	{
		Name:  "bank/held-credit-in-doubt",
		Guard: "S5: an account that finds a credit held by an earlier activation (its release maybe lost with its memory, the transfer acknowledged) shows no balance until the saga settles it",
		File:  "examples/bank/ledger/ledger.go",
		Orig:  "		if h.Activation != c.Activation() {",
		Repl:  "		if false && h.Activation != c.Activation() {",
		Pkgs:  []string{"./examples/bank/ledger"},
	},
	{
		Name:  "bank/unstarted-hold-cancelled",
		Guard: "a credit held for a saga whose start was lost is dropped once the saga's shard answers that no such transfer started",
		File:  "examples/bank/ledger/ledger.go",
		Orig: `			if code, ok := permanent(err); ok && code == CodeUnknownTransfer && h.Saga == asked {
				c.Emit(&bankpb.HoldCancelled{TransferId: id})`,
		Repl: `			if code, ok := permanent(err); ok && code == CodeUnknownTransfer && h.Saga == asked {
				_ = id`,
		Pkgs: []string{"./examples/bank/ledger"},
	},
	{
		Name:  "bank/debit-waits-for-doubt",
		Guard: "S4: a debit that credits in doubt could cover is refused for now, not for good (the credit may have been released and acknowledged)",
		File:  "examples/bank/ledger/ledger.go",
		Orig:  "if n, doubt := inDoubt(c); n > 0 && c.State.Balance+doubt >= m.Amount {",
		Repl:  "if n, doubt := inDoubt(c); false && n > 0 && c.State.Balance+doubt >= m.Amount {",
		Pkgs:  []string{"./examples/bank/ledger"},
	},
	{
		Name:  "bank/debit-covered-in-doubt",
		Guard: "L1: a debit the balance covers goes through while credits are in doubt",
		File:  "examples/bank/ledger/ledger.go",
		Orig:  "\tif c.State.Balance < m.Amount {\n\t\t// Credits in doubt",
		Repl:  "\tif n, _ := inDoubt(c); n > 0 || c.State.Balance < m.Amount {\n\t\t// Credits in doubt",
		Pkgs:  []string{"./examples/bank/ledger"},
	},
	{
		Name:  "bank/settle-undebited",
		Guard: "L1: a saga asked to settle while DEBITING says whether its source debited it, so accounts whose credits in doubt wait on each other's debits settle them",
		File:  "examples/bank/ledger/transfer.go",
		Orig:  "st.Undebited = err == nil && d.Amount == 0 && c.State.Status == debiting",
		Repl:  "st.Undebited = false && err == nil && d.Amount == 0 && c.State.Status == debiting",
		Pkgs:  []string{"./examples/bank/ledger"},
	},
	{
		Name:  "bank/undebited-only-while-debiting",
		Guard: "L1: a saga that ended while its source answered (a debit refused for good just before the read) answers its status, not undebited",
		File:  "examples/bank/ledger/transfer.go",
		Orig:  "st.Undebited = err == nil && d.Amount == 0 && c.State.Status == debiting",
		Repl:  "st.Undebited = err == nil && d.Amount == 0",
		Pkgs:  []string{"./examples/bank/ledger"},
	},
	{
		Name:  "bank/unknown-answers-the-asked-hold",
		Guard: "L1: a late \"unknown transfer\" drops only the hold of the saga it was asked about, not one a resubmitted saga has made since",
		File:  "examples/bank/ledger/ledger.go",
		Orig:  "ok && code == CodeUnknownTransfer && h.Saga == asked {",
		Repl:  "ok && code == CodeUnknownTransfer && asked == asked {",
		Pkgs:  []string{"./examples/bank/ledger"},
	},
	{
		Name:  "bank/submit-new-hint",
		Guard: "speed: a submitted transfer's saga starts without reading the store (the lab counts store reads)",
		File:  "examples/bank/ledger/client.go",
		Orig:  `actors.WithRequestID(id+":submit"), actors.AsNew())`,
		Repl:  `actors.WithRequestID(id+":submit"))`,
		Pkgs:  []string{"./lab/ordolab"},
	},
	{
		Name:  "check/statements-transfers",
		Guard: "bank check: every transfer appears in the statements as its outcome says",
		File:  "robustness/check/statements.go",
		Orig:  `if msg := transferEntries(t, byTransfer[t.op.ID]); msg != "" {`,
		Repl:  `if msg := transferEntries(t, byTransfer[t.op.ID]); false && msg != "" {`,
		Pkgs:  []string{"./robustness/check"},
	},
	{
		Name:  "check/journal-witness-real-time",
		Guard: "bank check: a journal's order is a linearizability witness only if it keeps the ops' real-time order",
		File:  "robustness/check/journal.go",
		Orig:  "		if maxCall >= l.ret {",
		Repl:  "		if false && maxCall >= l.ret {",
		Pkgs:  []string{"./robustness/check"},
	},
	{
		Name:  "check/journal-credits-first",
		Guard: "bank check: a credit applied after a debit called once its transfer had returned still lets the journal decide the account",
		File:  "robustness/check/journal.go",
		Orig:  "\tcreditsFirst(effects)\n",
		Repl:  "\n",
		Pkgs:  []string{"./robustness/check"},
	},
	{
		Name:  "check/conservation",
		Guard: "S5: the checker reports money created or lost",
		File:  "robustness/check/check.go",
		Orig:  `if sum != want || missing > 0 {`,
		Repl:  `if missing > 0 {`,
		Pkgs:  []string{"./robustness/check"},
	},
	// ---- ordotls and the transport: mutual TLS ----
	{
		Name:  "ordotls/require-client-cert",
		Guard: "security: a node accepts only callers with a certificate its CAs issued",
		File:  "ordotls/material.go",
		Orig: `		ClientAuth:             tls.RequireAndVerifyClientCert,
		ClientCAs:              pool,`,
		Repl: `		ClientAuth:             tls.RequestClientCert,
		ClientCAs:              pool,`,
		Pkgs: []string{"./ordotls"},
	},
	{
		Name:  "ordotls/server-name",
		Guard: "security: a caller accepts only a node whose certificate names the address it dialed",
		File:  "ordotls/material.go",
		Orig:  `		DNSName:       serverName,`,
		Repl:  `		DNSName:       "",`,
		Pkgs:  []string{"./ordotls"},
	},
	{
		Name:  "ordotls/no-server-name",
		Guard: "security: a client configuration without a server name refuses every server instead of skipping the host check",
		File:  "ordotls/material.go",
		Orig:  `	if serverName == "" {`,
		Repl:  `	if false {`,
		Pkgs:  []string{"./ordotls"},
	},
	{
		Name:  "ordotls/server-ca",
		Guard: "security: a caller verifies the node's certificate against its CAs",
		File:  "ordotls/material.go",
		Orig: `	if _, err := chain[0].Verify(opts); err != nil {
		return fmt.Errorf("ordotls: server certificate: %w", err)
	}`,
		Repl: `	if _, err := chain[0].Verify(opts); err != nil && false {
		return fmt.Errorf("ordotls: server certificate: %w", err)
	}`,
		Pkgs: []string{"./ordotls"},
	},
	{
		Name:  "cluster/caller-identity",
		Guard: "security: what a node serves learns its caller's verified certificate subject (the authorization hook)",
		File:  "cluster/transport.go",
		Orig:  `	ss := newServerStream(callerOf(stream.Context()))`,
		Repl:  `	ss := newServerStream(peerID{})`,
		Pkgs:  []string{"./cluster"},
	},
	{
		Name:  "cluster/tls-choice-required",
		Guard: "security: a node or client config that sets neither TLS nor Insecure is refused",
		File:  "cluster/config.go",
		Orig:  `	if src == nil && !insecure {`,
		Repl:  `	if false && src == nil && !insecure {`,
		Pkgs:  []string{"./cluster"},
	},
	{
		Name:  "cluster/etcd-tls-not-dropped",
		Guard: "security: etcd TLS with an http:// endpoint (which the etcd client would dial in plaintext) is refused",
		File:  "cluster/etcd.go",
		Orig:  `		if strings.HasPrefix(ep, "http://") {`,
		Repl:  `		if false && strings.HasPrefix(ep, "http://") {`,
		Pkgs:  []string{"./cluster"},
	},
	{
		Name:  "cluster/admin-token",
		Guard: "security: the admin endpoint requires its token on every path but the probes",
		File:  "cluster/admin.go",
		Orig:  `		if !probe(r.URL.Path) && subtle.ConstantTimeCompare(`,
		Repl:  `		if false && !probe(r.URL.Path) && subtle.ConstantTimeCompare(`,
		Pkgs:  []string{"./cluster"},
	},
	{
		Name:  "cluster/admin-client-cert",
		Guard: "security: off loopback without a token, the admin endpoint requires a verified client certificate",
		File:  "cluster/admin.go",
		Orig:  `		if !probe(r.URL.Path) && (r.TLS == nil || len(r.TLS.VerifiedChains) == 0) {`,
		Repl:  `		if false && !probe(r.URL.Path) && (r.TLS == nil || len(r.TLS.VerifiedChains) == 0) {`,
		Pkgs:  []string{"./cluster"},
	},
	{
		Name:  "cluster/admin-off-loopback",
		Guard: "security: an admin endpoint off loopback with neither TLS nor a token does not start",
		File:  "cluster/admin.go",
		Orig:  `	case src == nil && token == "":`,
		Repl:  `	case false:`,
		Pkgs:  []string{"./cluster"},
	},
	{
		Name:  "cluster/admin-pprof-token",
		Guard: "security: pprof off loopback needs the admin token",
		File:  "cluster/admin.go",
		Orig:  `	case n.cfg.Pprof && token == "":`,
		Repl:  `	case false:`,
		Pkgs:  []string{"./cluster"},
	},
	{
		Name:  "soak/memory-before-filled",
		Guard: "soak: memory is not judged in a window that starts before it has filled",
		File:  "robustness/soak/report.go",
		Orig:  `if why == "" && sp.memory && rep.WindowS[0] < cfg.MemoryFilled.Seconds() {`,
		Repl:  `if false {`,
		Pkgs:  []string{"./robustness/soak"},
	},
	{
		Name:  "soak/node-rss-judged",
		Guard: "soak: a node's memory is judged by its live heap, not by its RSS (a ratchet of its heap goal)",
		File:  "robustness/soak/report.go",
		Orig:  `			return keeps`,
		Repl:  `			return ""`,
		Pkgs:  []string{"./robustness/soak"},
	},
}
