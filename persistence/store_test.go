package persistence_test

import (
	"errors"
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
