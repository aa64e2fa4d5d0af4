package pgstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// The Save statements take a batch as array parameters, kilobytes to
// megabytes of them. Passed to pgx as Go values, they are encoded into a
// buffer that pgx shrinks back to 256 bytes after every statement, so
// each Save grows it again, doubling, copying and zeroing several times
// its size. A Save instead encodes its arrays itself, in PostgreSQL's
// binary array format, into one buffer kept between Saves (params, from a
// pool), and runs its statement through pgconn with the encoded values
// (exec). The bytes on the wire are those pgx would send.
//
// pgx then copies those values into its connection's write buffer (the
// Bind message), and that buffer too is shrunk back to 1 KiB after every
// flush (pgproto3.Frontend.Flush), so it would again grow by doubling on
// every Save. exec first hands the connection a buffer of its own, kept
// with the connection, large enough for the whole message (reserveWrite).

// params is the encoded parameters of one statement: values[i] is
// parameter i+1 in binary format, nil for NULL.
type params struct {
	buf    []byte
	ends   []int    // ends[i]: end of parameter i in buf; -1 for NULL
	oids   []uint32 // oids[i]: type of parameter i (an array type)
	values [][]byte
}

// maxPooledParams bounds the buffer a params keeps for the next Save:
// beyond it (a batch far larger than usual) the buffer is dropped rather
// than held by the pool.
const maxPooledParams = 4 << 20

var paramsPool = sync.Pool{New: func() any { return new(params) }}

func getParams() *params { return paramsPool.Get().(*params) }

// release returns p to the pool; p and its values must not be used after.
func (p *params) release() {
	if cap(p.buf) > maxPooledParams {
		p.buf = nil
	}
	p.reset()
	paramsPool.Put(p)
}

// reset empties p, keeping its buffers.
func (p *params) reset() {
	p.buf, p.ends, p.oids = p.buf[:0], p.ends[:0], p.oids[:0]
	clear(p.values)
	p.values = p.values[:0]
}

// arrayOf maps an element type to its array type.
var arrayOf = map[uint32]uint32{
	pgtype.BoolOID:  pgtype.BoolArrayOID,
	pgtype.ByteaOID: pgtype.ByteaArrayOID,
	pgtype.Int8OID:  pgtype.Int8ArrayOID,
	pgtype.TextOID:  pgtype.TextArrayOID,
}

// header starts a one-dimensional array of n elements of type oid (with
// one dimension of length 0 when empty, as pgx writes it).
func (p *params) header(oid uint32, n int) {
	p.buf = binary.BigEndian.AppendUint32(p.buf, 1) // dimensions
	p.buf = binary.BigEndian.AppendUint32(p.buf, 0) // has NULLs: set later if so
	p.buf = binary.BigEndian.AppendUint32(p.buf, oid)
	p.buf = binary.BigEndian.AppendUint32(p.buf, uint32(n))
	p.buf = binary.BigEndian.AppendUint32(p.buf, 1) // lower bound
}

// end closes the parameter appended last, an array of oid.
func (p *params) end(oid uint32) {
	p.ends = append(p.ends, len(p.buf))
	p.oids = append(p.oids, arrayOf[oid])
}

// null adds a NULL array of oid.
func (p *params) null(oid uint32) {
	p.ends = append(p.ends, -1)
	p.oids = append(p.oids, arrayOf[oid])
}

// int8s adds v as an int8[] parameter (NULL if v is nil).
func (p *params) int8s(v []int64) {
	if v == nil {
		p.null(pgtype.Int8OID)
		return
	}
	p.header(pgtype.Int8OID, len(v))
	for _, x := range v {
		p.buf = binary.BigEndian.AppendUint32(p.buf, 8)
		p.buf = binary.BigEndian.AppendUint64(p.buf, uint64(x))
	}
	p.end(pgtype.Int8OID)
}

// texts adds v as a text[] parameter (NULL if v is nil). The strings are
// sent as they are: PostgreSQL checks that they are valid UTF-8 (the
// store validates keys before).
func (p *params) texts(v []string) {
	if v == nil {
		p.null(pgtype.TextOID)
		return
	}
	p.header(pgtype.TextOID, len(v))
	for _, s := range v {
		p.buf = binary.BigEndian.AppendUint32(p.buf, uint32(len(s)))
		p.buf = append(p.buf, s...)
	}
	p.end(pgtype.TextOID)
}

// byteas adds v as a bytea[] parameter (NULL if v is nil); a nil element
// is a NULL element.
func (p *params) byteas(v [][]byte) {
	if v == nil {
		p.null(pgtype.ByteaOID)
		return
	}
	start := len(p.buf)
	p.header(pgtype.ByteaOID, len(v))
	nulls := false
	for _, b := range v {
		if b == nil {
			nulls = true
			p.buf = binary.BigEndian.AppendUint32(p.buf, 0xffffffff) // -1: NULL
			continue
		}
		p.buf = binary.BigEndian.AppendUint32(p.buf, uint32(len(b)))
		p.buf = append(p.buf, b...)
	}
	if nulls {
		binary.BigEndian.PutUint32(p.buf[start+4:], 1)
	}
	p.end(pgtype.ByteaOID)
}

// bools adds v as a bool[] parameter (NULL if v is nil).
func (p *params) bools(v []bool) {
	if v == nil {
		p.null(pgtype.BoolOID)
		return
	}
	p.header(pgtype.BoolOID, len(v))
	for _, x := range v {
		p.buf = binary.BigEndian.AppendUint32(p.buf, 1)
		if x {
			p.buf = append(p.buf, 1)
		} else {
			p.buf = append(p.buf, 0)
		}
	}
	p.end(pgtype.BoolOID)
}

// done returns the parameters' values, slices of p's buffer.
func (p *params) done() [][]byte {
	start := 0
	for _, end := range p.ends {
		if end < 0 {
			p.values = append(p.values, nil)
			continue
		}
		p.values = append(p.values, p.buf[start:end:end])
		start = end
	}
	return p.values
}

// binaryFormat is the format code list that applies binary to every
// parameter, or to every result column.
var binaryFormat = []int16{pgtype.BinaryFormatCode}

// exec runs sql, prepared once per connection, with the encoded
// parameters p, and calls row for each result row, in binary format (a
// nil column is NULL; the slices are valid until row returns). Errors are
// those of pgx: a *pgconn.PgError when PostgreSQL refused the statement.
func (s *Store) exec(ctx context.Context, sql string, p *params, row func(cols [][]byte) error) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	sd, err := conn.Conn().Prepare(ctx, sql, sql)
	if err != nil {
		return err
	}
	if !slices.Equal(p.oids, sd.ParamOIDs) {
		return fmt.Errorf("statement takes parameters of types %v, given %v", sd.ParamOIDs, p.oids)
	}
	values := p.done()
	pc := conn.Conn().PgConn()
	reserveWrite(pc, len(p.buf)+bindOverhead(sd.Name, len(values)))
	rr := pc.ExecPrepared(ctx, sd.Name, values, binaryFormat, binaryFormat)
	var rowErr error
	for rr.NextRow() {
		if rowErr == nil {
			rowErr = row(rr.Values())
		}
	}
	_, err = rr.Close()
	return errors.Join(err, rowErr)
}

// writeBufferKey is the key of a connection's write buffer in its
// pgconn.PgConn.CustomData.
const writeBufferKey = "ordo.pgstore.wbuf"

// maxWriteBuffer bounds the write buffer a connection keeps (as
// maxPooledParams bounds a params'): a larger message grows pgx's own.
const maxWriteBuffer = 4 << 20

// reserveWrite makes room for n more bytes in pc's write buffer, so that
// the messages pc sends next are encoded without growing it: it hands pc
// the connection's own buffer (kept in pc.CustomData across statements),
// grown to fit, with whatever pc had buffered and not yet flushed. pgx
// drops it at its next flush (it replaces a buffer over 1 KiB with a new
// one, and may keep a smaller one as its own), and the next statement
// hands it over again. The buffer belongs to one connection, which runs
// one statement at a time, so it is never written by two at once. This
// leans on pgproto3.Frontend.Send keeping the slice a message's Encode
// returns; TestExecReusesTheConnectionsWriteBuffer notices if it stops.
func reserveWrite(pc *pgconn.PgConn, n int) {
	if n <= 1024 {
		return // pgx's own buffer holds it
	}
	data := pc.CustomData()
	buf, _ := data[writeBufferKey].([]byte)
	if cap(buf) < n {
		if n > maxWriteBuffer {
			return
		}
		buf = make([]byte, 0, max(n, 2*cap(buf)))
		data[writeBufferKey] = buf
	}
	pc.Frontend().Send(takeBuffer{buf})
}

// takeBuffer is a message of no bytes whose encoding moves the
// frontend's buffered bytes into buf: pgproto3.Frontend.Send keeps the
// slice Encode returns as its write buffer.
type takeBuffer struct{ buf []byte }

func (takeBuffer) Frontend()           {}
func (takeBuffer) Decode([]byte) error { return errors.New("pgstore: takeBuffer is never decoded") }
func (t takeBuffer) Encode(dst []byte) ([]byte, error) {
	if len(dst) > cap(t.buf) {
		return dst, nil // more than reserved is buffered: keep pgx's
	}
	return append(t.buf[:0], dst...), nil // copy handles dst aliasing t.buf
}

// bindOverhead bounds the bytes of the messages ExecPrepared sends besides
// the parameters' values: Bind's header, its per-parameter lengths and
// format codes, Describe, Execute and Sync.
func bindOverhead(stmt string, params int) int {
	return 64 + 2*len(stmt) + 4*params
}

// Result columns in binary format.

// int8Col returns an int8 column, nil for NULL.
func int8Col(b []byte) (*int64, error) {
	if b == nil {
		return nil, nil
	}
	if len(b) != 8 {
		return nil, fmt.Errorf("int8 column of %d bytes", len(b))
	}
	v := int64(binary.BigEndian.Uint64(b))
	return &v, nil
}

// textCol returns a text column, nil for NULL.
func textCol(b []byte) *string {
	if b == nil {
		return nil
	}
	s := string(b)
	return &s
}

// cols reads a row of want columns into int8 and text destinations:
// each dest is a **int64 or a **string.
func cols(row [][]byte, dests ...any) error {
	if len(row) != len(dests) {
		return fmt.Errorf("row of %d columns, want %d", len(row), len(dests))
	}
	for i, d := range dests {
		switch d := d.(type) {
		case **int64:
			v, err := int8Col(row[i])
			if err != nil {
				return fmt.Errorf("column %d: %w", i+1, err)
			}
			*d = v
		case **string:
			*d = textCol(row[i])
		default:
			panic(fmt.Sprintf("pgstore: cols: destination %T", d))
		}
	}
	return nil
}
