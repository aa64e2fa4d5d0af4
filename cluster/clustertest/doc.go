// Package clustertest runs a whole ordo cluster inside one process: an
// embedded etcd (or a given one), a store (a given one, or the etcd or the
// PostgreSQL store it opens), nodes that host the kinds it is given, and a
// client, the nodes and the client talking mutual TLS with certificates of
// a CA kept in memory.
//
// It is the one harness of every test and tool that needs a real cluster
// in a process: the cluster package's tests, the bank's tests and
// `bank demo`, and the ordo approach of the lock lab. Start brings up a
// cluster of Config.Nodes nodes and waits until they own every shard;
// NodeConfig and StartNode add nodes one by one, each configured as the
// others but free to be changed before it starts; Kill and Restart crash a
// node and bring it back under its ID. Settled and Converged tell whether
// a set of nodes owns every shard, for callers that poll.
//
// Faults are injected through each node's fault seam (cluster.Faults),
// which NodeConfig sets to a Faults of its own: Cluster.Faults(i).Pause
// and Resume freeze and thaw node i as SIGSTOP and SIGCONT would,
// Cluster.Kill crashes it, and Cluster.Isolate and Heal cut and restore
// gossip between groups of nodes. A node built without this package has
// no fault seam, at no cost.
//
// Nothing here imports testing: a test passes t.TempDir() as Config.Dir,
// turns errors into failures and closes what it starts.
package clustertest
