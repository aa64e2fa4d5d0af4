//go:build race

package main

// raceEnabled reports whether the race detector is on: cluster.Node.Kill
// races with the node's router actor (cluster/node.go: Kill sets n.tr to nil
// while routerActor.Receive may still read it), so under -race the
// end-to-end test stops the node as SIGSTOP would instead.
const raceEnabled = true
