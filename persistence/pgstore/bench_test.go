package pgstore_test

import (
	"fmt"
	"syscall"
	"testing"
	"time"

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
	ctx := b.Context()
	cfg := pgstore.DefaultConfig()
	cfg.URL, cfg.Schema, cfg.MaxConns = pgtest.URL(b), pgtest.Schema(b), 1
	s, err := pgstore.Open(ctx, cfg)
	require.NoError(b, err)
	defer s.Close()
	const shards, entities = 256, 10_000
	for sh := range uint32(shards) {
		require.NoError(b, s.Fence(ctx, sh, 1))
	}
	pid, err := pgstore.BackendPID(ctx, s)
	require.NoError(b, err)
	data, event := make([]byte, 600), make([]byte, 90) // about a bank account's record and event
	id := func(i int) string { return fmt.Sprintf("entity-%06d", i) }
	save := func(recs []persistence.Record) {
		out, err := s.Save(ctx, recs)
		require.NoError(b, err)
		for sh, err := range out {
			require.NoError(b, err, "shard %d", sh)
		}
	}
	for i := 0; i < entities; i += 250 {
		recs := make([]persistence.Record, 0, 250)
		for j := i; j < i+250; j++ {
			recs = append(recs, persistence.Record{Kind: "bench", ID: id(j), Shard: uint32(j % shards), Epoch: 1, Data: data})
		}
		save(recs)
	}
	seqs := make([]uint64, entities)
	next, fresh := 0, 0
	batch := func(shape string, n int) []persistence.Record {
		recs := make([]persistence.Record, n)
		for k := range recs {
			// Consecutive entities: distinct shards within a batch.
			next = (next + 1) % entities
			r := persistence.Record{Kind: "bench", ID: id(next), Shard: uint32(next % shards), Epoch: 1, Data: data}
			switch shape {
			case "append":
				seqs[next]++
				r.Events = []persistence.Event{{Seq: seqs[next], Data: event}}
			case "create", "insert":
				fresh++
				r.Kind, r.ID, r.Create = "new", fmt.Sprintf("new-%d", fresh), shape == "create"
			}
			recs[k] = r
		}
		return recs
	}
	for _, shape := range []string{"update", "append", "create", "insert"} {
		for _, n := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/records=%d", shape, n), func(b *testing.B) {
				server0, ok := serverCPU(b, pid)
				client0 := processCPU(b)
				for b.Loop() {
					save(batch(shape, n))
				}
				b.ReportMetric(float64((processCPU(b)-client0).Microseconds())/float64(b.N), "client-µs/op")
				if server1, _ := serverCPU(b, pid); ok {
					b.ReportMetric(float64((server1-server0).Microseconds())/float64(b.N), "server-µs/op")
				}
			})
		}
	}
}
