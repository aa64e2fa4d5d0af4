// Package pgstore is a persistence.Store kept in PostgreSQL (pgx v5, a
// pgxpool.Pool).
//
// # Schema
//
// Open creates, in Config.Schema, four tables and records the schema
// version (upgrading version 1, which had no journal, version 2, which had
// no reminder index, version 3, which kept one event per row, version 4,
// which kept no journal's end on its entity's row, version 5, whose
// entities table filled its pages: the upgrade sets the fillfactor, which
// pages written from then on follow, and version 6, which compressed large
// values with the server's default and moved them out of the row above
// about 2 KiB: values written from then on follow the new settings, those
// written before read as they are); it is
// idempotent, and concurrent Opens are serialised by a transaction-scoped
// advisory lock. A database whose schema version is newer than this code's
// SchemaVersion is refused with ErrSchemaTooNew: upgrade every process
// that uses a schema before a newer one opens it (a process of version 3
// that is still running reads a row of several events as one; one of
// version 4 leaves jend behind, and every later Save of that journal by
// this code is refused with a SequenceError).
//
//	schema_version (id = 1, version)
//	fences   (shard bigint primary key, epoch bigint > 0, jpos bigint)
//	entities (kind text, id text, shard bigint, epoch bigint, data bytea,
//	          due bigint, jend bigint, primary key (kind, id),
//	          partial index entities_due (shard, due) where due > 0;
//	          fillfactor 75, so that updates stay on their row's page)
//	events   (kind text, id text, seq bigint, shard bigint, pos bigint,
//	          data bytea, n integer, skip integer,
//	          primary key (kind, id, seq),
//	          unique index events_feed (kind, shard, pos))
//
// Both tables keep a data value in its row up to 4 KiB once compressed
// (toast_tuple_target 4096; PostgreSQL's default moves values out of the
// row, into the table's TOAST table, above about 2 KiB), and compress new
// values with lz4 where the server has it (PostgreSQL 14 and later, built
// with lz4; otherwise with the server's default, pglz). The large record
// a busy entity rewrites is its dedup record, its whole dedup window
// (about 9.5 KiB at the default 128 replies, 2.3 KiB compressed): kept in
// the row and compressed with lz4, its write costs PostgreSQL a fraction
// of the CPU (BenchmarkLargeRecords).
//
// # Fencing
//
// Fence is one upward-only upsert of the shard's fence row (INSERT ... ON
// CONFLICT DO UPDATE ... WHERE fences.epoch <= excluded.epoch).
//
// Save is one SQL statement, so one round trip (once pgx has prepared and
// cached the statement on the connection, which its first use there costs
// another) and one implicit transaction for the whole batch. It locks the fence rows of the batch's shards FOR
// SHARE, keeps the shards whose locked fence equals their epoch, upserts
// those shards' records (arrays passed as parameters, expanded with
// unnest), and returns every shard's locked fence. Under READ COMMITTED the
// lock makes the check and the write atomic against Fence: a Fence that
// started first has committed before the lock is granted, and the locking
// read then sees the new epoch (PostgreSQL re-reads a row updated
// concurrently before locking it); a Fence that comes later waits for the
// lock until the Save has committed. A shard without a fence row is never
// written. The statement is atomic, so a lost connection or a canceled
// context leaves every shard of the batch either fully written or not at
// all; Save reports those shards with an error matching ErrOutcomeUnknown.
//
// The reminder index (persistence.ReminderIndex) is the due column of the
// records' rows, written by the same statement, and the partial index
// entities_due over it: Store.Due is one indexed query, and the index can
// never disagree with a record (Record.PrevDue is not needed).
//
// Each statement comes in variants, chosen per batch, that leave out what
// the batch does not need: the check of records written as new
// (Record.Create) and the deletes of events (Record.DeleteEventsBefore).
// A part with nothing to do still costs PostgreSQL's executor its setup on
// every Save, and many Saves create nothing, or delete nothing. pgx
// prepares each variant once per connection.
//
// # Journals
//
// A batch with events or deletes (persistence.Journal) is saved by another
// single statement, in one round trip too; batches without keep the
// statement above, unchanged. It locks the batch's fence rows FOR NO KEY
// UPDATE instead of FOR SHARE, reads where each journal appended to ends,
// and writes a shard only when its fence matches and every record's first
// event continues its journal, reporting the first record that does not
// as a *persistence.SequenceError. A record's new events go into one row
// (seq: the first one's Seq; n: how many; data: each event's Data behind
// its length), so a Save writes a row and two index entries per record,
// not per event; rows of schema version 3 hold one event each, and are
// read alike. The statement numbers each shard's new rows from the fence
// row's jpos on (pos) and moves jpos past them, and deletes what
// DeleteEventsBefore asks, keeping each journal's last event: rows below
// the bound go, and a row the bound cuts keeps its place with its leading
// events marked deleted (skip), which reads pass over. The entity's row
// keeps where its journal ends (jend), and the upsert checks each
// record's first event against it under the row's lock, on the row's
// latest version (a journal that a record's insert starts must start at
// 1). A record that does not continue its journal fails the whole
// statement, writing nothing: that is a fault, so Save then runs the
// statement again with a check that reads each journal's end from the
// statement's snapshot first and refuses only the shards whose journals
// do not continue, with a SequenceError, writing the rest. Saves without
// faults skip that read (about a tenth of the server's CPU for a Save of
// 16 appends). The snapshot is taken before the locks are granted: if
// another Save under the same epoch appended to the same journal after
// it was taken, the insert fails on the primary key (both rows start where
// the snapshot's journal ended), or the upsert's check fails (that Save
// may also have deleted the rows it appended); Save runs the statement
// once more, whose check then refuses the shard.
//
// The lock makes Saves that touch one shard's journals commit one at a
// time, in the order they number their rows: within a shard, pos is
// commit order, and a snapshot holds every row of the shard up to some
// pos and none after. An Offset of ReadJournal is the pos read up to in
// each shard (with the Seq read up to, when a page ends inside a row), and
// a call takes, in one statement, the next rows of every shard (an index
// probe per fence row) and the first of them by pos. So no
// event is passed over when Saves of different shards commit out of order,
// as they would be with one sequence for every event (its values are drawn
// before commit). The Offset grows with the number of shards that have
// events of the kind (a few bytes each).
//
// # TLS and credentials
//
// Config.URL is parsed by pgx, which honours libpq's parameters. In
// production use TLS that verifies the server:
//
//	postgres://ordo@db.internal:5432/ordo?sslmode=verify-full&sslrootcert=/etc/ordo/pg-ca.pem
//
// sslmode=verify-full checks the server's certificate against sslrootcert
// and its name against the host; verify-ca skips the name; require
// encrypts without verifying (open to a man in the middle); disable is for
// a server on loopback. sslcert and sslkey present a client certificate.
// The password may sit in the URL or come from PGPASSWORD or a
// ~/.pgpass file, which pgx reads too; keep the URL itself out of command
// lines and logs (the bank's node takes it from ORDO_PG_URL). Errors from
// Open name the user, database and host, never the password.
//
// # The server process's heap
//
// A Save is one statement whose executor (its sorts, hash tables and
// materialized CTEs) needs up to about a megabyte, and frees it when the
// statement ends. A PostgreSQL server process on glibc gives free memory
// at the top of its heap back to the kernel past a threshold of 128 KiB,
// and faults it in again, page by page, for the next statement: with one
// client, about 90 page faults per bank transfer and half the CPU of the
// processes serving the Saves. So each new connection first has its
// server process allocate and free one block of Config.BackendHeap bytes
// (default 4 MiB), which raises that process's thresholds (glibc's
// dynamic mmap threshold, mallopt(3)): from then on it keeps up to twice
// that of free heap. It costs one statement per connection and, per
// server process, up to 8 MiB of memory kept rather than returned. A
// negative BackendHeap skips it.
//
// # One plan per statement
//
// The same first round trip sets the connection's plan_cache_mode to
// force_generic_plan: each prepared statement keeps the plan made for its
// first execution. By default PostgreSQL plans a statement's first five
// executions for their arguments and then keeps one plan only if it
// estimates it no dearer; for a connection whose first Saves carry a
// record or two it kept planning every Save, which doubled the server's
// CPU for a journal Save of one record (BenchmarkSaveShapes). The store's
// statements read by key or by index range whatever their arguments;
// their plans made on empty tables are tested to do so. Behind a pooler
// that hands one client several server processes (PgBouncer in
// transaction mode), the setting reaches only the processes the
// connection's first round trip ran on.
//
// # Limits
//
// Each column of a batch travels as one array parameter, and PostgreSQL
// caps one value at 1 GB: keep batches far below that (the runtime's write
// batcher bounds their bytes). A batch that exceeds it fails every shard
// with ErrOutcomeUnknown, having written nothing.
package pgstore
