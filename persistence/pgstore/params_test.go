package pgstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/ordo-actors/ordo/persistence/pgstore/pgtest"
)

// TestParamsEncodeAsPgx checks that the Save statements' parameters, as
// params encodes them, are the bytes pgx puts on the wire for the plain
// slices: NULL for a nil slice, an empty array for an empty one, NULL
// elements for nil []byte, and the array type each parameter declares.
func TestParamsEncodeAsPgx(t *testing.T) {
	m := pgtype.NewMap()
	for _, tc := range []struct {
		name string
		oid  uint32
		add  func(*params)
		pgx  any
	}{
		{"text nil", pgtype.TextArrayOID, func(p *params) { p.texts(nil) }, []string(nil)},
		{"text empty", pgtype.TextArrayOID, func(p *params) { p.texts([]string{}) }, []string{}},
		{"text", pgtype.TextArrayOID, func(p *params) { p.texts([]string{"account", "", "ü{}\"\\,x"}) }, []string{"account", "", "ü{}\"\\,x"}},
		{"int8 nil", pgtype.Int8ArrayOID, func(p *params) { p.int8s(nil) }, []int64(nil)},
		{"int8 empty", pgtype.Int8ArrayOID, func(p *params) { p.int8s([]int64{}) }, []int64{}},
		{"int8", pgtype.Int8ArrayOID, func(p *params) { p.int8s([]int64{0, 1, -1, 255, 256, 1 << 62, -1 << 63}) }, []int64{0, 1, -1, 255, 256, 1 << 62, -1 << 63}},
		{"bytea nil", pgtype.ByteaArrayOID, func(p *params) { p.byteas(nil) }, [][]byte(nil)},
		{"bytea empty", pgtype.ByteaArrayOID, func(p *params) { p.byteas([][]byte{}) }, [][]byte{}},
		{"bytea", pgtype.ByteaArrayOID, func(p *params) { p.byteas([][]byte{{}, {0, 1, 2}, bytes.Repeat([]byte{9}, 300)}) },
			[][]byte{{}, {0, 1, 2}, bytes.Repeat([]byte{9}, 300)}},
		{"bytea with NULL", pgtype.ByteaArrayOID, func(p *params) { p.byteas([][]byte{{}, nil, {7}}) }, [][]byte{{}, nil, {7}}},
		{"bool nil", pgtype.BoolArrayOID, func(p *params) { p.bools(nil) }, []bool(nil)},
		{"bool empty", pgtype.BoolArrayOID, func(p *params) { p.bools([]bool{}) }, []bool{}},
		{"bool", pgtype.BoolArrayOID, func(p *params) { p.bools([]bool{true, false, true}) }, []bool{true, false, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := getParams()
			defer p.release()
			tc.add(p)
			got := p.done()
			want := encode(t, m, tc.oid, tc.pgx)
			if len(got) != 1 || len(p.oids) != 1 {
				t.Fatalf("%d values, %d types; want one each", len(got), len(p.oids))
			}
			if !bytes.Equal(got[0], want) || (got[0] == nil) != (want == nil) {
				t.Fatalf("encoded %x (nil %v), pgx encodes %x (nil %v)", got[0], got[0] == nil, want, want == nil)
			}
			if p.oids[0] != tc.oid {
				t.Fatalf("declared type %d, want %d", p.oids[0], tc.oid)
			}
		})
	}
}

// TestParamsKeepOrderAndBounds checks that several parameters, NULLs
// among them, come out in order, each its own bytes, none able to grow
// into the next.
func TestParamsKeepOrderAndBounds(t *testing.T) {
	m := pgtype.NewMap()
	p := getParams()
	defer p.release()
	p.int8s([]int64{7})
	p.texts(nil)
	p.byteas([][]byte{[]byte("data")})
	p.bools([]bool{true})
	got := p.done()
	want := [][]byte{
		encode(t, m, pgtype.Int8ArrayOID, []int64{7}),
		nil,
		encode(t, m, pgtype.ByteaArrayOID, [][]byte{[]byte("data")}),
		encode(t, m, pgtype.BoolArrayOID, []bool{true}),
	}
	if len(got) != len(want) {
		t.Fatalf("%d values, want %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) || (got[i] == nil) != (want[i] == nil) {
			t.Fatalf("value %d: %x, want %x", i, got[i], want[i])
		}
		if cap(got[i]) != len(got[i]) {
			t.Fatalf("value %d: capacity %d beyond its length %d", i, cap(got[i]), len(got[i]))
		}
	}
	wantOIDs := []uint32{pgtype.Int8ArrayOID, pgtype.TextArrayOID, pgtype.ByteaArrayOID, pgtype.BoolArrayOID}
	for i, oid := range wantOIDs {
		if p.oids[i] != oid {
			t.Fatalf("type of value %d: %d, want %d", i, p.oids[i], oid)
		}
	}
}

// TestParamsReuseTheirBuffer checks that a Save's parameters, once a
// pooled params has held a batch of that size, cost no allocation
// however many records the batch has: the buffer is kept between Saves.
func TestParamsReuseTheirBuffer(t *testing.T) {
	const n = 512
	ints, strs, blbs, bls := make([]int64, n), make([]string, n), make([][]byte, n), make([]bool, n)
	for i := range n {
		ints[i], strs[i], blbs[i], bls[i] = int64(i), "account-0000", bytes.Repeat([]byte{1}, 256), i%2 == 0
	}
	p := new(params)
	fill := func() {
		p.int8s(ints)
		p.texts(strs)
		p.byteas(blbs)
		p.bools(bls)
		_ = p.done()
		p.buf, p.ends, p.oids = p.buf[:0], p.ends[:0], p.oids[:0]
		clear(p.values)
		p.values = p.values[:0]
	}
	fill()
	if allocs := testing.AllocsPerRun(20, fill); allocs != 0 {
		t.Fatalf("%v allocations to encode a batch of %d records again, want 0", allocs, n)
	}
}

// TestParamsPoolDropsHugeBuffers checks that a params that held a batch
// beyond maxPooledParams goes back to the pool without its buffer.
func TestParamsPoolDropsHugeBuffers(t *testing.T) {
	p := new(params)
	p.byteas([][]byte{make([]byte, maxPooledParams+1)})
	p.release()
	if p.buf != nil || len(p.ends) != 0 || len(p.oids) != 0 || len(p.values) != 0 {
		t.Fatalf("released params keeps a buffer of %d bytes, %d ends, %d types, %d values",
			cap(p.buf), len(p.ends), len(p.oids), len(p.values))
	}
}

// TestColsReadsBinaryColumns checks the result decoding: int8 and text
// columns, NULLs, and a malformed int8 refused with an error.
func TestColsReadsBinaryColumns(t *testing.T) {
	var (
		n, null *int64
		s, none *string
	)
	row := [][]byte{binary.BigEndian.AppendUint64(nil, uint64(1<<40+3)), nil, []byte("acct"), nil}
	if err := cols(row, &n, &null, &s, &none); err != nil {
		t.Fatal(err)
	}
	if n == nil || *n != 1<<40+3 || null != nil || s == nil || *s != "acct" || none != nil {
		t.Fatalf("read %v %v %v %v", n, null, s, none)
	}
	if err := cols([][]byte{{1, 2, 3}}, &n); err == nil {
		t.Fatal("a 3-byte int8 column was accepted")
	}
	if err := cols(row, &n); err == nil {
		t.Fatal("a row of 4 columns was read into 1 destination")
	}
}

// FuzzParamsDecodeAsSent encodes arbitrary arrays with params and decodes
// them with pgx's binary decoders, which follow PostgreSQL's array_recv:
// every array must come back equal.
func FuzzParamsDecodeAsSent(f *testing.F) {
	f.Add([]byte("a\x00bc\x00"), int64(-1), uint8(3))
	f.Add([]byte{}, int64(0), uint8(0))
	f.Add(bytes.Repeat([]byte{0xff}, 70), int64(1<<62), uint8(255))
	m := pgtype.NewMap()
	f.Fuzz(func(t *testing.T, data []byte, seed int64, mask uint8) {
		// Split data at zero bytes into elements; mask picks NULLs and bools.
		var blbs [][]byte
		var strs []string
		var ints []int64
		var bls []bool
		for i, part := range bytes.Split(data, []byte{0}) {
			bit := mask&(1<<(i%8)) != 0
			if bit && i%3 == 0 {
				blbs = append(blbs, nil)
			} else {
				blbs = append(blbs, part)
			}
			strs = append(strs, string(part))
			ints = append(ints, seed*int64(i+1)+int64(len(part)))
			bls = append(bls, bit)
		}
		p := getParams()
		defer p.release()
		p.byteas(blbs)
		p.texts(strs)
		p.int8s(ints)
		p.bools(bls)
		v := p.done()

		var gotBlbs [][]byte
		var gotStrs []string
		var gotInts []int64
		var gotBls []bool
		for i, dst := range []any{&gotBlbs, &gotStrs, &gotInts, &gotBls} {
			if err := m.Scan(p.oids[i], pgtype.BinaryFormatCode, v[i], dst); err != nil {
				t.Fatalf("value %d (type %d): %v", i, p.oids[i], err)
			}
		}
		if len(gotBlbs) != len(blbs) {
			t.Fatalf("bytea[]: %d elements, sent %d", len(gotBlbs), len(blbs))
		}
		for i := range blbs {
			if !bytes.Equal(gotBlbs[i], blbs[i]) || (gotBlbs[i] == nil) != (blbs[i] == nil) {
				t.Fatalf("bytea[%d]: %x, sent %x", i, gotBlbs[i], blbs[i])
			}
		}
		for i := range strs {
			if gotStrs[i] != strs[i] || gotInts[i] != ints[i] || gotBls[i] != bls[i] {
				t.Fatalf("element %d: %q %d %v, sent %q %d %v", i, gotStrs[i], gotInts[i], gotBls[i], strs[i], ints[i], bls[i])
			}
		}
	})
}

// exec, against PostgreSQL: parameters of other types than the statement
// declares are refused before anything is sent, with an error naming
// both; a statement PostgreSQL refuses comes back as its *pgconn.PgError;
// and the connection serves the next statement either way.
func TestExecChecksParameterTypes(t *testing.T) {
	url, schema := pgtest.URL(t), pgtest.Schema(t)
	ctx := t.Context()
	cfg := Config{URL: url, Schema: schema, MaxConns: 1} // one connection: every exec reuses it
	s, err := Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const sql = `SELECT x, y FROM unnest($1::bigint[], $2::text[]) AS r(x, y) ORDER BY x`
	run := func(add func(*params)) ([][2]string, error) {
		p := getParams()
		defer p.release()
		add(p)
		var rows [][2]string
		err := s.exec(ctx, sql, p, func(row [][]byte) error {
			var x *int64
			var y *string
			if err := cols(row, &x, &y); err != nil {
				return err
			}
			rows = append(rows, [2]string{fmt.Sprint(*x), *y})
			return nil
		})
		return rows, err
	}

	_, err = run(func(p *params) { p.texts([]string{"a"}); p.texts([]string{"b"}) })
	if err == nil || !strings.Contains(err.Error(), "parameters of types") {
		t.Fatalf("text[] for a bigint[] parameter: %v, want the types refused", err)
	}
	_, err = run(func(p *params) { p.int8s([]int64{1}) })
	if err == nil || !strings.Contains(err.Error(), "parameters of types") {
		t.Fatalf("one parameter of two: %v, want the types refused", err)
	}
	_, err = run(func(p *params) { p.int8s([]int64{1, 1}); p.texts([]string{"a", "b"}) })
	if err != nil {
		t.Fatal(err)
	}
	p := getParams()
	p.int8s([]int64{0})
	err = s.exec(ctx, `SELECT 1/x FROM unnest($1::bigint[]) AS r(x)`, p, func([][]byte) error { return nil })
	p.release()
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "22012" {
		t.Fatalf("division by zero: %v, want a *pgconn.PgError 22012", err)
	}
	rows, err := run(func(p *params) { p.int8s([]int64{2, -1}); p.texts([]string{"two", "ü"}) })
	if err != nil {
		t.Fatal(err)
	}
	if want := [][2]string{{"-1", "ü"}, {"2", "two"}}; fmt.Sprint(rows) != fmt.Sprint(want) {
		t.Fatalf("rows %v, want %v", rows, want)
	}
}

// A large statement is sent from the connection's own write buffer
// (reserveWrite): once that has grown, a statement of 256 KiB of
// parameters allocates a small part of its size, where pgx alone grows a
// new buffer by doubling for each. The values still arrive whole, in
// statements of every size and after a refused one.
func TestExecReusesTheConnectionsWriteBuffer(t *testing.T) {
	url, schema := pgtest.URL(t), pgtest.Schema(t)
	ctx := t.Context()
	s, err := Open(ctx, Config{URL: url, Schema: schema, MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const sql = `SELECT count(*), coalesce(sum(get_byte(b, 0) + length(b)), 0) FROM unnest($1::bytea[]) AS r(b)`
	// One params throughout: the pool may drop what it is given (it
	// does at random under the race detector).
	p := new(params)
	blobs := make([][]byte, 0, 256)
	run := func(n, size int) {
		t.Helper()
		blobs = blobs[:0]
		want := int64(0)
		for i := range n {
			blobs = append(blobs, bytes.Repeat([]byte{byte(i)}, size))
			want += int64(i%256 + size)
		}
		p.reset()
		p.byteas(blobs)
		var count, sum *int64
		err := s.exec(ctx, sql, p, func(row [][]byte) error { return cols(row, &count, &sum) })
		if err != nil {
			t.Fatalf("%d values of %d bytes: %v", n, size, err)
		}
		if *count != int64(n) || *sum != want {
			t.Fatalf("%d values of %d bytes: count %d, sum %d; want %d, %d", n, size, *count, *sum, n, want)
		}
	}
	for _, c := range [][2]int{{1, 10}, {64, 4096}, {3, 300}, {64, 4096}, {200, 4096}, {2, 100}} {
		run(c[0], c[1])
	}
	p.reset()
	p.int8s([]int64{0})
	if err := s.exec(ctx, `SELECT 1/x FROM unnest($1::bigint[]) AS r(x)`, p, func([][]byte) error { return nil }); err == nil {
		t.Fatal("division by zero: no error")
	}
	run(64, 4096)

	const rounds = 10
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range rounds {
		run(64, 4096)
	}
	runtime.ReadMemStats(&after)
	// Each round allocates its 256 KiB of blobs in the test itself; the
	// statement must add less than a quarter of that.
	perRound := (after.TotalAlloc - before.TotalAlloc) / rounds
	if limit := uint64(64*4096) + 64<<10; perRound > limit {
		t.Fatalf("%d bytes allocated per statement of 256 KiB, want at most %d", perRound, limit)
	}
}
