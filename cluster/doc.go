// Package cluster ties ordo together: a Node joins the cluster by gossip
// (hashicorp/memberlist), takes part in placement through etcd, hosts the
// entities of the shards it owns (package actors), and routes calls to the
// owners of the others over its gRPC transport (service ordo.v1.Transport:
// one long-lived stream per pair of processes, frames of calls one way and
// of results the other, results matched by call ID and request ID; a
// one-way call, an entity's Send with actors.AtMostOnce, gets no result).
//
// Calls go to the current owner of the entity's shard, found in the etcd
// placement table. A NotHere, fenced or unavailable answer, or an owner that
// cannot be reached, makes the caller retry with exponential backoff and
// full jitter (no sooner than an overloaded owner's retry-after hint) until
// its context ends or RetryPolicy.MaxAttempts attempts reached a node,
// always with the same request ID, so that a retried call is applied at
// most once (and, retried until it succeeds, exactly once). A client-only
// process uses Dial and the same call API (actors.Call or cluster.Call)
// without hosting anything.
//
// Ordering: calls one caller makes one after another (each waiting for the
// previous reply) reach the entity in that order, wherever it moves.
//
// Failover: when gossip declares a node dead and its lease shows a missed
// renewal, one live node (placement.Revoker) revokes the lease, so the dead
// node's shards free at once instead of after the lease TTL. Safety never
// depends on this: a node that was alive after all is fenced by storage and
// rejoins under a new lease.
//
// Gossip security: with Config.GossipKeys, gossip is encrypted and
// authenticated (memberlist's keyring, AES-GCM; Node.SetGossipKeys rotates
// keys on a running node); without, it is plaintext and a warning is
// logged at Start. Either way a gossip member counts only through the etcd
// registration it matches: same memberlist name and node ID, same remote
// address and lease in its metadata, same gossip address. A member that
// matches no registration never makes a node live, and a registered node
// is marked dead, and its lease considered for revocation, only by news of
// the member that matches its registration; the mark clears when that
// member is alive again. Members that stay unmatched are logged (once
// each) and listed in Status with the mismatch. A member holding the key
// is still trusted with failure detection itself (memberlist's suspect and
// dead messages about others); safety never depends on it.
//
// Graceful handoff: Shutdown drains every shard (stop admitting, finish,
// flush, stop entities) before releasing its lock; callers see retries,
// not failures.
//
// Security: with Config.TLS (nodes) and ClientConfig.TLS (clients), every
// connection of the transport, node to node and client to node, is mutual
// TLS 1.3 with material from package ordotls: a node accepts only callers
// whose certificate its CAs issued, and a caller accepts only a node whose
// certificate its CAs issued for the address it dials. Material loaded
// from files (ordotls.Load) is re-read when they change, so certificates
// and CAs rotate without a restart. A node knows each caller by its
// certificate's subject common name, as a node when the certificate is
// valid for server authentication (ordotls CA.Node) and as an external
// client otherwise (CA.Client). Handlers see their caller
// (actors.Context.Caller): an entity (only a node may say a message comes
// from one), a node, the process itself, or a client. An external client
// may not send the messages a kind declares internal (actors.Internal):
// they are refused with actors.ErrPermissionDenied before the entity is
// activated.
// Config.Insecure and ClientConfig.Insecure run in plaintext instead, and
// say so in a warning at start; a config that sets neither is refused.
// etcd is reached with EtcdTLS and EtcdUsername/EtcdPassword when set (a
// warning is logged when it is reached in plaintext off loopback). The
// admin endpoint needs no protection on loopback; on any other address it
// is served over TLS (AdminTLS or TLS) or guarded by AdminToken, or the
// node does not start; pprof is behind the token when one is set.
//
// Readiness: Node.Readiness, Ready and WaitReady say whether a node holds a
// valid lease, is registered, serves every shard it holds and has taken
// its share of the free shards; the admin endpoint answers /readyz from
// it and /healthz from Node.Healthy (up, whatever etcd's state).
//
// Admin endpoint: with Config.AdminAddr, or Node.Handler mounted on a
// server of the caller's, a node serves /healthz, /readyz, /status (its
// Status as JSON, a stable format), Prometheus /metrics, the web dashboard
// at / (package dashboard: the whole cluster as this node sees it, with the
// other nodes' numbers read from their admin endpoints, whose addresses
// nodes gossip) and the entity inspector, /entities/{kind}/{id}.
//
// Development: NewDev starts a Dev, one in-process host that owns every
// shard over a memory store, with no etcd, gossip or network, and gives
// handlers the same runtime a node does. It implements actors.Invoker, so
// unit tests of an application's kinds call it as they would a cluster.
//
// Tracing: with Config.TracerProvider (ClientConfig.TracerProvider in a
// client), OpenTelemetry spans are made of every call the node routes
// ("ordo.call": a caller's call or an entity's message), each of its
// attempts ("ordo.attempt", named by the owner it went to), and, on the
// owner, of its handling, the continuations, the Saves and store calls
// (see package actors). Each attempt's envelope carries the attempt
// span's context in its metadata (W3C traceparent), and a handler's
// messages carry its own, so a client call and every entity-to-entity
// message it leads to, on whatever nodes, are one trace. A call's parent
// is its context's span, or else the context its envelope carries. Each
// node's tracers carry its ID as the scope attribute "ordo.node". Without
// a provider nothing is traced and nothing is added to envelopes; the
// global otel provider is never used.
//
// Faults: Config.Faults is the one seam through which a test harness
// pauses a node (its entities, and its lease keepalives as etcd sees
// them), cuts its gossip and crashes it (see Faults; package clustertest
// implements it). Nil in production, where it costs a nil check on each
// path that consults it; nothing else of a node exists for tests.
//
// Logging: a node, a client and an embedded etcd (package etcdembed) log
// through log/slog; the zap logs of etcd's client and server are bridged
// to the same logger.
package cluster

import (
	"context"

	"github.com/ordo-actors/ordo/actors"
	"google.golang.org/protobuf/proto"
)

// Call sends msg to the entity ref through inv (a *Node or a *Client) and
// decodes the reply as R. It is actors.Call, here for discoverability.
func Call[R proto.Message](ctx context.Context, inv actors.Invoker, ref actors.Ref, msg proto.Message, opts ...actors.CallOption) (R, error) {
	return actors.Call[R](ctx, inv, ref, msg, opts...)
}
