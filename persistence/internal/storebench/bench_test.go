package storebench

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/ordo-actors/ordo/etcdembed"
	"github.com/ordo-actors/ordo/persistence"
	etcdstore "github.com/ordo-actors/ordo/persistence/etcdstore"
	"github.com/ordo-actors/ordo/persistence/memory"
	pgstore "github.com/ordo-actors/ordo/persistence/pgstore"
	"github.com/ordo-actors/ordo/persistence/pgstore/pgtest"
)

var (
	etcdOnce sync.Once
	etcdSrv  *etcdembed.Server
	etcdDir  string
	etcdErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if etcdSrv != nil {
		etcdSrv.Close()
	}
	if etcdDir != "" {
		os.RemoveAll(etcdDir)
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// etcdEndpoints starts, once, an embedded etcd that syncs to disk and has a
// real etcd's default limits.
func etcdEndpoints(b *testing.B) []string {
	etcdOnce.Do(func() {
		etcdDir, etcdErr = os.MkdirTemp("", "storebench-etcd-")
		if etcdErr != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		etcdSrv, etcdErr = etcdembed.Start(ctx, etcdembed.Config{Dir: etcdDir, MaxTxnOps: 128, MaxRequestBytes: 1536 * 1024})
	})
	if etcdErr != nil {
		b.Fatal(etcdErr)
	}
	return etcdSrv.Endpoints()
}

var batchSizes = []int{1, 64, 512}

const dataSize = 256

// batch returns n records over up to 16 shards, all at epoch 1.
func batch(n int) []persistence.Record {
	recs := make([]persistence.Record, n)
	data := make([]byte, dataSize)
	for i := range recs {
		recs[i] = persistence.Record{Kind: "bench", ID: fmt.Sprintf("entity-%06d", i), Shard: uint32(i % 16), Epoch: 1, Data: data}
	}
	return recs
}

func benchSave(b *testing.B, s persistence.Store, n int) {
	ctx := b.Context()
	for sh := uint32(0); sh < 16; sh++ {
		if err := s.Fence(ctx, sh, 1); err != nil {
			b.Fatal(err)
		}
	}
	recs := batch(n)
	b.ResetTimer()
	for b.Loop() {
		out, err := s.Save(ctx, recs)
		if err != nil {
			b.Fatal(err)
		}
		for sh, e := range out {
			if e != nil {
				b.Fatalf("shard %d: %v", sh, e)
			}
		}
	}
	b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "records/s")
}

// benchSaveEvents is benchSave with one event appended to every record's
// journal by each Save.
func benchSaveEvents(b *testing.B, s persistence.Store, n int) {
	ctx := b.Context()
	for sh := uint32(0); sh < 16; sh++ {
		if err := s.Fence(ctx, sh, 1); err != nil {
			b.Fatal(err)
		}
	}
	recs := batch(n)
	event := make([]byte, 64)
	b.ResetTimer()
	seq := uint64(0)
	for b.Loop() {
		seq++
		for i := range recs {
			recs[i].Events = []persistence.Event{{Seq: seq, Data: event}}
		}
		out, err := s.Save(ctx, recs)
		if err != nil {
			b.Fatal(err)
		}
		for sh, e := range out {
			if e != nil {
				b.Fatalf("shard %d: %v", sh, e)
			}
		}
	}
	b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkSaveEvents is BenchmarkSave with one 64-byte event appended per
// record and Save.
func BenchmarkSaveEvents(b *testing.B) {
	for _, n := range []int{1, 4, 64} {
		b.Run(fmt.Sprintf("memory/batch=%d", n), func(b *testing.B) {
			s := memory.New()
			defer s.Close()
			benchSaveEvents(b, s, n)
		})
		b.Run(fmt.Sprintf("etcd/batch=%d", n), func(b *testing.B) {
			cli, err := clientv3.New(clientv3.Config{Endpoints: etcdEndpoints(b), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
			if err != nil {
				b.Fatal(err)
			}
			defer cli.Close()
			s, err := etcdstore.New(cli, etcdstore.Config{Prefix: fmt.Sprintf("/bench-events/%d/%d/", n, time.Now().UnixNano())})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			benchSaveEvents(b, s, n)
		})
		b.Run(fmt.Sprintf("postgres/batch=%d", n), func(b *testing.B) {
			s, _ := openPG(b)
			benchSaveEvents(b, s, n)
		})
	}
}

func openPG(b *testing.B) (*pgstore.Store, string) {
	schema := pgtest.Schema(b)
	s, err := pgstore.Open(b.Context(), pgstore.Config{URL: pgtest.URL(b), Schema: schema})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s, schema
}

func BenchmarkSave(b *testing.B) {
	for _, n := range batchSizes {
		b.Run(fmt.Sprintf("memory/batch=%d", n), func(b *testing.B) {
			s := memory.New()
			defer s.Close()
			benchSave(b, s, n)
		})
	}
	for _, n := range batchSizes {
		b.Run(fmt.Sprintf("etcd/batch=%d", n), func(b *testing.B) {
			cli, err := clientv3.New(clientv3.Config{Endpoints: etcdEndpoints(b), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
			if err != nil {
				b.Fatal(err)
			}
			defer cli.Close()
			s, err := etcdstore.New(cli, etcdstore.Config{Prefix: fmt.Sprintf("/bench/%d/", n)})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			benchSave(b, s, n)
		})
	}
	for _, n := range batchSizes {
		b.Run(fmt.Sprintf("postgres/batch=%d", n), func(b *testing.B) {
			s, _ := openPG(b)
			benchSave(b, s, n)
		})
	}
}

// BenchmarkPostgresBatchVsUpdates writes the same records either with one
// fenced Save or with one autocommit UPDATE per record (no fencing), on the
// same server and table.
func BenchmarkPostgresBatchVsUpdates(b *testing.B) {
	for _, n := range []int{64, 512} {
		b.Run(fmt.Sprintf("fenced-batch/batch=%d", n), func(b *testing.B) {
			s, _ := openPG(b)
			benchSave(b, s, n)
		})
		b.Run(fmt.Sprintf("single-updates/batch=%d", n), func(b *testing.B) {
			s, schema := openPG(b)
			ctx := b.Context()
			for sh := uint32(0); sh < 16; sh++ {
				if err := s.Fence(ctx, sh, 1); err != nil {
					b.Fatal(err)
				}
			}
			recs := batch(n)
			if _, err := s.Save(ctx, recs); err != nil {
				b.Fatal(err)
			}
			pool, err := pgxpool.New(ctx, pgtest.URL(b))
			if err != nil {
				b.Fatal(err)
			}
			defer pool.Close()
			update := "UPDATE " + pgx.Identifier{schema, "entities"}.Sanitize() +
				" SET data = $3, epoch = $4 WHERE kind = $1 AND id = $2"
			b.ResetTimer()
			for b.Loop() {
				for _, r := range recs {
					tag, err := pool.Exec(ctx, update, r.Kind, r.ID, r.Data, r.Epoch)
					if err != nil || tag.RowsAffected() != 1 {
						b.Fatalf("update %s: %v, %v", r.ID, tag, err)
					}
				}
			}
			b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "records/s")
		})
	}
}
