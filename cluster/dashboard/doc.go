// Package dashboard serves ordo's live web dashboard from a node's admin
// endpoint: the members and their leases, every shard coloured by owner
// with its fencing epoch, calls, latency, errors and storage counters as
// sparklines over the last minutes, a timeline of cluster events, and an
// entity inspector.
//
// A Hub reads its node through a Source (package cluster implements it
// over a Node). Run samples the node's counters into a ring buffer once
// per Config.Interval and derives events from what the node sees change:
// gossip states, etcd registrations, shard owners and epochs, its own
// lease, fenced writes, handoffs and lease revocations. While a page is
// attached, the Hub also reads the numbers of every other node registered
// in etcd from that node's admin endpoint (GET /dashboard/api/node, at the
// address the node gossips) and the remaining TTL of each registered
// lease from etcd, so
// the page works from any node, and keeps working when a node goes down
// (it shows as dead or down, its shards as free or owned by others).
//
// The page is plain HTML, CSS and JavaScript embedded in the binary (no
// build step, no external scripts). It receives its data as Server-Sent
// Events: a full frame first, then one frame per interval with what
// changed (new samples and events; members and shards in full).
//
// Routes (Handler), all GET:
//
//	/                                   the page
//	/dashboard/app.js, /dashboard/style.css
//	/dashboard/events                   the SSE stream of Frames
//	/dashboard/api/state                one Frame, in full, as JSON
//	/dashboard/api/node                 this node's report (NodeReport), for peers
//	/dashboard/api/shards/{shard}       a shard's active entities, asked of its owner
//	/dashboard/api/local/shards/{shard} a shard's entities active on this node
//	/dashboard/api/entities/{kind}/{id} the entity inspector, asked of the owner
//	/entities/{kind}/{id}               the entity inspector, answered by this node
//
// The inspector's answer (Entity) gives the entity's durable record and,
// where it is active, what its host holds of it in memory
// (actors.Runtime): writes not yet durable, replies and messages waiting
// for them, and the co-located writes a queued write waits for. That is
// where to look when an entity does not answer.
//
// The JSON shapes other than /entities/{kind}/{id} are the page's own and
// may change between versions; /status (package cluster) is the stable one.
// The Hub adds no access control: it is served behind the admin endpoint's.
package dashboard
