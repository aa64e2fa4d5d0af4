package memory

import (
	"errors"
	"testing"

	"github.com/ordo-actors/ordo/persistence"
)

// FuzzDecodeOffset checks that only offsets encodeOffset makes decode, and
// to what was encoded.
func FuzzDecodeOffset(f *testing.F) {
	f.Add([]byte(encodeOffset(1)))
	f.Add([]byte(encodeOffset(1 << 62)))
	f.Add([]byte("m\x80\x00"))
	f.Add([]byte("m\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := decodeOffset(persistence.Offset(b))
		if err != nil {
			if !errors.Is(err, persistence.ErrInvalid) {
				t.Fatalf("%q: %v does not match ErrInvalid", b, err)
			}
			return
		}
		if string(encodeOffset(v)) != string(b) {
			t.Fatalf("%q decodes to %d, which encodes to %q", b, v, encodeOffset(v))
		}
	})
}
