package persistence_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"go.uber.org/goleak"

	"github.com/ordo-actors/ordo/persistence"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestFencedError(t *testing.T) {
	var err error = &persistence.FencedError{Shard: 3, Have: 4, Want: 5}
	if !errors.Is(err, persistence.ErrFenced) {
		t.Fatal("FencedError does not match ErrFenced")
	}
	wrapped := errors.Join(errors.New("ctx"), err)
	var fe *persistence.FencedError
	if !errors.As(wrapped, &fe) || fe.Want != 5 || !errors.Is(wrapped, persistence.ErrFenced) {
		t.Fatal("wrapped FencedError lost")
	}
	if errors.Is(err, persistence.ErrInvalid) {
		t.Fatal("FencedError matches ErrInvalid")
	}
}

// FuzzValidateBatch checks that ValidateBatch accepts exactly the batches
// the contract allows. The fuzzer builds a batch of two records.
func FuzzValidateBatch(f *testing.F) {
	f.Add("k", "a", uint32(1), int64(1), false, "k", "b", uint32(1), int64(1), false)
	f.Add("k", "a", uint32(1), int64(1), false, "k", "a", uint32(2), int64(1), false)
	f.Add("k", "a", uint32(1), int64(1), false, "k", "b", uint32(1), int64(2), false)
	f.Add("", "a", uint32(1), int64(0), true, "k\xff", "b\x00", uint32(1), int64(-1), false)
	f.Fuzz(func(t *testing.T, k1, i1 string, s1 uint32, e1 int64, nil1 bool, k2, i2 string, s2 uint32, e2 int64, nil2 bool) {
		mk := func(k, i string, s uint32, e int64, isNil bool) persistence.Record {
			r := persistence.Record{Kind: k, ID: i, Shard: s, Epoch: e}
			if !isNil {
				r.Data = []byte{}
			}
			return r
		}
		recs := []persistence.Record{mk(k1, i1, s1, e1, nil1), mk(k2, i2, s2, e2, nil2)}
		err := persistence.ValidateBatch(recs)
		valid := func(k, i string) bool {
			ok := func(s string, max int) bool {
				return s != "" && len(s) <= max && utf8.ValidString(s) && !strings.Contains(s, "\x00")
			}
			return ok(k, persistence.MaxKindLen) && ok(i, persistence.MaxIDLen)
		}
		want := valid(k1, i1) && valid(k2, i2) && e1 > 0 && e2 > 0 && !nil1 && !nil2 &&
			(k1 != k2 || i1 != i2) && (s1 != s2 || e1 == e2)
		if want != (err == nil) {
			t.Fatalf("ValidateBatch(%+v) = %v, want valid %v", recs, err, want)
		}
		if err != nil && !errors.Is(err, persistence.ErrInvalid) {
			t.Fatalf("error %v does not match ErrInvalid", err)
		}
		if (persistence.ValidateKey(k1, i1) == nil) != valid(k1, i1) {
			t.Fatalf("ValidateKey(%q, %q) disagrees", k1, i1)
		}
	})
}

// FuzzValidateEvents checks that ValidateEvents accepts exactly runs of
// consecutive seqs from 1..MaxSeq with non-nil data.
func FuzzValidateEvents(f *testing.F) {
	f.Add(uint64(1), uint64(2), uint64(3), false)
	f.Add(uint64(0), uint64(1), uint64(2), false)
	f.Add(uint64(1), uint64(3), uint64(4), false)
	f.Add(uint64(persistence.MaxSeq-1), uint64(persistence.MaxSeq), uint64(persistence.MaxSeq+1), false)
	f.Add(uint64(5), uint64(6), uint64(7), true)
	f.Fuzz(func(t *testing.T, a, b, c uint64, nilData bool) {
		evs := []persistence.Event{{Seq: a, Data: []byte{}}, {Seq: b, Data: []byte("x")}, {Seq: c, Data: []byte{}}}
		if nilData {
			evs[1].Data = nil
		}
		err := persistence.ValidateEvents(evs)
		want := a >= 1 && c <= persistence.MaxSeq && b == a+1 && c == b+1 && !nilData
		if want != (err == nil) {
			t.Fatalf("ValidateEvents(%d, %d, %d, nil %v) = %v, want valid %v", a, b, c, nilData, err, want)
		}
		if err != nil && !errors.Is(err, persistence.ErrInvalid) {
			t.Fatalf("error %v does not match ErrInvalid", err)
		}
		// A record carrying them is refused by ValidateBatch the same way.
		batchErr := persistence.ValidateBatch([]persistence.Record{{Kind: "k", ID: "a", Shard: 1, Epoch: 1, Data: []byte{}, Events: evs}})
		if (batchErr == nil) != want {
			t.Fatalf("ValidateBatch disagrees: %v", batchErr)
		}
	})
}

func TestSequenceError(t *testing.T) {
	var err error = &persistence.SequenceError{Shard: 1, Kind: "k", ID: "a", First: 5, Last: 3}
	if !errors.Is(err, persistence.ErrSequence) || errors.Is(err, persistence.ErrFenced) || errors.Is(err, persistence.ErrInvalid) {
		t.Fatalf("%v matches the wrong sentinels", err)
	}
	var se *persistence.SequenceError
	if !errors.As(fmt.Errorf("wrapped: %w", err), &se) || se.Last != 3 {
		t.Fatal("wrapped SequenceError lost")
	}
	if got := err.Error(); !strings.Contains(got, "k/a") || !strings.Contains(got, "seq 5") {
		t.Fatalf("message %q", got)
	}
}

func TestDeleteBound(t *testing.T) {
	ev := func(seqs ...uint64) []persistence.Event {
		var out []persistence.Event
		for _, s := range seqs {
			out = append(out, persistence.Event{Seq: s, Data: []byte{}})
		}
		return out
	}
	for _, c := range []struct {
		del, last uint64
		events    []persistence.Event
		want      uint64
	}{
		{0, 10, nil, 0},
		{5, 10, nil, 5},
		{50, 10, nil, 10},        // the last is kept
		{50, 0, nil, 0},          // no journal
		{50, 10, ev(11, 12), 12}, // the new last is kept
		{11, 10, ev(11, 12), 11},
	} {
		r := persistence.Record{DeleteEventsBefore: c.del, Events: c.events}
		if got := persistence.DeleteBound(&r, c.last); got != c.want {
			t.Fatalf("DeleteBound(del %d, last %d, %d events) = %d, want %d", c.del, c.last, len(c.events), got, c.want)
		}
	}
}

// ValidateKey says why a name is invalid, whatever the name's bytes
// before the fault: an invalid UTF-8 sequence is named as such even when
// a NUL byte comes first.
func TestValidateKeyReasons(t *testing.T) {
	for id, want := range map[string]string{
		"": "empty id",
		strings.Repeat("a", persistence.MaxIDLen+1): "id is",
		"a\x00":      "NUL byte",
		"é\x00":      "NUL byte",
		"a\x00é":     "NUL byte",
		"a\xff":      "not valid UTF-8",
		"a\x00\xff":  "not valid UTF-8",
		"é\xff\x00":  "not valid UTF-8",
		"accounts-é": "",
		"plain-1":    "",
	} {
		err := persistence.ValidateKey("k", id)
		switch {
		case want == "" && err != nil:
			t.Errorf("ValidateKey(k, %q) = %v", id, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, persistence.ErrInvalid)):
			t.Errorf("ValidateKey(k, %q) = %v, want %q", id, err, want)
		}
	}
}

// BenchmarkValidateKey validates a kind and ID as every call's target is:
// ASCII, and with a non-ASCII ID.
func BenchmarkValidateKey(b *testing.B) {
	for _, id := range []string{"acct-000042", "konto-müller-42"} {
		b.Run(fmt.Sprintf("%d-bytes", len(id)), func(b *testing.B) {
			for b.Loop() {
				if persistence.ValidateKey("account", id) != nil {
					b.Fatal("invalid")
				}
			}
		})
	}
}
