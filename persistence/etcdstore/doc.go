// Package etcdstore is a persistence.Store kept in etcd, the embedded
// default backend of ordo.
//
// # Key layout
//
// Every key lives under Config.Prefix (P, default "/ordo/default/store/"):
//
//	P fences/<shard>              the shard's fence: the epoch in decimal ASCII
//	P entities/<kind>/<id>        one entity record (see below)
//	P journal/<kind>/<id>\x00<seq> one event of the entity's journal
//	P due/<shard>/<due>/<kind>/<id> the reminder index: a record's due time
//
// <shard> is the shard number as ten zero-padded decimal digits, so fences
// list in shard order. <kind> is path-escaped (net/url.PathEscape, so a "/"
// in a kind becomes "%2F" and keys of different (kind, id) pairs never
// collide); <id> follows verbatim. A record's value is a version byte (1),
// the shard and the epoch as unsigned varints, then the entity data; a
// record with a due time (persistence.Record.Due) has version 2 and the
// due time as a third varint.
//
// A record saved with a due time has one reminder index key, with <due>
// in twenty zero-padded decimal digits, so that a shard's entries list in
// due order and Store.Due is one range read; its value is empty. The Save
// that moves the due time deletes the key at Record.PrevDue and puts the
// new one, in the record's transaction (so under its fence): the store
// does not read the old due time, and an entry left by a wrong PrevDue
// stays until a Save names it (see persistence.ReminderIndex).
//
// <seq> is the event's Seq as twenty zero-padded decimal digits, after a
// NUL byte (which no ID holds), so that an entity's events are one key
// range in Seq order, and a kind's events one key range. An event's value
// is a version byte (1), then the event data.
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
// # Journals
//
// A record's events are puts in its shard's part of the transaction, one
// per event, guarded by comparisons that hold only where the entity's
// journal ends just before the first of them: the key of the Seq before
// exists (unless the first is 1), and no key from the first on does (a
// comparison over a key range). Journals are contiguous and never lose
// their last event, so this is exact; a failed guard's Else branch also
// reads where each journal ends (its first key and key count), to tell a
// *persistence.SequenceError from a fenced shard. DeleteEventsBefore is one
// range delete in the same transaction (a record that deletes without
// appending first costs a read of where its journal ends, before the
// transaction). Each event is one of the transaction's Then operations and
// each journal appended to one or two of its If operations, all counted
// against Config.MaxTxnOps (with etcd's default of 128: a record and 127
// events, or 63 entities appending to journals that already have events,
// per shard group), and the events' bytes against Config.MaxRequestBytes;
// a group over either fails alone with ErrTooLarge.
//
// ReadEvents is one range read, LastSeq one read of the journal's first key
// and key count (etcd counts keys from its in-memory index). ReadJournal
// follows etcd's revisions, assigned at commit, so its order is the global
// commit order (events of one transaction in key order); an Offset is a
// revision and, when a page ended inside a transaction, the last key read.
// It reads the current revision, so compaction never affects it, but etcd
// sorts and filters a range only after reading all of it: each call reads
// the kind's whole journal on the server. Keep journals short with
// DeleteEventsBefore, or use PostgreSQL for long journals that projections
// follow.
//
// # Client
//
// The caller owns the *clientv3.Client: Store.Close does not close it. The
// client's MaxCallSendMsgSize (2 MiB by default) must exceed
// Config.MaxRequestBytes.
package etcdstore
