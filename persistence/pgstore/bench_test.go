package pgstore_test

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ordo-actors/ordo/persistence"
	pgstore "github.com/ordo-actors/ordo/persistence/pgstore"
	"github.com/ordo-actors/ordo/persistence/pgstore/pgtest"
)

// serverCPU returns the CPU time server process pid has used so far
// (user and system; /proc counts it in 1/100 s), and false when
// serverStat cannot read it.
func serverCPU(b *testing.B, pid int) (time.Duration, bool) {
	f, ok := serverStat(b, pid)
	if !ok {
		return 0, false
	}
	return time.Duration(statField(b, f, 11)+statField(b, f, 12)) * 10 * time.Millisecond, true
}

// processCPU returns the CPU time this process has used so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	require.NoError(b, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkSaveShapes measures one Save by what its records do, on a
// one-connection store, and reports the CPU the server process serving
// it used per Save (server-µs/op; where the server runs on this machine)
// beside this process's (client-µs/op, the benchmark's own work
// included). Each record is in a shard of its own, as a busy host's
// batch mostly is:
//
//   - update: an existing record rewritten (the plain statement);
//   - append: the same with one event appended to its journal (the
//     journal statement);
//   - create: a new record written with Record.Create (the check that it
//     is new);
//   - insert: a new record without it.
//
// Two sizes per shape give the statement's fixed cost and its cost per
// record. Commits wait for the server's WAL flush as configured (run it
// with the URL's options=-csynchronous_commit%3Doff to leave the flush
// out).
func BenchmarkSaveShapes(b *testing.B) {
	f := newShapes(b)
	for _, shape := range []string{"update", "append", "create", "insert"} {
		for _, n := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/records=%d", shape, n), func(b *testing.B) {
				server0, ok := serverCPU(b, f.pid)
				client0 := processCPU(b)
				for b.Loop() {
					f.save(b, f.batch(shape, n))
				}
				b.ReportMetric(float64((processCPU(b)-client0).Microseconds())/float64(b.N), "client-µs/op")
				if server1, _ := serverCPU(b, f.pid); ok {
					b.ReportMetric(float64((server1-server0).Microseconds())/float64(b.N), "server-µs/op")
				}
			})
		}
	}
}

// BenchmarkJournalCheck compares the journal statement with and without
// its check of the journals against the statement's snapshot (the check
// a Save makes only after a journal failed to continue, see the package's
// journalSaveSQL): Saves of 16 appends, each in a shard of its own, in
// alternating chunks of 100 on one connection. It reports the server
// process's CPU per Save of each (checked-server-µs/op,
// unchecked-server-µs/op) and their ratio (unchecked-ratio: unchecked ÷
// checked).
func BenchmarkJournalCheck(b *testing.B) {
	f := newShapes(b)
	ctx := b.Context()
	perSave := alternate(b, [2]int{f.pid, f.pid}, func(v, _ int) {
		out, err := pgstore.SaveJournal(ctx, f.s, f.batch("append", 16), v == 1)
		requireSaved(b, out, err)
	})
	b.ReportMetric(perSave[0], "unchecked-server-µs/op")
	b.ReportMetric(perSave[1], "checked-server-µs/op")
	if perSave[1] > 0 {
		b.ReportMetric(perSave[0]/perSave[1], "unchecked-ratio")
	}
}

// alternate runs b.N operations of two variants in alternating chunks of
// 100, each variant first every other round, and returns the CPU per
// operation of the server process serving each (pids[v]), in µs: run(v,
// i) makes operation i, of variant v. It skips b where the server's CPU
// cannot be read.
func alternate(b *testing.B, pids [2]int, run func(v, i int)) [2]float64 {
	const chunk = 100
	var cpu [2]time.Duration
	var ops [2]int
	b.ResetTimer()
	for round, total := 0, 0; total < b.N; round++ {
		for k := range 2 {
			v := k ^ round&1
			n := min(chunk, b.N-total)
			if n == 0 {
				break
			}
			server0, ok := serverCPU(b, pids[v])
			if !ok {
				b.Skip("the server's CPU cannot be read: it runs on another machine")
			}
			for i := range n {
				run(v, total+i)
			}
			server1, _ := serverCPU(b, pids[v])
			cpu[v] += server1 - server0
			ops[v] += n
			total += n
		}
	}
	var per [2]float64
	for v := range per {
		per[v] = float64(cpu[v].Microseconds()) / float64(max(ops[v], 1))
	}
	return per
}

// The Save benchmarks' entities and the shards they are spread over, as
// a busy host's store holds them.
const shapeEntities, shapeShards = 10_000, 256

// shapes is the store and entities the Save benchmarks write.
type shapes struct {
	s           *pgstore.Store
	pid         int // of the server process serving the store's connection
	data, event []byte
	seqs        []uint64
	next, fresh int
}

// newShapes opens a one-connection store holding the benchmarks'
// entities.
func newShapes(b *testing.B) *shapes {
	ctx := b.Context()
	cfg := pgstore.DefaultConfig()
	cfg.URL, cfg.Schema, cfg.MaxConns = pgtest.URL(b), pgtest.Schema(b), 1
	s, err := pgstore.Open(ctx, cfg)
	require.NoError(b, err)
	b.Cleanup(func() { _ = s.Close() })
	for sh := range uint32(shapeShards) {
		require.NoError(b, s.Fence(ctx, sh, 1))
	}
	pid, err := pgstore.BackendPID(ctx, s)
	require.NoError(b, err)
	f := &shapes{s: s, pid: pid, data: make([]byte, 600), event: make([]byte, 90), // about a bank account's record and event
		seqs: make([]uint64, shapeEntities)}
	for i := 0; i < shapeEntities; i += 250 {
		recs := make([]persistence.Record, 0, 250)
		for j := i; j < i+250; j++ {
			recs = append(recs, persistence.Record{Kind: "bench", ID: f.id(j), Shard: uint32(j % shapeShards), Epoch: 1, Data: f.data})
		}
		f.save(b, recs)
	}
	return f
}

func (f *shapes) id(i int) string { return fmt.Sprintf("entity-%06d", i) }

func (f *shapes) save(b *testing.B, recs []persistence.Record) {
	out, err := f.s.Save(b.Context(), recs)
	requireSaved(b, out, err)
}

// requireSaved fails b unless a Save succeeded for every shard.
func requireSaved(b *testing.B, out map[uint32]error, err error) {
	require.NoError(b, err)
	for sh, err := range out {
		require.NoError(b, err, "shard %d", sh)
	}
}

// batch returns the next n records of a shape (see BenchmarkSaveShapes):
// consecutive entities, in distinct shards.
func (f *shapes) batch(shape string, n int) []persistence.Record {
	recs := make([]persistence.Record, n)
	for k := range recs {
		f.next = (f.next + 1) % len(f.seqs)
		r := persistence.Record{Kind: "bench", ID: f.id(f.next), Shard: uint32(f.next % shapeShards), Epoch: 1, Data: f.data}
		switch shape {
		case "append":
			f.seqs[f.next]++
			r.Events = []persistence.Event{{Seq: f.seqs[f.next], Data: f.event}}
		case "create", "insert":
			f.fresh++
			r.Kind, r.ID, r.Create = "new", fmt.Sprintf("new-%d", f.fresh), shape == "create"
		}
		recs[k] = r
	}
	return recs
}

// BenchmarkLargeRecords measures the Save of one record the size of a
// dedup window (pgstore.DedupWindow, about 9.5 KiB) on the schema as Open
// leaves it (kept in the row up to 4 KiB compressed, lz4 where the server
// has it) beside the same on a schema set back to PostgreSQL's defaults
// (moved to the TOAST table above about 2 KiB, compressed with the
// server's default_toast_compression, pglz unless configured), in
// alternating chunks of 100 Saves, each first every other round. Each
// Save rewrites one of 64 records, in shards of their own, with new data.
// It reports the server process's CPU per Save of each
// (schema-server-µs/op, defaults-server-µs/op), their ratio
// (schema-ratio: schema ÷ defaults) and the difference per record
// (saved-server-µs/record).
func BenchmarkLargeRecords(b *testing.B) {
	ctx := b.Context()
	url := pgtest.URL(b)
	var stores [2]*pgstore.Store
	var pids [2]int
	for k := range stores {
		cfg := pgstore.DefaultConfig()
		cfg.URL, cfg.Schema, cfg.MaxConns = url, pgtest.Schema(b), 1
		s, err := pgstore.Open(ctx, cfg)
		require.NoError(b, err)
		b.Cleanup(func() { _ = s.Close() })
		if k == 1 {
			for _, table := range []string{"entities", "events"} {
				t := pgx.Identifier{cfg.Schema, table}.Sanitize()
				require.NoError(b, pgstore.Exec(ctx, s, `ALTER TABLE `+t+` RESET (toast_tuple_target), ALTER COLUMN data SET COMPRESSION default`))
			}
		}
		for sh := range uint32(64) {
			require.NoError(b, s.Fence(ctx, sh, 1))
		}
		stores[k] = s
		pids[k], err = pgstore.BackendPID(ctx, s)
		require.NoError(b, err)
	}
	save := func(k, i int) {
		out, err := stores[k].Save(ctx, []persistence.Record{{Kind: "bench", ID: fmt.Sprintf("entity-%02d", i%64),
			Shard: uint32(i % 64), Epoch: 1, Data: pgstore.DedupWindow(uint64(i))}})
		requireSaved(b, out, err)
	}
	for i := range 64 { // every record exists: each Save below rewrites one
		save(0, i)
		save(1, i)
	}
	perSave := alternate(b, pids, save)
	b.ReportMetric(perSave[0], "schema-server-µs/op")
	b.ReportMetric(perSave[1], "defaults-server-µs/op")
	if perSave[1] > 0 {
		b.ReportMetric(perSave[0]/perSave[1], "schema-ratio")
	}
	b.ReportMetric(perSave[1]-perSave[0], "saved-server-µs/record")
}
