// Package pgstore is a persistence.Store kept in PostgreSQL (pgx v5, a
// pgxpool.Pool).
//
// # Schema
//
// Open creates, in Config.Schema, three tables and records the schema
// version; it is idempotent, and concurrent Opens are serialised by a
// transaction-scoped advisory lock. A database whose schema version is
// newer than this code's SchemaVersion is refused with ErrSchemaTooNew.
//
//	schema_version (id = 1, version)
//	fences   (shard bigint primary key, epoch bigint > 0)
//	entities (kind text, id text, shard bigint, epoch bigint, data bytea,
//	          primary key (kind, id))
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
// # Limits
//
// Each column of a batch travels as one array parameter, and PostgreSQL
// caps one value at 1 GB: keep batches far below that (the runtime's write
// batcher bounds their bytes). A batch that exceeds it fails every shard
// with ErrOutcomeUnknown, having written nothing.
package pgstore
