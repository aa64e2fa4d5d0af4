package etcdstore

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/ordo-actors/ordo/persistence"
)

func FuzzDecodeRecord(f *testing.F) {
	f.Add([]byte(encodeRecord(&persistence.Record{Shard: 1, Epoch: 1, Data: []byte("x")})))
	f.Add([]byte(encodeRecord(&persistence.Record{Shard: ^uint32(0), Epoch: 1<<63 - 1, Data: nil})))
	f.Add([]byte(encodeRecord(&persistence.Record{Shard: 7, Epoch: 2, Due: 1<<63 - 1, Data: []byte("x")})))
	f.Add([]byte{1, 0x80, 0x00, 1})
	f.Add([]byte{2, 1, 1, 0})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		shard, epoch, due, data, err := decodeRecord(b)
		if err != nil {
			return
		}
		if epoch <= 0 || due < 0 {
			t.Fatalf("decoded epoch %d, due %d", epoch, due)
		}
		// Only canonical encodings decode, so encoding is the exact inverse.
		again := encodeRecord(&persistence.Record{Shard: shard, Epoch: epoch, Due: due, Data: data})
		if again != string(b) {
			t.Fatalf("%x decodes to (%d, %d, %d, %x), which encodes to %x", b, shard, epoch, due, data, again)
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

// FuzzEventKey checks that an entity's event keys lie in its own range
// and its kind's, and in no other entity's, and that they parse back.
func FuzzEventKey(f *testing.F) {
	f.Add("k", "a", "k", "a/b", uint64(1))
	f.Add("k", "a", "k", "ab", uint64(99))
	f.Add("k/a", "b", "k", "a/b", uint64(7))
	f.Add("k", "a", "k%2Fa", "b", uint64(persistence.MaxSeq))
	f.Fuzz(func(t *testing.T, k1, i1, k2, i2 string, seq uint64) {
		if persistence.ValidateKey(k1, i1) != nil || persistence.ValidateKey(k2, i2) != nil || seq == 0 || seq > persistence.MaxSeq {
			return
		}
		key := eventKey("/p/", k1, i1, seq)
		// The spelling of stored keys never changes.
		if want := journalEntityPrefix("/p/", k1, i1) + fmt.Sprintf("%020d", seq); key != want {
			t.Fatalf("eventKey = %q, want %q", key, want)
		}
		in := func(key, prefix string) bool { return strings.HasPrefix(key, prefix) }
		if !in(key, journalEntityPrefix("/p/", k1, i1)) || !in(key, journalKindPrefix("/p/", k1)) {
			t.Fatalf("%q outside its own ranges", key)
		}
		if (k1 != k2 || i1 != i2) && in(key, journalEntityPrefix("/p/", k2, i2)) {
			t.Fatalf("event key of (%q, %q) in the range of (%q, %q)", k1, i1, k2, i2)
		}
		if k1 != k2 && in(key, journalKindPrefix("/p/", k2)) {
			t.Fatalf("event key of kind %q in the range of kind %q", k1, k2)
		}
		id, got, err := parseEventKey(strings.TrimPrefix(key, journalKindPrefix("/p/", k1)))
		if err != nil || id != i1 || got != seq {
			t.Fatalf("%q parses as (%q, %d, %v)", key, id, got, err)
		}
		// Keys of one entity sort by seq.
		if seq > 1 && eventKey("/p/", k1, i1, seq-1) >= key {
			t.Fatalf("seq %d does not sort before %d", seq-1, seq)
		}
	})
}

// TestStoredSpellings pins the bytes of stored values and key parts: a
// store written by one version is read by the next.
func TestStoredSpellings(t *testing.T) {
	for _, seq := range []uint64{0, 1, 9, 10, 12345, persistence.MaxSeq, 1<<64 - 1} {
		if got, want := formatSeq(seq), fmt.Sprintf("%020d", seq); got != want {
			t.Errorf("formatSeq(%d) = %q, want %q", seq, got, want)
		}
	}
	for _, c := range []struct {
		r    persistence.Record
		want string
	}{
		{persistence.Record{Shard: 1, Epoch: 1, Data: []byte("x")}, "\x01\x01\x01x"},
		{persistence.Record{Shard: 300, Epoch: 2, Due: 5, Data: []byte("ab")}, "\x02\xac\x02\x02\x05ab"},
		{persistence.Record{Shard: 0, Epoch: 1}, "\x01\x00\x01"},
	} {
		if got := encodeRecord(&c.r); got != c.want {
			t.Errorf("encodeRecord(shard %d, epoch %d, due %d, %q) = %q, want %q", c.r.Shard, c.r.Epoch, c.r.Due, c.r.Data, got, c.want)
		}
	}
	if got, want := encodeEvent([]byte("ev")), "\x01ev"; got != want {
		t.Errorf("encodeEvent = %q, want %q", got, want)
	}
}

func FuzzParseEventKey(f *testing.F) {
	f.Add("a\x0000000000000000000001")
	f.Add("\x0000000000000000000001")
	f.Add("a\x00-0000000000000000001")
	f.Add("a\x0099999999999999999999")
	f.Fuzz(func(t *testing.T, rest string) {
		id, seq, err := parseEventKey(rest)
		if err != nil {
			return
		}
		if id == "" || seq == 0 || seq > persistence.MaxSeq || id+"\x00"+formatSeq(seq) != rest {
			t.Fatalf("%q parsed as (%q, %d)", rest, id, seq)
		}
	})
}

func FuzzDecodeEvent(f *testing.F) {
	f.Add([]byte(encodeEvent([]byte("x"))))
	f.Add([]byte(encodeEvent(nil)))
	f.Add([]byte{2, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		data, err := decodeEvent(b)
		if err != nil {
			return
		}
		if data == nil || encodeEvent(data) != string(b) {
			t.Fatalf("%x decodes to %x", b, data)
		}
	})
}

// FuzzDecodeOffset checks that only offsets encodeOffset makes decode, and
// that they decode to what was encoded.
func FuzzDecodeOffset(f *testing.F) {
	f.Add([]byte(encodeOffset(feedPos{rev: 1})))
	f.Add([]byte(encodeOffset(feedPos{rev: 1 << 40, key: "a\x00" + formatSeq(3)})))
	f.Add([]byte("e\x80\x01"))
	f.Add([]byte("e\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := decodeOffset(persistence.Offset(b))
		if err != nil {
			if !errors.Is(err, persistence.ErrInvalid) {
				t.Fatalf("%q: %v does not match ErrInvalid", b, err)
			}
			return
		}
		if string(encodeOffset(p)) != string(b) {
			t.Fatalf("%q decodes to %+v, which encodes to %q", b, p, encodeOffset(p))
		}
	})
}

func TestPutWhatNamesThePut(t *testing.T) {
	for _, c := range []struct {
		w    putWhat
		want string
	}{
		{putWhat{what: "record", kind: "k", id: "a/b"}, "record k/a/b"},
		{putWhat{what: "event", kind: "k", id: "a", seq: 7}, "event 7 of k/a"},
		{putWhat{what: "reminder index entry of", kind: "k", id: "a"}, "reminder index entry of k/a"},
	} {
		if got := fmt.Sprintf("put %s", c.w); got != "put "+c.want {
			t.Errorf("%+v formats as %q, want %q", c.w, got, c.want)
		}
	}
}
