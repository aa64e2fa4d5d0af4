// Package soak is `bank soak`: a long chaos run (package chaos) of the
// multi-process bank under steady load, with one fault every few minutes,
// that samples every process and fails if a resource grows without bound.
//
// # The run
//
// The cluster, the load, the faults and the check are chaos.Run's: 3
// `bank etcd` members, 3 `bank node`s behind fault proxies, mutual TLS,
// one `bank load` (8 clients, accounts chosen uniformly) writing the
// history, and `bank check` at the end. Faults come one at a time every
// Config.Chaos.Interval (a quarter of the duration, 20 s to 3 min), kinds
// in turn (a seeded shuffle of kill, pause, partition, etcd member kill
// and, with the postgres store, PostgreSQL restart, each before any
// repeats). The soak adds to the nodes (which chaos runs with --pprof,
// read for goroutine counts) --idle-timeout 15s (transfer entities, one
// per transfer, come and go at the load's pace), and to the etcd members --auto-compaction-retention 1m
// (the etcd store rewrites an account's record, dedup window included, on
// every step of a transfer; without compaction etcd would keep every
// revision until its space quota ran out).
//
// # What is sampled
//
// A chaos.Observer reads, every Config.SampleEvery (a minute for 30
// minutes, 10 s for 2), from the start of the load until after the check:
//
//   - per process (nodes and etcd members), from /proc/<pid>: resident
//     memory (VmRSS) and open file descriptors;
//   - per node, from its admin endpoint: goroutines (the header of
//     /debug/pprof/goroutine?debug=1), the Go live heap
//     (go_gc_heap_live_bytes from /metrics: what the last garbage
//     collection found in use), active entities and dedup entries
//     held in memory (/status: cluster.Status's active_entities and
//     host.DedupEntries, the ordo_dedup_entries gauge);
//   - per etcd member: its database file's size (Status DbSize);
//   - for the cluster: pending Forgets, the transfer IDs the accounts still
//     hold in their debits, credits and held credits (every account's durable state
//     through the entity inspector, /entities/{kind}/{id}, which rebuilds
//     an event-sourced account from its snapshot and journal); the keys
//     under the cluster's etcd prefix other than transfer records and the
//     accounts' journals (count-only range reads); and the transfer
//     records in the store.
//
// The client's latency (p50, p99) and throughput per interval come from
// the history after the run. Once the check has run the observer reads the
// pending Forgets every second, for up to Config.Drain, until they are
// zero.
//
// # Pass rule
//
// A soak passes when the chaos run does (bank check finds no violation,
// every fault was injected and healed), when after the check the accounts
// hold no transfer ID (every Forget applied: a transfer whose Forget was
// lost keeps its ID in an account for good), and when no judged series
// grows in the judged window, the last Config.Window of the load (half
// the load, at most 10 minutes; a soak lasts at least MinDuration, 2
// minutes, so that the window starts once the dedup windows and the
// entities have filled; the memory takes longer, below).
//
// Growth is the Theil–Sen slope over the window times its length: the
// median of the slopes between every two readings of the same process
// lifetime, leaving out the first Config.Settle after each (re)start. The
// median is robust to a fault's spike and to a garbage-collected heap's
// sawtooth; pairing readings within one lifetime keeps a restarted node's
// fresh counters out of the fit. A series fails when its growth exceeds
// both Config.Rel (20%) of its median in the window and its floor: live
// heap 8 MiB, RSS 32 MiB, goroutines 50, descriptors 16, dedup entries
// (excess) 2000, pending Forgets 50, etcd keys 50 (see Judge).
//
// A node's memory is judged by its live heap, not its RSS. The bank
// collects garbage at 5× the live heap (GOGC 400) and the Go runtime
// returns freed pages to the system over minutes, so a node's RSS follows
// the highest heap goal since it started: a moment's burst of garbage (a
// failover activating a dead node's entities at once) raises it by five
// times the burst, and it stays up. In a 2-minute soak (seed 88235) a
// node's RSS grew 39 MiB over the window while its live heap grew 4 MiB.
// A leak in a node grows its live heap, or its goroutines (whose stacks
// RSS counts too), and both are judged; the RSS is shown. The etcd
// members' RSS is judged (with the postgres store), as their heap is not
// read.
//
// Memory is judged only when the window starts Config.MemoryFilled (5
// minutes) or more into the load, so in soaks of 10 minutes or more: a
// node's live heap climbs for about five minutes under this load (25 to
// 31 MiB in a 10-minute postgres soak, flat from 300 s to 600 s), and in
// a 2-minute soak it is still climbing in the window, by as much as a
// node getting back the entities a pause took from it (6.6 MiB of an
// 8 MiB limit in one run). The 2-minute soak judges every other series.
//
// Entity counts are judged for the cluster, since shards (and their
// entities) move between nodes with every fault: the active entities in
// excess of the accounts and of the transfers submitted within the last
// 1.125 idle timeouts (an entity passivates between one and 1.25 idle
// timeouts after its last message), whose growth may not exceed 20% of
// the active entities nor 200, unless it ends within that limit (entities
// a fault took coming back); and the dedup entries beyond one per active
// entity. Both totals follow the load's throughput and are not judged
// themselves: a transfer entity holds one dedup entry (its Submit's), an
// account a window the load fills within seconds, so the dedup entries
// are the active entities plus the accounts' windows, and their excess
// over the active entities stays flat however the throughput moves, while
// a window that outgrows its bound raises it.
//
// Series that follow the transfer records, which the bank keeps (one per
// transfer ever submitted, never deleted), and the accounts' events (their
// history, which their statements show, never deleted either) are shown
// but not judged: the record count, and with the etcd store the etcd
// members' RSS and database file. So are the client latency and the
// nodes' RSS (above).
//
// # Output
//
// Run writes into the run directory soak.json (every reading, the faults,
// the latency per interval, the drain, the chaos report and the verdict
// with its reasons), soak.png (one panel per series, one line per process,
// dashed when not judged, broken at restarts; the judged window shaded;
// each fault a vertical line in its kind's colour; the latency and
// throughput per interval) and soak.md (the verdict, the rule, a table of
// the series and of the faults).
package soak
