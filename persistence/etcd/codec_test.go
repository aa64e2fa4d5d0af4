package etcdstore

import (
	"bytes"
	"testing"

	"github.com/ordo-actors/ordo/persistence"
)

func FuzzDecodeRecord(f *testing.F) {
	f.Add(encodeRecord(&persistence.Record{Shard: 1, Epoch: 1, Data: []byte("x")}))
	f.Add(encodeRecord(&persistence.Record{Shard: ^uint32(0), Epoch: 1<<63 - 1, Data: nil}))
	f.Add([]byte{1, 0x80, 0x00, 1})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		shard, epoch, data, err := decodeRecord(b)
		if err != nil {
			return
		}
		if epoch <= 0 {
			t.Fatalf("decoded epoch %d", epoch)
		}
		// Only canonical encodings decode, so encoding is the exact inverse.
		again := encodeRecord(&persistence.Record{Shard: shard, Epoch: epoch, Data: data})
		if !bytes.Equal(again, b) {
			t.Fatalf("%x decodes to (%d, %d, %x), which encodes to %x", b, shard, epoch, data, again)
		}
	})
}

// FuzzEntityKey checks that distinct (kind, id) pairs never share a key.
func FuzzEntityKey(f *testing.F) {
	f.Add("k", "a/b", "k/a", "b")
	f.Add("a%2Fb", "c", "a/b", "c")
	f.Add("k", "x", "k", "x")
	f.Fuzz(func(t *testing.T, k1, i1, k2, i2 string) {
		if persistence.ValidateKey(k1, i1) != nil || persistence.ValidateKey(k2, i2) != nil {
			return
		}
		same := entityKey("/p/", k1, i1) == entityKey("/p/", k2, i2)
		if same != (k1 == k2 && i1 == i2) {
			t.Fatalf("(%q, %q) and (%q, %q): same key %v", k1, i1, k2, i2, same)
		}
	})
}

func FuzzParseFence(f *testing.F) {
	f.Add([]byte("1"))
	f.Add([]byte("+1"))
	f.Add([]byte("01"))
	f.Add([]byte("9223372036854775807"))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := parseFence(b)
		if err != nil {
			return
		}
		// A fence the Save guard compares byte-wise must have one spelling.
		if e <= 0 || formatFence(e) != string(b) {
			t.Fatalf("%q parsed as %d", b, e)
		}
	})
}
