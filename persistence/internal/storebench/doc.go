// Package storebench holds benchmarks that compare the persistence.Store
// drivers side by side in one run, so that their ratios are meaningful:
//
//	ORDO_PG_URL=postgres://postgres:ordo@127.0.0.1:5432/ordo_test?sslmode=disable \
//		go test -run '^$' -bench . -benchtime 2s ./persistence/internal/storebench
//
// BenchmarkSave measures Save latency (ns/op) and throughput (records/s)
// for batches of 1, 64 and 512 records on the memory store, an embedded
// etcd (with fsync, etcd's default limits) and PostgreSQL.
// BenchmarkSaveEvents does the same with one event appended per record and
// Save (persistence.Journal), batches of 1, 4 (a bank bench Save's size) and 64.
// BenchmarkPostgresBatchVsUpdates compares a fenced batched Save with a
// loop of single-row autocommit UPDATEs of the same records on the same
// server. The package has no non-test code.
package storebench
