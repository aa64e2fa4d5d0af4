package pgstore

import (
	"cmp"
	"errors"
	"slices"
	"testing"

	"github.com/ordo-actors/ordo/persistence"
)

// FuzzDecodeOffset checks that only offsets encodeOffset makes decode, to
// what was encoded: shards strictly increasing, positions from 1, Seqs of
// rows read in part up to MaxSeq, and the tag of such offsets only on one
// that has one.
func FuzzDecodeOffset(f *testing.F) {
	f.Add([]byte(encodeOffset([]shardPos{{0, 1, 0}})))
	f.Add([]byte(encodeOffset([]shardPos{{3, 9, 0}, {4, 1, 0}, {1 << 31, 1 << 40, 0}})))
	f.Add([]byte(encodeOffset([]shardPos{{3, 9, 0}, {4, 1, 7}})))
	f.Add([]byte("q\x00\x01\x00"))
	f.Add([]byte("p\x00\x00"))
	f.Add([]byte("p\xff\xff\xff\xff\x0f\x01\x00\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		pos, err := decodeOffset(persistence.Offset(b))
		if err != nil {
			if !errors.Is(err, persistence.ErrInvalid) {
				t.Fatalf("%q: %v does not match ErrInvalid", b, err)
			}
			return
		}
		if !slices.IsSortedFunc(pos, func(a, b shardPos) int { return cmp.Compare(a.shard, b.shard) }) {
			t.Fatalf("%q decodes to unsorted %v", b, pos)
		}
		for i, p := range pos {
			if p.pos == 0 || p.pos > persistence.MaxSeq || p.seq > persistence.MaxSeq || i > 0 && p.shard == pos[i-1].shard {
				t.Fatalf("%q decodes to %v", b, pos)
			}
		}
		if string(encodeOffset(pos)) != string(b) {
			t.Fatalf("%q decodes to %v, which encodes to %q", b, pos, encodeOffset(pos))
		}
	})
}
