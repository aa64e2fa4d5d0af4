package cluster

import "github.com/ordo-actors/ordo/actors"

// HostOf returns n's entity host, for this package's tests that reach
// past placement (submit to a paused node, drop a shard): it exists only
// while testing, so that Node exports nothing for tests alone.
func HostOf(n *Node) *actors.Host { return n.host }
