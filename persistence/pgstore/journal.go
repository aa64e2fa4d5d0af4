package pgstore

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ordo-actors/ordo/persistence"
)

// journalSaveSQL is Save for batches that touch journals. It differs from
// the plain statement in four ways: it locks the batch's fence rows FOR NO
// KEY UPDATE rather than FOR SHARE, so that Saves of one shard that touch
// journals commit one at a time, in the order they take the lock; it
// checks, per record with events, that the first continues the journal
// (jend, below); it inserts each record's events as one row (rows.go),
// numbering each shard's rows from the fence row's jpos on and moving
// jpos past them (ev, ins, adv); and it deletes the events records ask to
// delete: rows all of whose events go (del), and the leading events of a
// row cut by the bound (cut, which raises the row's skip).
//
// The entity's row carries where its journal ends (jend: the last Seq of
// its events, 0 without), which every Save that appends moves on. The
// upsert checks it under the row's lock, on the row's latest version: a
// record whose events do not start right after jend sets jend to -1,
// which the column's constraint (journalContinues) refuses. A record that
// inserts its entity's row must start its journal at 1: one that starts
// later is inserted with its epoch negated (the proposed row passes the
// table's constraints before the upsert knows whether it inserts, so the
// mark cannot be a refused value), and adv sets its shard's jpos to -1,
// which fences' constraint (journalStarts) refuses; an update turns the
// epoch positive again. Either fails the statement with nothing written.
// That is the check every Save makes, at little cost beyond the upsert it
// makes anyway.
//
// A journal that does not continue is a fault (a runtime that lost track
// of its entity's journal, confused writers), so the failure of the whole
// batch is left to it: saveJournal then runs the statement again with
// checkJournals, whose head reads each journal's end from the statement's
// snapshot (a lookup of the entity row by its key, cheaper than finding
// the journal's last event row) and whose bad refuses the shards of the
// records that do not continue theirs (SequenceError), writing the rest.
// Without checkJournals a Save of 16 appends costs PostgreSQL about a
// tenth less CPU (BenchmarkJournalCheck). The snapshot is taken before
// the fence locks are granted: a Save of the same shard under the same
// epoch can commit in between, appending the very Seqs this one is about
// to append and then deleting them again, so the snapshot check passes
// and no stored row collides; the upsert's check catches it, and
// saveJournal runs the statement once more, with a snapshot that shows
// the other Save. The deletes read head too: a batch with deletes runs
// with checkJournals at once.
//
// The check of creations (dup) and the deletes (del) are left out of the
// statement when v says the batch has none: each costs PostgreSQL
// planner and executor work on every Save, whether or not it has rows to
// look at, and many Saves need neither (see saveVariant).
//
// $1, $2: one (shard, epoch) per shard of the batch.
// $3..$10: the records, sorted by (kind, id), each with the Seq of its
// first and last new event (0 without) and its DeleteEventsBefore.
// $11..$13, $16: the event rows to insert, by record (an ordinal into
// $3..$10): each row's first Seq, data and number of events, less the
// events the record deletes at once.
// $14, $15: the records' due times and whether each is a creation
// (Record.Create), in the order of $3..$10.
func journalSaveSQL(fences, entities, events string, v saveVariant) string {
	dup, notDup, dupCols, dupJoin := dupParts(v, `	SELECT DISTINCT ON (r.shard) r.shard, r.kind, r.id FROM r
	CROSS JOIN LATERAL (SELECT 1 FROM `+entities+` AS x WHERE x.kind = r.kind AND x.id = r.id LIMIT 1) AS e
	WHERE r.isnew
	ORDER BY r.shard, r.ord`)
	// head and bad, the check against the snapshot, and the report of
	// the record that fails it. The deletes need head too.
	head, notBad, badCols, badJoin := "", "", "NULL::text, NULL::text, NULL::bigint, NULL::bigint", ""
	if v&(checkJournals|withDeletes) != 0 {
		head = `
), head AS MATERIALIZED (
	SELECT r.ord, r.shard, r.kind, r.id, r.first, r.last, r.del,
		coalesce((SELECT x.jend FROM ` + entities + ` x WHERE x.kind = r.kind AND x.id = r.id), 0) AS stored
	FROM r WHERE r.first > 0 OR r.del > 0
), bad AS MATERIALIZED (
	SELECT DISTINCT ON (shard) shard, kind, id, first, stored FROM head
	WHERE first > 0 AND first <> stored + 1
	ORDER BY shard, ord`
		notBad = " AND req.shard NOT IN (SELECT shard FROM bad)"
		badCols, badJoin = "bad.kind, bad.id, bad.first, bad.stored", " LEFT JOIN bad ON bad.shard = req.shard"
	}
	del, delCount := "", "0::bigint"
	if v&withDeletes != 0 {
		// The bound keeps the journal's last event; rows inserted by this
		// statement are not visible here, and hold no event below it.
		bound := "least(head.del, CASE WHEN head.first > 0 THEN head.last ELSE head.stored END)"
		del = `
), del AS (
	DELETE FROM ` + events + ` AS e USING head
	WHERE head.del > 0 AND head.shard IN (SELECT shard FROM ok)
		AND e.kind = head.kind AND e.id = head.id
		AND e.seq < ` + bound + ` AND e.seq + e.n <= ` + bound + `
	RETURNING 1
), cut AS (
	UPDATE ` + events + ` AS e SET skip = (` + bound + ` - e.seq)::integer
	FROM head
	WHERE head.del > 0 AND head.shard IN (SELECT shard FROM ok)
		AND e.kind = head.kind AND e.id = head.id
		AND e.seq < ` + bound + ` AND e.seq + e.n > ` + bound + ` AND e.seq + e.skip < ` + bound + `
	RETURNING 1`
		delCount = "(SELECT count(*) FROM del) + (SELECT count(*) FROM cut)"
	}
	return `WITH req AS (
	SELECT * FROM unnest($1::bigint[], $2::bigint[]) AS r(shard, epoch)
), f AS MATERIALIZED (
	SELECT shard, epoch, jpos FROM ` + fences + ` WHERE shard = ANY($1::bigint[]) ORDER BY shard FOR NO KEY UPDATE
), r AS MATERIALIZED (
	SELECT * FROM unnest($3::text[], $4::text[], $5::bigint[], $6::bigint[], $7::bytea[], $8::bigint[], $9::bigint[], $10::bigint[], $14::bigint[], $15::bool[])
		WITH ORDINALITY AS r(kind, id, shard, epoch, data, first, last, del, due, isnew, ord)` + dup + head + `
), ok AS MATERIALIZED (
	SELECT req.shard, f.jpos FROM req JOIN f ON f.shard = req.shard AND f.epoch = req.epoch
	WHERE true` + notBad + notDup + `
), w AS (
	INSERT INTO ` + entities + ` AS e (kind, id, shard, epoch, data, due, jend)
	SELECT r.kind, r.id, r.shard, CASE WHEN r.first > 1 THEN -r.epoch ELSE r.epoch END, r.data, r.due, r.last FROM r
	WHERE r.shard IN (SELECT shard FROM ok)
	ORDER BY r.ord
	ON CONFLICT (kind, id) DO UPDATE SET shard = excluded.shard, epoch = abs(excluded.epoch), data = excluded.data, due = excluded.due,
		jend = CASE
			WHEN excluded.jend = 0 THEN e.jend
			WHEN (e.kind, e.id, e.jend + 1) IN (SELECT kind, id, first FROM r) THEN excluded.jend
			ELSE -1 END
	RETURNING e.shard, e.epoch
), ev AS MATERIALIZED (
	SELECT r.kind, r.id, x.seq, r.shard, ok.jpos + row_number() OVER (PARTITION BY r.shard ORDER BY x.ord) AS pos, x.data, x.n
	FROM unnest($11::bigint[], $12::bigint[], $13::bytea[], $16::bigint[]) WITH ORDINALITY AS x(rec, seq, data, n, ord)
	JOIN r ON r.ord = x.rec
	JOIN ok ON ok.shard = r.shard
), ins AS (
	INSERT INTO ` + events + ` (kind, id, seq, shard, pos, data, n)
	SELECT kind, id, seq, shard, pos, data, n::integer FROM ev ORDER BY kind, id, seq
	RETURNING 1
), adv AS (
	UPDATE ` + fences + ` AS fe SET jpos = CASE WHEN fe.shard IN (SELECT shard FROM w WHERE epoch < 0) THEN -1 ELSE m.pos END
	FROM (SELECT shard, max(pos) AS pos FROM ev GROUP BY shard) m
	WHERE fe.shard = m.shard
	RETURNING 1` + del + `
)
SELECT req.shard, f.epoch, ` + badCols + `, ` + dupCols + `,
	(SELECT count(*) FROM w), (SELECT count(*) FROM ins), (SELECT count(*) FROM adv), ` + delCount + `
FROM req LEFT JOIN f ON f.shard = req.shard` + badJoin + dupJoin
}

// feedSQL reads the next event rows of a kind: for each shard (every
// shard written has a fence row), the first $4 after the shard's position
// in the offset ($2, $3; the row at that position too when the offset read
// it only in part, $5 > 0), then the first $4 of those by position. Within
// a shard, positions follow commit order and one statement's snapshot
// holds a prefix of them (see ReadJournal), so a page never passes over an
// event that commits later.
func feedSQL(fences, events string) string {
	return `WITH o AS (
	SELECT * FROM unnest($2::bigint[], $3::bigint[], $5::bigint[]) AS o(shard, pos, seq)
), top AS (
	SELECT t.shard, t.pos FROM ` + fences + ` f
	LEFT JOIN o ON o.shard = f.shard
	CROSS JOIN LATERAL (
		SELECT e.shard, e.pos FROM ` + events + ` e
		WHERE e.kind = $1 AND e.shard = f.shard
			AND e.pos > coalesce(o.pos, 0) - CASE WHEN o.seq > 0 THEN 1 ELSE 0 END
		ORDER BY e.pos LIMIT $4
	) t
	ORDER BY t.pos, t.shard LIMIT $4
)
SELECT e.shard, e.pos, e.id, e.seq, e.n, e.skip, e.data
FROM top JOIN ` + events + ` e ON e.kind = $1 AND e.shard = top.shard AND e.pos = top.pos
ORDER BY top.pos, top.shard`
}

// saveJournal is Save for a batch with events or deletes: one statement,
// retried once if it failed on a Seq written concurrently (see below).
func (s *Store) saveJournal(ctx context.Context, recs []persistence.Record, outcome map[uint32]error) (map[uint32]error, error) {
	b := newJournalBatch(recs)
	err := s.runJournal(ctx, b, outcome)
	if isStaleJournal(err) && b.variant&checkJournals == 0 {
		// A journal did not continue where the record's events start,
		// or another Save appended to it concurrently: the statement
		// without the snapshot check failed as a whole, writing nothing.
		// Run it with the check, which refuses the shards whose journals
		// do not continue (SequenceError) and writes the rest.
		b.variant |= checkJournals
		err = s.runJournal(ctx, b, outcome)
	}
	if isStaleJournal(err) {
		// Another Save under the same epoch appended to one of these
		// journals after this statement's snapshot was taken: the
		// statement read where the journal ended from its snapshot, and
		// failed, writing nothing, on the primary key (the other Save's
		// row starts at the same Seq) or on the entity row's jend. Run it
		// again: its new snapshot shows the other Save, so the check
		// refuses the shard with a SequenceError, and the rest of the
		// batch goes through.
		err = s.runJournal(ctx, b, outcome)
	}
	if err != nil {
		for sh := range b.want {
			outcome[sh] = fmt.Errorf("pgstore: shard %d: %w: %w", sh, ErrOutcomeUnknown, err)
		}
	}
	return outcome, nil
}

// journalContinues names the constraint on entities.jend that a stale
// journal check trips (journalSaveSQL).
const journalContinues = "entities_journal_continues"

// journalStarts names the constraint on fences.jpos that a journal
// starting after 1 in a row the statement inserts trips (journalSaveSQL).
const journalStarts = "fences_jpos_check"

// isStaleJournal reports whether err is a journal Save's failure on a
// journal its records do not continue: one that starts after 1, or does
// not go on where the stored journal ends, or was appended to after the
// statement's snapshot (see journalSaveSQL). The statement wrote nothing.
func isStaleJournal(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	return pe.Code == "23505" && pe.ConstraintName == "events_pkey" ||
		pe.Code == "23514" && (pe.ConstraintName == journalContinues || pe.ConstraintName == journalStarts)
}

// journalBatch is a batch as journalSaveSQL takes it.
type journalBatch struct {
	recs                 []persistence.Record // as given
	order                []int                // recs indexes in (kind, id) order
	shards, epochs       []int64
	kinds, ids           []string
	recShards, recEpochs []int64
	datas                [][]byte
	firsts, lasts, dels  []int64
	dues                 []int64
	creates              []bool
	evRecs, evSeqs, evNs []int64 // per row: record (1-based), first Seq, events
	evDatas              [][]byte
	variant              saveVariant
	want                 map[uint32]int64 // epoch per shard
	evCount              map[uint32]int64 // rows inserted per shard, if written
}

func newJournalBatch(recs []persistence.Record) *journalBatch {
	n := len(recs)
	b := &journalBatch{
		recs: recs, order: make([]int, n),
		kinds: make([]string, n), ids: make([]string, n), recShards: make([]int64, n), recEpochs: make([]int64, n),
		datas: make([][]byte, n), firsts: make([]int64, n), lasts: make([]int64, n), dels: make([]int64, n), dues: make([]int64, n),
		creates: make([]bool, n),
		want:    make(map[uint32]int64), evCount: make(map[uint32]int64),
	}
	for i := range b.order {
		b.order[i] = i
	}
	b.variant = variantOf(recs)
	if b.variant&withDeletes != 0 {
		b.variant |= checkJournals // the deletes read head: the check costs nothing more
	}
	// Key order, as the plain statement, so that concurrent batches lock
	// entity rows in the same order.
	slices.SortFunc(b.order, func(x, y int) int {
		if c := strings.Compare(recs[x].Kind, recs[y].Kind); c != 0 {
			return c
		}
		return strings.Compare(recs[x].ID, recs[y].ID)
	})
	for j, i := range b.order {
		r := &recs[i]
		b.kinds[j], b.ids[j], b.recShards[j], b.recEpochs[j], b.datas[j] = r.Kind, r.ID, int64(r.Shard), r.Epoch, r.Data
		b.dels[j], b.dues[j], b.creates[j] = int64(r.DeleteEventsBefore), r.Due, r.Create
		if _, ok := b.want[r.Shard]; !ok {
			b.want[r.Shard] = r.Epoch
			b.shards = append(b.shards, int64(r.Shard))
			b.epochs = append(b.epochs, r.Epoch)
		}
		if len(r.Events) == 0 {
			continue
		}
		b.firsts[j], b.lasts[j] = int64(r.Events[0].Seq), int64(r.Events[len(r.Events)-1].Seq)
		below := persistence.DeleteBound(r, 0) // events below it are deleted as they are appended
		evs := r.Events
		for len(evs) > 0 && evs[0].Seq < below {
			evs = evs[1:]
		}
		data, n := packEvents(evs) // the last event is never below
		b.evRecs = append(b.evRecs, int64(j+1))
		b.evSeqs = append(b.evSeqs, int64(evs[0].Seq))
		b.evNs = append(b.evNs, int64(n))
		b.evDatas = append(b.evDatas, data)
		b.evCount[r.Shard]++
	}
	return b
}

// runJournal runs the batch's variant of journalSaveSQL once, filling
// outcome; an error means the statement failed and outcome is to be
// ignored.
func (s *Store) runJournal(ctx context.Context, b *journalBatch, outcome map[uint32]error) error {
	p := getParams()
	defer p.release()
	p.int8s(b.shards)
	p.int8s(b.epochs)
	p.texts(b.kinds)
	p.texts(b.ids)
	p.int8s(b.recShards)
	p.int8s(b.recEpochs)
	p.byteas(b.datas)
	p.int8s(b.firsts)
	p.int8s(b.lasts)
	p.int8s(b.dels)
	p.int8s(b.evRecs)
	p.int8s(b.evSeqs)
	p.byteas(b.evDatas)
	p.int8s(b.dues)
	p.bools(b.creates)
	p.int8s(b.evNs)
	type result struct {
		fence               *int64
		badKind, badID      *string
		badFirst, badStored *int64
		dupKind, dupID      *string
	}
	got := make(map[uint32]result, len(b.want))
	var written, inserted, advanced, deleted *int64
	err := s.exec(ctx, s.journalSaveSQL[b.variant], p, func(row [][]byte) error {
		var (
			shard *int64
			res   result
		)
		if err := cols(row, &shard, &res.fence, &res.badKind, &res.badID, &res.badFirst, &res.badStored, &res.dupKind, &res.dupID,
			&written, &inserted, &advanced, &deleted); err != nil {
			return err
		}
		if shard == nil {
			return errors.New("row without a shard")
		}
		got[uint32(*shard)] = res
		return nil
	})
	if err != nil {
		return err
	}
	if written == nil || inserted == nil || advanced == nil {
		return errors.New("no counts in the result")
	}
	var wantWritten, wantInserted, wantAdvanced int64
	for sh, epoch := range b.want {
		res, ok := got[sh]
		switch {
		case !ok:
			return fmt.Errorf("shard %d missing from the result", sh)
		case res.fence == nil:
			outcome[sh] = &persistence.FencedError{Shard: sh, Have: epoch}
		case *res.fence != epoch:
			outcome[sh] = &persistence.FencedError{Shard: sh, Have: epoch, Want: *res.fence}
		case res.badKind != nil:
			outcome[sh] = &persistence.SequenceError{Shard: sh, Kind: *res.badKind, ID: *res.badID,
				First: uint64(*res.badFirst), Last: uint64(*res.badStored)}
		case res.dupKind != nil:
			outcome[sh] = &persistence.ExistsError{Shard: sh, Kind: *res.dupKind, ID: *res.dupID}
		default:
			outcome[sh] = nil
			wantInserted += b.evCount[sh]
			if b.evCount[sh] > 0 {
				wantAdvanced++
			}
		}
	}
	for _, r := range b.recs {
		if outcome[r.Shard] == nil {
			wantWritten++
		}
	}
	// The statement wrote exactly the records and event rows of the shards
	// it reports as written; anything else means the result cannot be trusted.
	if *written != wantWritten || *inserted != wantInserted || *advanced != wantAdvanced {
		return fmt.Errorf("statement wrote %d records, %d event rows, %d positions; expected %d, %d, %d",
			*written, *inserted, *advanced, wantWritten, wantInserted, wantAdvanced)
	}
	return nil
}

// ReadEvents implements persistence.Journal with one indexed range read:
// the row holding from, and the rows after it.
func (s *Store) ReadEvents(ctx context.Context, kind, id string, from uint64, limit int) ([]persistence.Event, error) {
	if err := persistence.ValidateRead(kind, id, limit); err != nil {
		return nil, err
	}
	if s.closed.Load() {
		return nil, persistence.ErrClosed
	}
	if from > persistence.MaxSeq {
		return nil, nil
	}
	// Every row read holds at least one event from from on: limit rows
	// hold limit events, or all there are.
	rows, err := s.pool.Query(ctx, s.readEventsSQL, kind, id, int64(from), limit)
	if err != nil {
		return nil, fmt.Errorf("pgstore: read events of %s/%s: %w", kind, id, err)
	}
	defer rows.Close()
	var out []persistence.Event
	for rows.Next() && len(out) < limit {
		var r eventRow
		if err := rows.Scan(&r.seq, &r.n, &r.skip, &r.data); err != nil {
			return nil, fmt.Errorf("pgstore: read events of %s/%s: %w", kind, id, err)
		}
		err := r.events(from, func(e persistence.Event) bool {
			out = append(out, e)
			return len(out) < limit
		})
		if err != nil {
			return nil, fmt.Errorf("pgstore: read events of %s/%s: %w", kind, id, err)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgstore: read events of %s/%s: %w", kind, id, err)
	}
	return out, nil
}

// LastSeq implements persistence.Journal (a backward step on the primary
// key's index).
func (s *Store) LastSeq(ctx context.Context, kind, id string) (uint64, error) {
	if err := persistence.ValidateKey(kind, id); err != nil {
		return 0, err
	}
	if s.closed.Load() {
		return 0, persistence.ErrClosed
	}
	var last int64
	if err := s.pool.QueryRow(ctx, s.lastSeqSQL, kind, id).Scan(&last); err != nil {
		return 0, fmt.Errorf("pgstore: last seq of %s/%s: %w", kind, id, err)
	}
	return uint64(last), nil
}

// ReadJournal implements persistence.Journal with one statement.
//
// Each events row carries a position in its shard: Saves that touch a
// shard's journals hold the shard's fence row locked from before they
// number their rows (from the row's jpos) until they commit, so positions
// follow the order those Saves commit in, and the rows of one shard that a
// snapshot shows are exactly those up to some position. An Offset is the
// position read up to in each shard (a vector), so a page that ends with
// events of one shard never passes over an event of another that commits
// later (PostgreSQL sequences, drawn before commit, would). A page that
// ends inside a row (limit) records the Seq of the row's last event read,
// and the next call goes on from there. The cost of a call is one index
// probe per shard with a fence row.
func (s *Store) ReadJournal(ctx context.Context, kind string, after persistence.Offset, limit int) ([]persistence.JournalEntry, persistence.Offset, error) {
	if err := persistence.ValidateFeed(kind, limit); err != nil {
		return nil, after, err
	}
	pos, err := decodeOffset(after)
	if err != nil {
		return nil, after, err
	}
	if s.closed.Load() {
		return nil, after, persistence.ErrClosed
	}
	shards := make([]int64, len(pos))
	at := make([]int64, len(pos))
	seqs := make([]int64, len(pos))
	partial := make(map[uint32]shardPos) // rows read in part, by shard
	for i, p := range pos {
		shards[i], at[i], seqs[i] = int64(p.shard), int64(p.pos), int64(p.seq)
		if p.seq > 0 {
			partial[p.shard] = p
		}
	}
	// Every row holds an event to return (a row read in part, one after
	// the part read): limit rows hold limit events, or all there are.
	rows, err := s.pool.Query(ctx, s.feedSQL, kind, int64s(shards), int64s(at), limit, int64s(seqs))
	if err != nil {
		return nil, after, fmt.Errorf("pgstore: read the journal of %s: %w", kind, err)
	}
	defer rows.Close()
	var out []persistence.JournalEntry
	moved := make(map[uint32]shardPos)
	for rows.Next() && len(out) < limit {
		var (
			shard, p int64
			id       string
			r        eventRow
		)
		if err := rows.Scan(&shard, &p, &id, &r.seq, &r.n, &r.skip, &r.data); err != nil {
			return nil, after, fmt.Errorf("pgstore: read the journal of %s: %w", kind, err)
		}
		var from uint64 // the events of the row not read yet
		if q, ok := partial[uint32(shard)]; ok && q.pos == uint64(p) {
			from = q.seq + 1
		}
		read := shardPos{shard: uint32(shard), pos: uint64(p)} // the whole row, unless limit cuts it
		err := r.events(from, func(e persistence.Event) bool {
			if len(out) == limit {
				return false
			}
			out = append(out, persistence.JournalEntry{Kind: kind, ID: id, Event: e})
			if len(out) == limit && e.Seq < uint64(r.seq)+uint64(r.n)-1 {
				read.seq = e.Seq
			}
			return true
		})
		if err != nil {
			return nil, after, fmt.Errorf("pgstore: read the journal of %s: %w", kind, err)
		}
		moved[read.shard] = read
	}
	if err := rows.Err(); err != nil {
		return nil, after, fmt.Errorf("pgstore: read the journal of %s: %w", kind, err)
	}
	if len(out) == 0 {
		return nil, after, nil
	}
	for i := range pos {
		if p, ok := moved[pos[i].shard]; ok {
			pos[i] = p
			delete(moved, pos[i].shard)
		}
	}
	for _, p := range moved {
		pos = append(pos, p)
	}
	slices.SortFunc(pos, func(a, b shardPos) int { return cmp.Compare(a.shard, b.shard) })
	return out, encodeOffset(pos), nil
}

// shardPos is how far a reader has read one shard's events: every row up
// to position pos, or, when seq is not 0, the rows before pos and the
// events of row pos up to Seq seq.
type shardPos struct {
	shard uint32
	pos   uint64
	seq   uint64
}

// Offset tags: offsetTag when every row is read whole, partialTag when
// some are read in part (each shard then carries its seq too, 0 for
// whole).
const (
	offsetTag  = 'p'
	partialTag = 'q'
)

// encodeOffset encodes a vector of positions sorted by shard: a tag byte,
// then per shard the shard (as the first shard, then as the gap to the
// previous shard less one) and the position, and, after partialTag, the
// seq, as unsigned varints. No shards is the zero Offset.
func encodeOffset(pos []shardPos) persistence.Offset {
	if len(pos) == 0 {
		return ""
	}
	tag := byte(offsetTag)
	if slices.ContainsFunc(pos, func(p shardPos) bool { return p.seq > 0 }) {
		tag = partialTag
	}
	b := []byte{tag}
	for i, p := range pos {
		d := uint64(p.shard)
		if i > 0 {
			d -= uint64(pos[i-1].shard) + 1
		}
		b = binary.AppendUvarint(b, d)
		b = binary.AppendUvarint(b, p.pos)
		if tag == partialTag {
			b = binary.AppendUvarint(b, p.seq)
		}
	}
	return persistence.Offset(b)
}

// decodeOffset decodes what encodeOffset made; anything else is refused
// with persistence.ErrInvalid.
func decodeOffset(o persistence.Offset) ([]shardPos, error) {
	if o == "" {
		return nil, nil
	}
	bad := fmt.Errorf("%w: not a PostgreSQL journal offset", persistence.ErrInvalid)
	b := []byte(o)
	tag := b[0]
	if tag != offsetTag && tag != partialTag {
		return nil, bad
	}
	b = b[1:]
	var pos []shardPos
	inPart := false
	for len(b) > 0 {
		d, n := uvarint(b)
		if n <= 0 {
			return nil, bad
		}
		b = b[n:]
		p, n := uvarint(b)
		if n <= 0 || p == 0 || p > persistence.MaxSeq {
			return nil, bad
		}
		b = b[n:]
		var seq uint64
		if tag == partialTag {
			if seq, n = uvarint(b); n <= 0 || seq > persistence.MaxSeq {
				return nil, bad
			}
			b = b[n:]
			inPart = inPart || seq > 0
		}
		shard := d
		if len(pos) > 0 {
			shard += uint64(pos[len(pos)-1].shard) + 1
		}
		if shard > uint64(^uint32(0)) || shard < d {
			return nil, bad
		}
		pos = append(pos, shardPos{uint32(shard), p, seq})
	}
	if len(pos) == 0 || tag == partialTag && !inPart {
		return nil, bad
	}
	return pos, nil
}

// uvarint is binary.Uvarint refusing non-minimal encodings.
func uvarint(b []byte) (uint64, int) {
	v, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, -1
	}
	var tmp [binary.MaxVarintLen64]byte
	if binary.PutUvarint(tmp[:], v) != n {
		return 0, -1
	}
	return v, n
}
