// Package chaos is `bank chaos`: it runs a bank cluster as real processes,
// drives the bank workload through it, injects faults on a schedule drawn
// from a seed, and checks the history the clients recorded.
//
// # Processes
//
// Every process is the bank binary (Config.Bank): `bank etcd` members,
// `bank node`s (each with --admin, so its status and /metrics can be read),
// one `bank open`, one `bank load` writing the history, and at the end one
// `bank check`, which also reads every account's statement from the store
// (--store, --pg) and checks it. The nodes gossip encrypted with a random key Run writes to
// gossip.key in the run directory (--gossip-key). Each runs in its own process group with SIGKILL as its
// parent-death signal, its output appended to <name>.log in the run
// directory; Run kills every group before it returns, on success, error or
// ctx cancellation.
//
// # What is proxied
//
// Each node reaches each etcd member through its own TCP proxy
// (etcdembed.StartProxy), so a partition stalls exactly one node's etcd
// traffic: its lease keepalives, placement watches and, with the etcd
// store, its storage writes. With the postgres store each node also reaches
// PostgreSQL through its own proxy (used by the pause fault). In front of
// each node's own remote port (TCP) and gossip port (TCP and UDP) is one
// more proxy each (internal/netproxy); the node advertises them
// (--advertise-remote, --advertise-gossip), so every other node and every
// client reaches it only through them. TCP proxies stall bytes rather than
// dropping them, as a real partition does; the gossip proxy drops UDP
// datagrams while cut. The load, the probe and the checker reach etcd
// directly.
//
// Nodes and clients talk mutual TLS, and etcd is served over TLS with
// client certificates: before anything starts, `bank certs --etcd` writes
// a CA, one certificate per node and one for the clients into the run
// directory's certs/, and etcd's own CA with its members' certificates and
// an etcd client certificate per node and for the clients into
// certs/etcd/. Every etcd member gets --tls-ca, --tls-cert and --tls-key;
// every node and client process gets --tls-ca, --tls-cert, --tls-key and
// --etcd-ca, --etcd-cert, --etcd-key (the in-process probe and the
// orchestrator's etcd client load the clients' files). The proxies
// carry TLS unchanged. Command lines in the logs have their passwords
// redacted (internal/redact).
//
// # Faults
//
// Plan draws the schedule: one fault at a time, every Config.Interval with
// up to a second of jitter, kinds in a seeded shuffle so that each kind
// appears before any repeats, targets and hold times from the seed:
//
//   - kill: SIGKILL a node, restart it after 1–2.5 s;
//   - pause: stall the node's store traffic (its etcd proxies, or its
//     PostgreSQL proxy) for Config.PauseStall, then SIGSTOP the node for its
//     lease TTL + 2.5–4 s, then heal and SIGCONT. The pause thus begins
//     while writes are on the wire, and the load keeps sending to the node,
//     so calls wait in its sockets and writes in its batcher while its
//     lease expires and another node takes its shards over at a higher
//     epoch; after the pause those writes reach the store under the old
//     epoch and are rejected by fencing;
//   - partition: for its lease TTL + 1–3 s, cut the node (half the
//     time each, from the seed) either from etcd (its etcd proxies stall:
//     its lease expires, another node takes its shards, and its writes in
//     flight meet fencing) or from the other nodes and the clients (the
//     proxies in front of its remote and gossip ports stall; replies and
//     gossip acks travel to the advertised, cut, address, so it is cut
//     both ways). Cut from the nodes but not from etcd, the node keeps
//     renewing its lease: gossip declares it dead, but a lease is revoked
//     only when its holder missed renewals, so its shards stay with it,
//     unreachable until the heal;
//   - etcd: SIGKILL an etcd member (half the time whichever leads) and
//     restart it after 2–4 s;
//   - postgres: run `pg_ctlcluster 15 main restart` (--store postgres).
//
// # Measurements
//
// For each fault on a node, a probe reads the balance of a few accounts
// the node owned when the fault started (from its admin status) and makes
// one write in each of their shards (opening, under a fresh request ID, an
// account outside the bank that no check reads: reads are answered from
// memory, only a write sees the store), every 100 ms with a 1 s timeout,
// through an in-process cluster client; the
// fault's recovery time is from its start to the first successful read
// after the last failed one, over the probed accounts. For etcd and
// postgres faults accounts of every node are probed. Fenced writes are
// ordo_fenced_writes_total plus ordo_store_late_fenced_writes_total (etcd
// store: stale writes etcd refused after the paused node had already
// given them up as unknown) scraped from every node every 500 ms (and just
// before a node is killed), summed over the incarnations of each node; a
// write fenced in the instant between the last scrape and a kill is not
// counted, so the number is a lower bound.
//
// After the final heal and the end of the load, three liveness probes run
// before the check: the transfers the load left unknown are read (not
// resubmitted) until each is final, for up to 30 s (Report.Sagas); every
// account's balance is read once; and in every shard an account that was
// never opened is read, which a serving owner answers at once with
// "unknown account" (Report.UnservedShards: shards that some node holds in
// placement but none serves; Report.UnservedLocks says who holds each one's
// lock in etcd, and which nodes claim it). The check itself gets a bounded
// --resolve-timeout, so a cluster that cannot answer fails the run instead
// of hanging it.
//
// # Report
//
// Run writes report.json (and Config.ReportPath) with the seed, each fault
// with its start and end, operations by kind and outcome, the check's
// verdict, recovery times and fenced writes, and returns it; Main prints a
// summary and fails when the check found a violation or a fault could not
// be injected or healed.
//
// # Long runs
//
// bank soak (package soak) is a long run of this orchestrator: it sets
// Config.Interval, Warmup and Cooldown for a fault every few minutes, adds
// arguments to the nodes, the etcd members and the load (Config.NodeArgs,
// EtcdArgs, LoadArgs), and watches the run through a Config.Observer,
// which gets a Cluster view (every process's ID, incarnation and start,
// the nodes' admin addresses, an unproxied etcd client) from the start of
// the load until after the check.
package chaos
