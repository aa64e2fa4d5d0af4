// Package etcdembed runs real etcd members inside the current process: a
// single member on free loopback ports for the one-binary default and for
// tests (Start), a multi-member cluster whose members can be killed and
// restarted (StartCluster), and a TCP proxy in front of a member's client
// URL that can partition or delay the traffic of the clients that use it
// (StartProxy).
//
// It serves etcd; it knows nothing of placement or of ordo's nodes. It is
// importable from outside this module (examples/hello embeds a node on it
// exactly as a user's program would), which is why it is not internal.
//
// Nothing here imports testing; tests pass t.TempDir() as the data
// directory and close what they start.
package etcdembed
