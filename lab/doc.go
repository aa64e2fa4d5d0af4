// Package lab compares ways of moving money between accounts on one machine
// and one workload: the lock-based designs people use (a Redis lock,
// Redlock, etcd and ZooKeeper lock recipes, PostgreSQL row, advisory and
// optimistic locking) and, plugged in through the same Approach interface,
// ordo's actors with storage fencing.
//
// Each approach stores the balances in its own system. Run drives one
// approach with a seeded workload for a bounded time, records what the
// clients were told (ok, rejected, aborted, unknown), then reads the final
// balances and checks two things: conservation (the sum of the balances is
// unchanged) and exactly-once (every balance equals the initial balance plus
// the acknowledged credits minus the acknowledged debits).
//
// Run also measures what each transfer costs the whole machine: the busy
// CPU time of every process (the approach's servers included) from the
// aggregate line of /proc/stat over the run's measured window, reported as
// CPU-seconds per 1,000 acknowledged transfers ("n/a" off Linux). Since
// other processes count too, Run first watches the machine for
// Workload.IdleSample with the approach idle and reports how busy it was.
// It reports the part of that CPU time this process used as well
// (getrusage): the clients, and whatever the approach runs in-process
// (ordo's nodes and their store clients, an embedded etcd); the rest is
// the approach's servers' and anything else's.
// For an approach that keeps its data in PostgreSQL (WALReader) it also
// reports the write-ahead log the server wrote over the window, per
// acknowledged transfer: the database's share of the work, exact where
// CPU time is not (pg_current_wal_lsn before and after). Such a run starts
// right after a checkpoint (CHECKPOINT, after the setup), so that no run
// pays for one the setup or the run before it made due, and every run
// starts from the same state of the log.
//
// # Pauses
//
// The safety comparison simulates a process pause (a long GC, SIGSTOP) that
// outlasts the lock's TTL. Run attaches a pause to a transfer's context with
// probability Workload.StallProbability; an approach calls Stall (or
// Pausing) after it has acquired its lock(s) and read the balances, and
// before it writes. The hook costs nothing when no pause is attached.
// Approaches whose client keeps a lease alive from another goroutine (etcd
// sessions, ZooKeeper sessions) also stop that keepalive for the pause, as a
// real pause of the whole process would.
//
// # Approaches
//
//   - redis: SET key token NX PX ttl per account in sorted order, release by
//     a Lua compare-and-delete; balances read with GET and written with SET.
//   - redlock: the same lock on 5 independent Redis servers, held with a
//     majority and a validity time of TTL − elapsed − drift; balances in the
//     first server.
//   - etcd: a concurrency.Mutex per account on a session with a TTL; the
//     writes go in one Txn guarded by the mutexes' ownership (fenced).
//   - zk: the ZooKeeper lock recipe (ephemeral sequential nodes, watch the
//     predecessor); balances in znodes set unconditionally (version -1).
//   - pg-row, pg-advisory, pg-optimistic: SELECT … FOR UPDATE in id order,
//     pg_advisory_xact_lock in id order, and a version column with retries,
//     each in one PostgreSQL transaction.
//
// # Running
//
// Main is the command entry point: `bank bench` calls it with ordo's
// approaches (package ordolab) as extra Builders. lab.sh installs and
// starts the servers (5 Redis on 127.0.0.1:6391-6395, ZooKeeper on
// 127.0.0.1:2191, PostgreSQL 15; etcd is embedded), runs `bank bench` and
// stops what it started:
//
//	lab/lab.sh --smoke                    # seconds, no pauses, --check
//	lab/lab.sh --stall-prob 0.02 --ttl 1s --stall 3s
//	lab/lab.sh test                       # the tests, servers required
//	eval "$(lab/lab.sh up)"; go test ./lab/...; lab/lab.sh down
//
// --concurrency takes a list (32,256): every selected approach runs at each
// concurrency in turn. --rounds N runs them N times at each concurrency, in
// rounds whose order turns by one each time; the --compare ratios are then
// taken within each round and shown with their median. Results go to
// results/lab/ (results.md with a table per concurrency and the ratios of
// the --compare pairs, results.json with every result, chart.png with a bar
// per approach and concurrency: the round of median throughput, and for
// violations the worst round).
package lab
