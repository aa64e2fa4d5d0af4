package actors_test

// pinnedShards are ShardOf values fixed when the hash was chosen; a change
// here breaks every deployed cluster.
var pinnedShards = []uint32{186, 109, 244}
