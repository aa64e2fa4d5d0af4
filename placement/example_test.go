package placement_test

import (
	"fmt"

	"github.com/ordo-actors/ordo/placement"
)

// Desired is a pure function of the shard and the live set, so every node
// agrees on it; a joining node takes only the shards it wins.
func ExampleDesired() {
	live := []string{"node-a", "node-b", "node-c"}
	for shard := uint32(0); shard < 6; shard++ {
		fmt.Println(shard, placement.Desired(shard, live))
	}
	fmt.Println("revoker of node-c:", placement.Revoker("node-c", live))
	// Output:
	// 0 node-a
	// 1 node-b
	// 2 node-a
	// 3 node-b
	// 4 node-b
	// 5 node-a
	// revoker of node-c: node-b
}
