package pgstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordo-actors/ordo/persistence"
)

// SchemaVersion is the version of the tables this code creates and uses.
const SchemaVersion = 7

// entityFill is the entities table's fillfactor: the percentage of a page
// that inserts fill, leaving the rest for newer versions of its rows. An
// update whose new version fits on the row's page, and changes no indexed
// column (the key, the shard or due time), is a heap-only (HOT) update:
// no index entry, a smaller WAL record, and the old version pruned within
// the page. A record is written many times over its life (a saga's start
// and outcome; an account's every debit and credit), so the room is worth
// a quarter of the table's size.
const entityFill = 75

// largeTarget is the entities' and events' toast_tuple_target: a row
// larger than it has its data compressed, and moved out of the row (to
// the table's TOAST table) only when it is larger still once compressed.
// PostgreSQL's default, about 2 KiB, moves out the one large
// record a busy entity rewrites often: its dedup record, the whole dedup
// window (about 9.5 KiB at the default 128 replies, about 2.3 KiB
// compressed), rewritten every 16 writes of the entity. In the row, its
// write saves the TOAST table's insert, index entry and deletion of the
// value it replaces.
const largeTarget = 4096

// DefaultSchema is the default of Config.Schema.
const DefaultSchema = "ordo"

var (
	// ErrSchemaTooNew is returned by Open when the database holds a schema
	// version newer than SchemaVersion.
	ErrSchemaTooNew = errors.New("pgstore: database schema is newer than this code")
	// ErrOutcomeUnknown is wrapped, per shard, by Save outcomes of a
	// statement that failed in transport or was canceled: the shard's
	// records may or may not be durable, but never partly.
	ErrOutcomeUnknown = errors.New("pgstore: save outcome unknown")
)

// advisoryClass is the first key of the advisory lock taken while
// migrating ("ordo" in ASCII); the second is a hash of the schema name.
const advisoryClass = 0x6f72646f

// Config configures Open.
type Config struct {
	// URL is the PostgreSQL connection string (required), e.g.
	// postgres://user:pass@host:5432/db?sslmode=verify-full&sslrootcert=/etc/ordo/pg-ca.pem.
	// pgx honours libpq's TLS parameters (sslmode, sslrootcert, sslcert,
	// sslkey, sslpassword; see the package doc) and pool settings
	// (pool_max_conns, ...). It holds the password: read it from a file or
	// the environment, and never print it (Open's errors do not).
	URL string
	// Schema is the schema holding the store's tables; it is created when
	// missing. Default DefaultSchema.
	Schema string
	// MaxConns bounds the pool's connections; 0 keeps pgxpool's default
	// (or the URL's pool_max_conns).
	MaxConns int32
	// BackendHeap is the size of one block that each new connection has
	// its server process allocate and free, in the round trip that
	// readies it before the pool hands it out (see prepareConn); 0 means
	// DefaultBackendHeap, a negative value skips the statement. At most
	// MaxBackendHeap.
	BackendHeap int
}

// DefaultBackendHeap is the default of Config.BackendHeap: a server
// process then keeps up to 8 MiB of free heap, several times what the
// bank's Saves were seen to take (its heap grew by 1.1 MB for a Save of
// two records with a creation); 1 MiB was enough for them too.
const DefaultBackendHeap = 4 << 20

// MaxBackendHeap bounds Config.BackendHeap: glibc raises its thresholds
// only for blocks up to 32 MiB (DEFAULT_MMAP_THRESHOLD_MAX on 64-bit
// systems), and the block holds the string and the headers of its
// allocators; a larger one would cost the allocation and gain nothing.
const MaxBackendHeap = 16 << 20

// DefaultConfig returns the defaults; URL still has to be set.
func DefaultConfig() Config { return Config{Schema: DefaultSchema} }

// Validate reports the first invalid setting; the error wraps
// persistence.ErrInvalidConfig.
func (c Config) Validate() error {
	if err := c.validate(); err != nil {
		return persistence.InvalidConfig(err)
	}
	return nil
}

// Validate reports whether c, with defaults applied, is usable.
func (c Config) validate() error {
	switch {
	case c.URL == "":
		return errors.New("pgstore: Config.URL is required")
	case c.MaxConns < 0:
		return fmt.Errorf("pgstore: MaxConns %d is negative", c.MaxConns)
	case c.BackendHeap > MaxBackendHeap:
		return fmt.Errorf("pgstore: BackendHeap %d is over MaxBackendHeap (%d)", c.BackendHeap, MaxBackendHeap)
	case strings.ContainsRune(c.Schema, 0):
		return errors.New("pgstore: Schema contains a NUL byte")
	case len(c.Schema) > 63:
		return fmt.Errorf("pgstore: Schema %q is longer than 63 bytes", c.Schema)
	}
	return nil
}

// Store is a persistence.Store over a PostgreSQL connection pool it owns.
// It is safe for concurrent use by multiple goroutines.
type Store struct {
	pool   *pgxpool.Pool
	schema string
	closed atomic.Bool
	close  sync.Once

	// SQL with the schema's tables filled in.
	fenceSQL, fenceReadSQL, loadSQL, loadManySQL, dueSQL string
	readEventsSQL, lastSeqSQL, feedSQL                   string
	saveSQL, journalSaveSQL                              [saveVariants]string // by saveVariant
}

var _ persistence.Journal = (*Store)(nil)

// Open connects to the database, creates or upgrades the schema, and
// returns a Store. The Store owns its pool: Close closes it.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Schema == "" {
		cfg.Schema = DefaultSchema
	}
	pc, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("pgstore: parse URL: %w", err)
	}
	if cfg.MaxConns > 0 {
		pc.MaxConns = cfg.MaxConns
	}
	pc.AfterConnect = prepareConn(cmp.Or(cfg.BackendHeap, DefaultBackendHeap))
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("pgstore: connect: %w", err)
	}
	s := newStore(pool, cfg.Schema)
	if err := s.migrate(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return s, nil
}

// prepareConn returns a pgxpool AfterConnect that readies a new
// connection with one round trip: its statements are to keep one plan
// (genericPlans), and, when heap is positive, its server process is to
// keep its heap (warmBackendHeap).
func prepareConn(heap int) func(context.Context, *pgx.Conn) error {
	// No arguments: the simple protocol, which takes several statements
	// at once and prepares nothing.
	sql := genericPlans
	if heap > 0 {
		sql += "; " + warmBackendHeap(heap)
	}
	return func(ctx context.Context, c *pgx.Conn) error {
		if _, err := c.Exec(ctx, sql); err != nil {
			return fmt.Errorf("pgstore: prepare the connection: %w", err)
		}
		return nil
	}
}

// genericPlans has the connection's prepared statements keep the plan
// made for their first execution (the generic plan) rather than plan
// each execution with its arguments (a custom plan).
//
// By default PostgreSQL plans a prepared statement's first five
// executions with their arguments, then keeps the generic plan only if
// its estimated cost is no higher than the average of those custom
// plans. A Save's arrays are estimated at their real length in a custom
// plan and at ten elements in the generic one, so a connection whose
// first Saves carried a record or two finds the generic plan dearer and
// plans every later Save again: for the journal statement that doubled
// the server's CPU per Save (BenchmarkSaveShapes, append/records=1:
// 1.1-1.2 ms, 0.5-0.6 ms with generic plans), and whether it happened
// depended on each connection's first statements. Every statement of
// the store looks rows up by key or reads a range of an index, in plans
// that do not depend on the arguments' values (plan_test.go checks those
// of LoadMany and Save, made on empty tables).
const genericPlans = "SET plan_cache_mode = force_generic_plan"

// warmBackendHeap returns a statement that has the server process
// allocate and free one block of n bytes.
//
// A PostgreSQL server process allocates the memory of each statement's
// executor (its sorts, hash tables and materialized CTEs: up to about a
// megabyte for a Save) from its C library and frees it when the statement
// ends. glibc's malloc gives free memory at the top of the heap back to
// the kernel once it exceeds its trim threshold, 128 KiB at first, so a
// process whose statements each need more than that shrinks its heap
// after every one and grows it again on the next, and the kernel hands
// every page back zeroed, one page fault each. Measured with one client
// (bank bench --concurrency 1), this was half the CPU of the processes
// serving the Saves: about 90 page faults per transfer.
//
// glibc raises both thresholds when a block larger than its mmap
// threshold, and at most 32 MiB, is freed (mallopt(3), "dynamic mmap
// threshold"): the mmap threshold to the block's size, the trim threshold
// to twice that. One statement that builds and drops a string of n bytes
// frees such a block, and from then on the process keeps up to 2n of free
// heap instead of returning it. Other C libraries ignore it; a pooler that
// hands one client several server processes (PgBouncer in transaction
// mode) warms only those it happens to run it on.
func warmBackendHeap(n int) string {
	return "SELECT length(repeat('x', " + strconv.Itoa(n) + "))"
}

func newStore(pool *pgxpool.Pool, schema string) *Store {
	t := func(name string) string { return pgx.Identifier{schema, name}.Sanitize() }
	fences, entities, events := t("fences"), t("entities"), t("events")
	s := &Store{
		readEventsSQL: `SELECT seq, n, skip, data FROM ` + events + ` WHERE kind = $1 AND id = $2 AND seq >= coalesce(
	(SELECT max(seq) FROM ` + events + ` WHERE kind = $1 AND id = $2 AND seq <= $3), $3) ORDER BY seq LIMIT $4`,
		lastSeqSQL: `SELECT coalesce((SELECT seq + n - 1 FROM ` + events + ` WHERE kind = $1 AND id = $2
	ORDER BY seq DESC LIMIT 1), 0)`,
		feedSQL: feedSQL(fences, events),
		pool:    pool,
		schema:  schema,
		fenceSQL: `INSERT INTO ` + fences + ` AS f (shard, epoch) VALUES ($1, $2)
ON CONFLICT (shard) DO UPDATE SET epoch = excluded.epoch WHERE f.epoch <= excluded.epoch
RETURNING f.epoch`,
		fenceReadSQL: `SELECT epoch FROM ` + fences + ` WHERE shard = $1`,
		loadSQL:      `SELECT shard, epoch, data, due FROM ` + entities + ` WHERE kind = $1 AND id = $2`,
		loadManySQL:  loadManySQL(schema),
		dueSQL:       dueSQL(entities),
	}
	for v := range saveVariant(len(s.saveSQL)) {
		s.saveSQL[v] = saveSQL(fences, entities, v&^checkJournals) // the plain statement has no journals
		s.journalSaveSQL[v] = journalSaveSQL(fences, entities, events, v)
	}
	return s
}

// saveVariant says which optional parts a Save statement needs, as bits:
// the check of records written as new (Record.Create), the deletes of
// events (Record.DeleteEventsBefore), and, in the journal statement, the
// check of each journal's continuation against the statement's snapshot
// (checkJournals: a Save runs without it first, see saveJournal). Each
// combination is a statement of its own (pgx prepares each once per
// connection), indexed by the variant.
type saveVariant uint8

const (
	withCreates saveVariant = 1 << iota
	withDeletes
	checkJournals
	saveVariants // the number of variants
)

// variantOf returns the variant a batch needs.
func variantOf(recs []persistence.Record) saveVariant {
	var v saveVariant
	for i := range recs {
		if recs[i].Create {
			v |= withCreates
		}
		if recs[i].DeleteEventsBefore > 0 {
			v |= withDeletes
		}
	}
	return v
}

// dupParts returns the parts of a Save statement that check creations,
// given the statement's dup CTE: the CTE itself, the condition that
// refuses a shard for a creation, the columns reporting it, and their
// join. Without withCreates in v they are empty, and the columns NULL.
func dupParts(v saveVariant, cte string) (dup, notDup, cols, join string) {
	if v&withCreates == 0 {
		return "", "", "NULL::text, NULL::text", ""
	}
	return "\n), dup AS MATERIALIZED (\n" + cte, " AND req.shard NOT IN (SELECT shard FROM dup)",
		"dup.kind, dup.id", " LEFT JOIN dup ON dup.shard = req.shard"
}

// saveSQL is Save for batches without events: one statement that checks
// the batch's fences (FOR SHARE), and, when v has withCreates, that no record
// written as new is stored (dup), then upserts the records of the shards
// that pass.
//
// $1, $2: one (shard, epoch) per shard of the batch.
// $3..$7, $8, $9: the records, sorted by (kind, id), their due times and
// whether each is a creation (Record.Create).
func saveSQL(fences, entities string, v saveVariant) string {
	dup, notDup, dupCols, dupJoin := dupParts(v, `	SELECT DISTINCT ON (c.shard) c.shard, c.kind, c.id
	FROM unnest($3::text[], $4::text[], $5::bigint[], $9::bool[]) AS c(kind, id, shard, isnew)
	CROSS JOIN LATERAL (SELECT 1 FROM `+entities+` AS x WHERE x.kind = c.kind AND x.id = c.id LIMIT 1) AS e
	WHERE c.isnew
	ORDER BY c.shard, c.kind, c.id`)
	// Without the check, $9 is still named, so that every variant takes
	// the same arguments.
	return `WITH req AS (
	SELECT * FROM unnest($1::bigint[], $2::bigint[]) AS r(shard, epoch)
), f AS MATERIALIZED (
	SELECT shard, epoch FROM ` + fences + ` WHERE shard = ANY($1::bigint[]) ORDER BY shard FOR SHARE` + dup + `
), ok AS (
	SELECT req.shard FROM req JOIN f ON f.shard = req.shard AND f.epoch = req.epoch
	WHERE true` + notDup + `
), w AS (
	INSERT INTO ` + entities + ` AS e (kind, id, shard, epoch, data, due)
	SELECT r.kind, r.id, r.shard, r.epoch, r.data, r.due
	FROM unnest($3::text[], $4::text[], $5::bigint[], $6::bigint[], $7::bytea[], $8::bigint[], $9::bool[])
		WITH ORDINALITY AS r(kind, id, shard, epoch, data, due, isnew, ord)
	WHERE r.shard IN (SELECT shard FROM ok)
	ORDER BY r.ord
	ON CONFLICT (kind, id) DO UPDATE SET shard = excluded.shard, epoch = excluded.epoch, data = excluded.data, due = excluded.due
	RETURNING 1
)
SELECT req.shard, f.epoch, ` + dupCols + `, (SELECT count(*) FROM w)
FROM req LEFT JOIN f ON f.shard = req.shard` + dupJoin
}

// migrations[v] upgrades the schema from version v to v+1. lz4 reports
// whether the server compresses with lz4 (see hasLZ4).
func migrations(schema string, lz4 bool) []string {
	t := func(name string) string { return pgx.Identifier{schema, name}.Sanitize() }
	return []string{
		`CREATE TABLE ` + t("fences") + ` (
	shard bigint PRIMARY KEY CHECK (shard >= 0 AND shard <= 4294967295),
	epoch bigint NOT NULL CHECK (epoch > 0)
);
CREATE TABLE ` + t("entities") + ` (
	kind  text   NOT NULL,
	id    text   NOT NULL,
	shard bigint NOT NULL,
	epoch bigint NOT NULL,
	data  bytea  NOT NULL,
	PRIMARY KEY (kind, id)
)`,
		`ALTER TABLE ` + t("fences") + ` ADD COLUMN jpos bigint NOT NULL DEFAULT 0 CHECK (jpos >= 0);
CREATE TABLE ` + t("events") + ` (
	kind  text   NOT NULL,
	id    text   NOT NULL,
	seq   bigint NOT NULL CHECK (seq > 0),
	shard bigint NOT NULL,
	pos   bigint NOT NULL CHECK (pos > 0),
	data  bytea  NOT NULL,
	PRIMARY KEY (kind, id, seq)
);
CREATE UNIQUE INDEX events_feed ON ` + t("events") + ` (kind, shard, pos)`,
		`ALTER TABLE ` + t("entities") + ` ADD COLUMN due bigint NOT NULL DEFAULT 0 CHECK (due >= 0);
CREATE INDEX entities_due ON ` + t("entities") + ` (shard, due) WHERE due > 0`,
		// Rows of several events (rows.go); a row of version 3 holds one.
		`ALTER TABLE ` + t("events") + ` ADD COLUMN n integer NOT NULL DEFAULT 1 CHECK (n >= 1),
	ADD COLUMN skip integer NOT NULL DEFAULT 0 CHECK (skip >= 0 AND skip < n)`,
		// Where each journal ends, on its entity's row (journalSaveSQL).
		`ALTER TABLE ` + t("entities") + ` ADD COLUMN jend bigint NOT NULL DEFAULT 0
	CONSTRAINT ` + journalContinues + ` CHECK (jend >= 0);
UPDATE ` + t("entities") + ` AS e SET jend = j.last
FROM (SELECT kind, id, max(seq + n - 1) AS last FROM ` + t("events") + ` GROUP BY kind, id) AS j
WHERE e.kind = j.kind AND e.id = j.id`,
		// Room on every page for newer versions of its rows (entityFill).
		`ALTER TABLE ` + t("entities") + ` SET (fillfactor = ` + strconv.Itoa(entityFill) + `)`,
		largeValues(t("entities"), lz4) + `;
` + largeValues(t("events"), lz4),
	}
}

// largeValues is the statement that keeps table's large data values in
// the row up to largeTarget (see there) and, when lz4 is true, compresses
// new ones with lz4, which takes a fraction of the CPU of pglz,
// PostgreSQL's default (with both, a Save that rewrites a dedup record
// costs the server about two thirds of the CPU: BenchmarkLargeRecords).
// Values written before keep their compression; both read alike.
func largeValues(table string, lz4 bool) string {
	stmt := `ALTER TABLE ` + table + ` SET (toast_tuple_target = ` + strconv.Itoa(largeTarget) + `)`
	if lz4 {
		stmt += `, ALTER COLUMN data SET COMPRESSION lz4`
	}
	return stmt
}

// hasLZ4 reports whether the server can compress values with lz4: only
// PostgreSQL 14 and later, built with it, list it among the values of
// default_toast_compression. A server without it compresses with its
// default (pglz unless configured otherwise), also after it gains lz4.
func hasLZ4(ctx context.Context, tx pgx.Tx) (bool, error) {
	var lz4 bool
	err := tx.QueryRow(ctx, `SELECT coalesce((SELECT 'lz4' = ANY(enumvals) FROM pg_settings WHERE name = 'default_toast_compression'), false)`).Scan(&lz4)
	return lz4, err
}

// migrate creates the schema or brings it to SchemaVersion, under an
// advisory lock so that concurrent Opens do it once.
func (s *Store) migrate(ctx context.Context) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("pgstore: migrate: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	schema := pgx.Identifier{s.schema}.Sanitize()
	versions := pgx.Identifier{s.schema, "schema_version"}.Sanitize()
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`, int32(advisoryClass), s.schema); err != nil {
		return fmt.Errorf("pgstore: migrate: lock: %w", err)
	}
	if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+schema); err != nil {
		return fmt.Errorf("pgstore: migrate: %w", err)
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+versions+
		` (id int PRIMARY KEY CHECK (id = 1), version int NOT NULL)`); err != nil {
		return fmt.Errorf("pgstore: migrate: %w", err)
	}
	var version int
	err = tx.QueryRow(ctx, `SELECT version FROM `+versions+` WHERE id = 1`).Scan(&version)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("pgstore: migrate: read version: %w", err)
	}
	if version > SchemaVersion {
		return fmt.Errorf("%w: schema %q is at version %d, this code knows up to %d",
			ErrSchemaTooNew, s.schema, version, SchemaVersion)
	}
	if version == SchemaVersion {
		return tx.Commit(ctx)
	}
	lz4, err := hasLZ4(ctx, tx)
	if err != nil {
		return fmt.Errorf("pgstore: migrate: %w", err)
	}
	for v, stmt := range migrations(s.schema, lz4)[version:] {
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("pgstore: migrate to version %d: %w", version+v+1, err)
		}
	}
	if _, err := tx.Exec(ctx, `INSERT INTO `+versions+` (id, version) VALUES (1, $1)
ON CONFLICT (id) DO UPDATE SET version = excluded.version`, SchemaVersion); err != nil {
		return fmt.Errorf("pgstore: migrate: record version: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("pgstore: migrate: commit: %w", err)
	}
	return nil
}

// Fence implements persistence.Store with one upward-only upsert.
func (s *Store) Fence(ctx context.Context, shard uint32, epoch int64) error {
	if err := persistence.ValidateEpoch(epoch); err != nil {
		return err
	}
	if s.closed.Load() {
		return persistence.ErrClosed
	}
	for {
		var got int64
		err := s.pool.QueryRow(ctx, s.fenceSQL, int64(shard), epoch).Scan(&got)
		if err == nil {
			return nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("pgstore: fence shard %d: %w", shard, err)
		}
		// A higher fence is recorded; read it for the error. Fences only
		// rise, so the value read is higher still.
		err = s.pool.QueryRow(ctx, s.fenceReadSQL, int64(shard)).Scan(&got)
		if err != nil {
			return fmt.Errorf("pgstore: fence shard %d: %w", shard, err)
		}
		if got > epoch {
			return &persistence.FencedError{Shard: shard, Have: epoch, Want: got}
		}
	}
}

// Load implements persistence.Store.
func (s *Store) Load(ctx context.Context, kind, id string) (persistence.Record, error) {
	if err := persistence.ValidateKey(kind, id); err != nil {
		return persistence.Record{}, err
	}
	if s.closed.Load() {
		return persistence.Record{}, persistence.ErrClosed
	}
	r := persistence.Record{Kind: kind, ID: id}
	var shard int64
	err := s.pool.QueryRow(ctx, s.loadSQL, kind, id).Scan(&shard, &r.Epoch, &r.Data, &r.Due)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return persistence.Record{}, fmt.Errorf("%w: %s/%s", persistence.ErrNotFound, kind, id)
	case err != nil:
		return persistence.Record{}, fmt.Errorf("pgstore: load %s/%s: %w", kind, id, err)
	}
	r.Shard = uint32(shard)
	if r.Data == nil {
		r.Data = []byte{}
	}
	return r, nil
}

// Save implements persistence.Store with one statement for the whole batch
// (see the package documentation).
func (s *Store) Save(ctx context.Context, recs []persistence.Record) (map[uint32]error, error) {
	if err := persistence.ValidateBatch(recs); err != nil {
		return nil, err
	}
	if s.closed.Load() {
		return nil, persistence.ErrClosed
	}
	outcome := make(map[uint32]error)
	if len(recs) == 0 {
		return outcome, nil
	}
	for i := range recs {
		if len(recs[i].Events) > 0 || recs[i].DeleteEventsBefore > 0 {
			return s.saveJournal(ctx, recs, outcome)
		}
	}
	// Records in key order (kept by the statement's ORDER BY), so that
	// concurrent batches lock entity rows in the same order and cannot
	// deadlock on them.
	order := make([]int, len(recs))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		if c := strings.Compare(recs[a].Kind, recs[b].Kind); c != 0 {
			return c
		}
		return strings.Compare(recs[a].ID, recs[b].ID)
	})
	var (
		shards, epochs       []int64
		kinds, ids           = make([]string, len(recs)), make([]string, len(recs))
		recShards, recEpochs = make([]int64, len(recs)), make([]int64, len(recs))
		datas                = make([][]byte, len(recs))
		dues                 = make([]int64, len(recs))
		creates              = make([]bool, len(recs))
		want                 = make(map[uint32]int64)
	)
	for j, i := range order {
		r := &recs[i]
		kinds[j], ids[j], recShards[j], recEpochs[j], datas[j] = r.Kind, r.ID, int64(r.Shard), r.Epoch, r.Data
		dues[j], creates[j] = r.Due, r.Create
		if _, ok := want[r.Shard]; !ok {
			want[r.Shard] = r.Epoch
			shards = append(shards, int64(r.Shard))
			epochs = append(epochs, r.Epoch)
		}
	}
	failAll := func(err error) (map[uint32]error, error) {
		for sh := range want {
			outcome[sh] = fmt.Errorf("pgstore: shard %d: %w: %w", sh, ErrOutcomeUnknown, err)
		}
		return outcome, nil
	}
	p := getParams()
	defer p.release()
	p.int8s(shards)
	p.int8s(epochs)
	p.texts(kinds)
	p.texts(ids)
	p.int8s(recShards)
	p.int8s(recEpochs)
	p.byteas(datas)
	p.int8s(dues)
	p.bools(creates)
	type result struct {
		fence          *int64
		dupKind, dupID *string
	}
	got := make(map[uint32]result, len(want))
	var written *int64 // rows the statement upserted
	err := s.exec(ctx, s.saveSQL[variantOf(recs)], p, func(row [][]byte) error {
		var (
			shard *int64
			res   result
		)
		if err := cols(row, &shard, &res.fence, &res.dupKind, &res.dupID, &written); err != nil {
			return err
		}
		if shard == nil {
			return errors.New("row without a shard")
		}
		got[uint32(*shard)] = res
		return nil
	})
	if err == nil && written == nil {
		err = errors.New("no count in the result")
	}
	if err != nil {
		return failAll(err)
	}
	for sh, epoch := range want {
		res, ok := got[sh]
		switch {
		case !ok:
			outcome[sh] = fmt.Errorf("pgstore: shard %d: %w: missing from the result", sh, ErrOutcomeUnknown)
		case res.fence == nil:
			outcome[sh] = &persistence.FencedError{Shard: sh, Have: epoch}
		case *res.fence != epoch:
			outcome[sh] = &persistence.FencedError{Shard: sh, Have: epoch, Want: *res.fence}
		case res.dupKind != nil:
			outcome[sh] = &persistence.ExistsError{Shard: sh, Kind: *res.dupKind, ID: *res.dupID}
		default:
			outcome[sh] = nil
		}
	}
	// The statement wrote exactly the records of the shards it reports as
	// written; anything else would mean the result cannot be trusted.
	var expect int64
	for _, r := range recs {
		if outcome[r.Shard] == nil {
			expect++
		}
	}
	if *written != expect {
		return failAll(fmt.Errorf("statement wrote %d records, expected %d", *written, expect))
	}
	return outcome, nil
}

// Close implements persistence.Store: it closes the pool, waiting for
// calls in flight to return their connections.
func (s *Store) Close() error {
	s.closed.Store(true)
	s.close.Do(s.pool.Close)
	return nil
}
