package placement

import (
	"encoding/binary"
	"hash/fnv"
)

// Score is the rendezvous (highest-random-weight) weight of node for shard.
// It is a fixed function of its arguments: FNV-1a 64 over the node ID, a
// zero byte and the big-endian shard, finished with the splitmix64 mixer.
func Score(nodeID string, shard uint32) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(nodeID))
	var b [5]byte
	binary.BigEndian.PutUint32(b[1:], shard)
	_, _ = h.Write(b[:])
	return mix64(h.Sum64())
}

func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// Desired returns the node of live with the highest Score for shard (ties
// broken by the smaller ID), or "" when live is empty. Every node computing
// it over the same live set gets the same answer; when a node joins or
// leaves, only the shards it wins or held move.
func Desired(shard uint32, live []string) string {
	var best string
	var bestScore uint64
	for i, id := range live {
		s := Score(id, shard)
		if i == 0 || s > bestScore || s == bestScore && id < best {
			best, bestScore = id, s
		}
	}
	return best
}

// Revoker returns the one node of live that should revoke the lease of the
// dead node subject (accelerated failover): the highest Score for the
// subject's ID among live nodes other than subject, or "" when there is
// none. Every node computing it over the same live set agrees.
func Revoker(subject string, live []string) string {
	var best string
	var bestScore uint64
	found := false
	for _, id := range live {
		if id == subject {
			continue
		}
		h := fnv.New64a()
		_, _ = h.Write([]byte("revoke\x00" + subject + "\x00" + id))
		s := mix64(h.Sum64())
		if !found || s > bestScore || s == bestScore && id < best {
			best, bestScore, found = id, s, true
		}
	}
	return best
}
