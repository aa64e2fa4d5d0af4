// Package actors is ordo's entity runtime.
//
// An entity is identified by a Ref (a kind name and an ID) and lives as one
// protoactor actor on the node that owns its shard. It processes one
// message at a time, in mailbox order, so its handlers never need locks.
//
// A Kind declares an entity type: its protobuf state and its handlers, one
// per request message type (On for handlers that may change state, OnRead
// for handlers that only read it). A Host runs the entities of the shards
// it is told it owns, each at a fencing epoch:
//
//   - Activation. The first message to an entity activates it: the host
//     fences the shard in the store (once per shard and epoch), loads the
//     entity's record, and then processes messages.
//
//   - Output gate and group commit. When a write handler returns, the new
//     state, its sequence number and the entity's recent replies go to the
//     host's write batcher, which coalesces many entities' writes into one
//     Store.Save. The reply, and every message the handler sent, are held
//     until that write is durable; the entity meanwhile goes on with its
//     next message. Every reply, reads included, leaves only when every
//     write it may have observed is durable and while the host's lease is
//     valid.
//
//   - Dedup. Every call carries a request ID. The entity stores the IDs and
//     replies of its most recent requests (HostConfig.DedupWindow) in the
//     same record as its state; a repeated ID gets the stored reply and runs
//     nothing.
//
//   - Failures. A write rejected by fencing, or one whose outcome the store
//     could not report, drops the whole shard: its entities stop, their
//     waiting callers get a retryable error, and OnShardLost tells
//     placement to let the shard go, so that it is served again only under
//     a new epoch (whose fence rejects a write still on its way; restarting
//     under the same epoch could let such a late write overwrite newer
//     state). Callers retry with the same request ID. An entity whose own
//     state cannot be encoded, or whose handler panics, restarts from
//     storage.
//
//   - Passivation. An entity idle for HostConfig.IdleTimeout stops, after
//     its writes are durable; above HostConfig.MaxActive active entities
//     the least recently used are passivated first.
//
//   - Deferred replies. A write handler may Defer its reply under a key; a
//     later handler, hook or continuation Resolves the key. The answer is
//     recorded for deduplication and gated like any reply; a retry of a
//     pending request waits for the same answer; stopping fails it
//     retryably.
//
// Entity-to-entity calls (Request, Send) never block the caller's mailbox:
// the reply comes back later as a continuation run on the caller's own
// goroutine. Outgoing calls pass the same output gate as replies, except
// those to an entity of the sender's own shard (co-located, see
// Colocated): they are handed over in memory at once, and the receiver's
// write is never durable before the sender's (the batcher puts both in
// one Save, or the receiver's in a later one).
//
// Errors cross the wire as codes (see Error) and keep their identity:
// errors.Is(err, ErrNotHere) holds on the far side of a network.
package actors
