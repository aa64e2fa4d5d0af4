// Package etcdstore is a persistence.Store kept in etcd, the embedded
// default backend of ordo.
//
// # Key layout
//
// Every key lives under Config.Prefix (P, default "/ordo/default/store/"):
//
//	P fences/<shard>            the shard's fence: the epoch in decimal ASCII
//	P entities/<kind>/<id>      one entity record (see below)
//
// <shard> is the shard number as ten zero-padded decimal digits, so fences
// list in shard order. <kind> is path-escaped (net/url.PathEscape, so a "/"
// in a kind becomes "%2F" and keys of different (kind, id) pairs never
// collide); <id> follows verbatim. A record's value is a version byte (1),
// the shard and the epoch as unsigned varints, then the entity data.
//
// # Transactions
//
// Fence is a compare-and-swap on the fence key's ModRevision that only ever
// raises the value, retried while other writers race it.
//
// Save writes a batch in as few transactions as etcd's limits allow. Each
// transaction carries whole shard groups, guarded by one Value(fence) ==
// epoch comparison per shard; its Else branch reads those fences back, so a
// failed guard tells which shards are fenced, and the transaction is retried
// at once with the remaining shards only. A shard group is never split
// across transactions: a group that does not fit in one transaction under
// Config.MaxTxnOps and Config.MaxRequestBytes fails with an error matching
// persistence.ErrTooLarge, without affecting the other shards of the batch;
// so does a group the server refuses alone (a transaction of several
// groups it refuses as too large is split and sent again), and nothing of
// such a group is written.
// A transaction that fails in transport (connection loss, the context
// ending) reports an error matching ErrOutcomeUnknown for each of its shards:
// the transaction is atomic, so each such shard was written entirely or not
// at all, but the caller cannot tell which, nor when: the store leaves the
// transaction running after Save returns (see Store.LateFenced), and the
// etcd client holds a call made while no member is reachable until it
// connects again, so the shard may be written up to 30 seconds later,
// after later Saves of it. Before writing such a shard again, raise its
// fence to a new epoch, which rejects the late write.
//
// The caller owns the *clientv3.Client: Store.Close does not close it. The
// client's MaxCallSendMsgSize (2 MiB by default) must exceed
// Config.MaxRequestBytes.
package etcdstore
