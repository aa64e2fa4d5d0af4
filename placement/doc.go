// Package placement decides which node runs which shard, through etcd.
//
// # Keys
//
// Under a prefix P (Config.Prefix):
//
//	P/config       {"shards": S}, written once (create-if-absent); a node
//	               configured with another S refuses to start
//	P/nodes/<id>   NodeInfo as JSON, bound to the node's lease
//	P/shards/<n>   the owner's node ID, bound to the owner's lease;
//	               epoch = CreateRevision of this key
//
// # Session
//
// A Session is one etcd lease per node, renewed by its own KeepAliveOnce
// loop every KeepAliveInterval (default TTL/3) so that the send time of each
// acknowledged renewal is known. The node's validity deadline is
//
//	send time of the last acknowledged keepalive + TTL - ValidityMargin
//
// on the monotonic clock; etcd cannot expire the lease before it (the leader
// counts the TTL from when it received the renewal, which is later than the
// send time), given clock rates that agree within the margin. When the
// deadline passes or etcd reports the lease gone, the node calls ShardRunner.Lost
// with every shard it held, at once. It then grants a new lease and
// registers again, taking its registry entry over from the old lease,
// while it revokes the old lease in the background (each attempt bounded by
// the keepalive interval and retried: etcd never answers a request it lost
// to a leader that just died), which frees the old shard locks to be taken
// again under new epochs. It never continues under the old identity.
//
// # Locks and epochs
//
// Acquire is Txn(If(CreateRevision(P/shards/n) == 0)).Then(Put(key, id,
// WithLease(lease))); the epoch is the transaction's header revision, which
// equals the key's CreateRevision, so epochs of successive owners of a shard
// strictly increase. Unlock is Txn(If(CreateRevision(key) == epoch)).
// Then(Delete(key)). The concurrency.Mutex and Election recipes are not used
// (see DESIGN.md).
//
// An Acquire can fail on the client (a timeout, a leader change) after etcd
// applied it: the lock is then held under the node's lease, and no Acquire
// of another node can take it while the lease lives. Acquire is therefore
// idempotent per lease (it returns the epoch of a lock its node already
// holds under that lease), and the reconciler takes back, at its epoch,
// every lock the table shows under its own session that it does not own
// and that it is not deleting, once a read of etcd confirms the lock is
// still there (the table may show for a moment a lock an unlock just
// deleted: that shard is never acquired anew).
//
// # Desired ownership and handoff
//
// Agent computes the desired owner of each shard by rendezvous hashing
// (Desired) over the live set given by SetLive. It acquires free shards it
// should own, and free shards whose desired owner has no registry entry. It
// hands off, at most Config.HandoffRate per second, shards whose desired
// owner is another registered live node: ShardRunner.Release drains the shard and
// the lock is deleted only after it returns nil.
//
// # TTL and failover time
//
// When a node crashes, its shards stay locked until its lease expires in
// etcd: up to LeaseTTL after its last renewal (plus one leader election if
// the etcd leader changes meanwhile, because a new leader extends every
// lease). The survivors then acquire at their next table event, within a
// few round trips. With accelerated failover (Agent.RevokeDead, called when
// memberlist declares the node dead) the lease is revoked once etcd shows a
// missed renewal, i.e. about KeepAliveInterval + 1s after the crash, so
// failover takes roughly max(memberlist detection, TTL/3 + 1s) instead of
// TTL. A paused or partitioned node stops serving at its validity
// deadline, which is at least ValidityMargin before etcd can expire its
// lease; a larger TTL tolerates longer etcd hiccups but makes unassisted
// failover slower. BenchmarkFailover measures both paths (with a 2s TTL on
// a loaded 2-core machine: about 25-45ms from revocation to every shard
// owned elsewhere, about 2.4s when the lease is left to expire).
//
// # Driving an Agent
//
// The host implements ShardRunner (and LeaseObserver, to announce a new lease
// before registering under it). It calls New and Start, feeds SetLive
// with the nodes alive in memberlist and registered in etcd, and calls
// RevokeDead, with the lease of the member memberlist declared dead, when
// that member matched the node's registration. On Acquired it fences its store at
// the epoch before loading state; before admitting a call or letting a
// reply out it checks Holds (or Valid), which turns false the moment the
// validity deadline passes, even before Lost is delivered. Shutdown drains
// every shard through ShardRunner.Release and revokes the lease.
//
// # Faults
//
// Config.Faults (nil in production) lets a test suspend the node's
// keepalives, as if the process were paused, and crash it (see Faults).
//
// # Routing table
//
// Table watches P/ from etcd's current revision and, once etcd has created
// the watch, lists P/, skipping the watch's events the list already holds;
// it does so again on compaction or any watch error. A watch from the
// listed revision + 1 would miss nothing either, but etcd catches a watch
// opened at a past revision up only every 100 ms, and the shards handed
// to a starting node would stay ownerless that long. The table needs no
// session, so pure clients use it to route calls.
package placement
