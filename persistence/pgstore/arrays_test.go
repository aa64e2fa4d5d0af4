package pgstore

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"
)

// encode encodes v as a parameter of type oid, in binary, as pgx does for
// a prepared statement.
func encode(t testing.TB, m *pgtype.Map, oid uint32, v any) []byte {
	t.Helper()
	b, err := m.Encode(oid, pgtype.BinaryFormatCode, v, nil)
	if err != nil {
		t.Fatalf("encode %T as oid %d: %v", v, oid, err)
	}
	return b
}

// TestArraysEncodeAsPgx checks that the array parameters of LoadMany and
// the feed put on the wire exactly what pgx puts for the plain slices:
// NULL for a nil slice, an empty array for an empty one.
func TestArraysEncodeAsPgx(t *testing.T) {
	m := pgtype.NewMap()
	for _, tc := range []struct {
		name      string
		oid       uint32
		ours, pgx any
	}{
		{"text nil", pgtype.TextArrayOID, texts(nil), []string(nil)},
		{"text empty", pgtype.TextArrayOID, texts([]string{}), []string{}},
		{"text", pgtype.TextArrayOID, texts([]string{"account", "", "ü{}\"\\,x"}), []string{"account", "", "ü{}\"\\,x"}},
		{"int8 nil", pgtype.Int8ArrayOID, int64s(nil), []int64(nil)},
		{"int8", pgtype.Int8ArrayOID, int64s([]int64{0, 1, -1, 255, 256, 1 << 62, -1 << 63}), []int64{0, 1, -1, 255, 256, 1 << 62, -1 << 63}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, want := encode(t, m, tc.oid, tc.ours), encode(t, m, tc.oid, tc.pgx)
			if !bytes.Equal(got, want) || (got == nil) != (want == nil) {
				t.Fatalf("encoded %x (nil %v), pgx encodes %x (nil %v)", got, got == nil, want, want == nil)
			}
		})
	}
}

// TestArraysAllocateOncePerArray checks that encoding an array parameter
// costs a fixed number of allocations, whatever its length: none per
// element (pgx's own encoding of the plain slices costs one per string,
// per []byte, per int64 above 255).
func TestArraysAllocateOncePerArray(t *testing.T) {
	m := pgtype.NewMap()
	buf := make([]byte, 0, 1<<20)
	allocs := func(n int) map[string]float64 {
		strs, ints := make([]string, n), make([]int64, n)
		for i := range n {
			strs[i], ints[i] = fmt.Sprintf("id-%d", i), int64(1000+i)
		}
		out := map[string]float64{}
		for name, enc := range map[string]func(){
			"text": func() { _, _ = m.Encode(pgtype.TextArrayOID, pgtype.BinaryFormatCode, texts(strs), buf[:0]) },
			"int8": func() { _, _ = m.Encode(pgtype.Int8ArrayOID, pgtype.BinaryFormatCode, int64s(ints), buf[:0]) },
		} {
			enc() // plan once
			out[name] = testing.AllocsPerRun(20, enc)
		}
		return out
	}
	one, many := allocs(1), allocs(256)
	for name, n := range one {
		if many[name] != n {
			t.Errorf("%s: %v allocations for 256 elements, %v for 1: some are per element", name, many[name], n)
		}
		if n > 4 {
			t.Errorf("%s: %v allocations for one array, want at most 4", name, n)
		}
	}
}
