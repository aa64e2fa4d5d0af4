package pgstore

import (
	"github.com/jackc/pgx/v5/pgtype"
)

// LoadMany and the journal feed take their keys and positions as array
// parameters, through pgx (the Save statements encode theirs themselves:
// see params). pgx encodes a []string or []int64 through
// pgtype.FlatArray, whose Index puts each element into an interface (an
// allocation per string, per int64 above 255). The arrays below hand pgx
// each element as a one-pointer struct instead, which an interface holds
// without allocating, and which pgx encodes through the codecs' Valuer
// paths (TextValuer, Int64Valuer): the bytes on the wire are the same.

// array is a one-dimensional array parameter whose elements reach pgx as
// slot, a one-pointer view of each element.
type array[T any, slot any] struct {
	elems []T
	at    func(*T) slot
}

func (a array[T, slot]) Dimensions() []pgtype.ArrayDimension {
	if a.elems == nil {
		return nil // NULL, as pgtype.FlatArray
	}
	return []pgtype.ArrayDimension{{Length: int32(len(a.elems)), LowerBound: 1}}
}

func (a array[T, slot]) Index(i int) any { return a.at(&a.elems[i]) }

func (a array[T, slot]) IndexType() any { var z T; return a.at(&z) }

var (
	_ pgtype.ArrayGetter = array[string, textSlot]{}
	_ pgtype.ArrayGetter = array[int64, int64Slot]{}
)

type textSlot struct{ p *string }

func (s textSlot) TextValue() (pgtype.Text, error) {
	return pgtype.Text{String: *s.p, Valid: true}, nil
}

type int64Slot struct{ p *int64 }

func (s int64Slot) Int64Value() (pgtype.Int8, error) {
	return pgtype.Int8{Int64: *s.p, Valid: true}, nil
}

func texts(v []string) array[string, textSlot] {
	return array[string, textSlot]{v, func(p *string) textSlot { return textSlot{p} }}
}

func int64s(v []int64) array[int64, int64Slot] {
	return array[int64, int64Slot]{v, func(p *int64) int64Slot { return int64Slot{p} }}
}
