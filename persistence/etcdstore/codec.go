package etcdstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/ordo-actors/ordo/persistence"
)

// ErrCorrupt is wrapped by errors about stored values the store cannot
// decode.
var ErrCorrupt = errors.New("etcdstore: corrupt stored value")

// Record versions: 1 without a due time, 2 with one.
const (
	recordVersion    = 1
	recordVersionDue = 2
)

func fenceKey(prefix string, shard uint32) string {
	return fmt.Sprintf("%sfences/%010d", prefix, shard)
}

func entityKey(prefix, kind, id string) string {
	return prefix + "entities/" + url.PathEscape(kind) + "/" + id
}

// encodeRecord encodes r's shard, epoch, due time and data as a stored
// value, in one allocation.
func encodeRecord(r *persistence.Record) string {
	var head [1 + 3*binary.MaxVarintLen64]byte
	h := head[:0]
	if r.Due == 0 {
		h = append(h, recordVersion)
	} else {
		h = append(h, recordVersionDue)
	}
	h = binary.AppendUvarint(h, uint64(r.Shard))
	h = binary.AppendUvarint(h, uint64(r.Epoch))
	if r.Due != 0 {
		h = binary.AppendUvarint(h, uint64(r.Due))
	}
	var b strings.Builder
	b.Grow(len(h) + len(r.Data))
	b.Write(h)
	b.Write(r.Data)
	return b.String()
}

// decodeRecord decodes a stored value into shard, epoch, due time and
// data. data aliases b. Only the canonical encoding is accepted.
func decodeRecord(b []byte) (shard uint32, epoch, due int64, data []byte, err error) {
	if len(b) == 0 || b[0] != recordVersion && b[0] != recordVersionDue {
		return 0, 0, 0, nil, fmt.Errorf("%w: unknown record version", ErrCorrupt)
	}
	withDue := b[0] == recordVersionDue
	b = b[1:]
	s, n := uvarint(b)
	if n <= 0 || s > uint64(^uint32(0)) {
		return 0, 0, 0, nil, fmt.Errorf("%w: bad shard", ErrCorrupt)
	}
	b = b[n:]
	e, n := uvarint(b)
	if n <= 0 || e == 0 || e > 1<<63-1 {
		return 0, 0, 0, nil, fmt.Errorf("%w: bad epoch", ErrCorrupt)
	}
	b = b[n:]
	if withDue {
		d, n := uvarint(b)
		if n <= 0 || d == 0 || d > 1<<63-1 {
			return 0, 0, 0, nil, fmt.Errorf("%w: bad due time", ErrCorrupt)
		}
		due, b = int64(d), b[n:]
	}
	return uint32(s), int64(e), due, b, nil
}

// The reminder index. A record saved with a due time has, besides its
// record, the key
//
//	P due/<shard>/<due>/<kind>/<id>
//
// with <shard> as in fence keys, <due> in 20 decimal digits (so a shard's
// entries list in due order) and <kind> path-escaped as in entity keys,
// and an empty value.

const dueDigits = 20

// duePrefix is the prefix of every index key of shard.
func duePrefix(prefix string, shard uint32) string {
	return fmt.Sprintf("%sdue/%010d/", prefix, shard)
}

// dueBound returns the first key of shard's entries due after upTo.
func dueBound(prefix string, shard uint32, upTo int64) string {
	return fmt.Sprintf("%s%0*d", duePrefix(prefix, shard), dueDigits, uint64(upTo)+1)
}

func dueKey(prefix string, shard uint32, due int64, kind, id string) string {
	return fmt.Sprintf("%s%0*d/%s/%s", duePrefix(prefix, shard), dueDigits, due, url.PathEscape(kind), id)
}

// parseDueKey splits the part of an index key after its shard's prefix
// into the due time, the kind and the ID. Only keys the store writes
// parse.
func parseDueKey(rest string) (persistence.DueEntry, error) {
	bad := fmt.Errorf("%w: reminder index key %q", ErrCorrupt, rest)
	if len(rest) < dueDigits+3 || rest[dueDigits] != '/' {
		return persistence.DueEntry{}, bad
	}
	due, err := strconv.ParseInt(rest[:dueDigits], 10, 64)
	if err != nil || due <= 0 {
		return persistence.DueEntry{}, bad
	}
	kind, id, ok := strings.Cut(rest[dueDigits+1:], "/")
	if !ok {
		return persistence.DueEntry{}, bad
	}
	if kind, err = url.PathUnescape(kind); err != nil || persistence.ValidateKey(kind, id) != nil {
		return persistence.DueEntry{}, bad
	}
	return persistence.DueEntry{Kind: kind, ID: id, Due: due}, nil
}

// uvarint is binary.Uvarint refusing non-minimal encodings.
func uvarint(b []byte) (uint64, int) {
	v, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, -1
	}
	var tmp [binary.MaxVarintLen64]byte
	if binary.PutUvarint(tmp[:], v) != n {
		return 0, -1
	}
	return v, n
}

// parseFence decodes a fence value: a positive epoch in decimal.
func parseFence(v []byte) (int64, error) {
	e, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil || e <= 0 || formatFence(e) != string(v) {
		return 0, fmt.Errorf("%w: fence %q", ErrCorrupt, v)
	}
	return e, nil
}

func formatFence(epoch int64) string { return strconv.FormatInt(epoch, 10) }

// The journal. An event's key is
//
//	P journal/<kind>/<id> NUL <seq>
//
// with <kind> path-escaped as in entity keys and <seq> in 20 decimal
// digits, so that one entity's events list in Seq order and form a range of
// their own (an ID holds no NUL byte, so no ID's range contains another's),
// and one kind's events form the range journalKindPrefix.

const (
	eventVersion = 1
	seqDigits    = 20
)

func journalKindPrefix(prefix, kind string) string {
	return prefix + "journal/" + url.PathEscape(kind) + "/"
}

// journalEntityPrefix is the prefix of every event key of (kind, id).
func journalEntityPrefix(prefix, kind, id string) string {
	return journalKindPrefix(prefix, kind) + id + "\x00"
}

// formatSeq formats seq in seqDigits decimal digits, zero-padded.
func formatSeq(seq uint64) string {
	d := seqDigitsOf(seq)
	return string(d[:])
}

func seqDigitsOf(seq uint64) [seqDigits]byte {
	var d [seqDigits]byte
	for i := len(d) - 1; i >= 0; i-- {
		d[i] = byte('0' + seq%10)
		seq /= 10
	}
	return d
}

func eventKey(prefix, kind, id string, seq uint64) string {
	// One concatenation: journalEntityPrefix(prefix, kind, id) + formatSeq(seq).
	d := seqDigitsOf(seq)
	return prefix + "journal/" + url.PathEscape(kind) + "/" + id + "\x00" + string(d[:])
}

// parseEventKey splits the part of an event key after its kind's prefix
// into the ID and the Seq. Only keys the store writes parse.
func parseEventKey(rest string) (id string, seq uint64, err error) {
	i := strings.IndexByte(rest, 0)
	if i <= 0 || len(rest)-i-1 != seqDigits {
		return "", 0, fmt.Errorf("%w: event key %q", ErrCorrupt, rest)
	}
	digits := rest[i+1:]
	for j := 0; j < len(digits); j++ {
		if digits[j] < '0' || digits[j] > '9' {
			return "", 0, fmt.Errorf("%w: event key %q", ErrCorrupt, rest)
		}
	}
	seq, err = strconv.ParseUint(digits, 10, 64)
	if err != nil || seq == 0 || seq > persistence.MaxSeq {
		return "", 0, fmt.Errorf("%w: event key %q", ErrCorrupt, rest)
	}
	return rest[:i], seq, nil
}

// encodeEvent encodes an event's data as a stored value: a version byte,
// then the data.
func encodeEvent(data []byte) string {
	var b strings.Builder
	b.Grow(1 + len(data))
	b.WriteByte(eventVersion)
	b.Write(data)
	return b.String()
}

// decodeEvent returns the data of a stored event, as a new slice.
func decodeEvent(b []byte) ([]byte, error) {
	if len(b) == 0 || b[0] != eventVersion {
		return nil, fmt.Errorf("%w: unknown event version", ErrCorrupt)
	}
	return append([]byte{}, b[1:]...), nil
}

// feedPos is a position in a kind's journal: every event whose key's
// ModRevision is below rev has been read, and of those at rev, the ones
// whose key (after the kind's prefix) is at most key; an empty key means
// every event at rev.
type feedPos struct {
	rev int64
	key string
}

const offsetTag = 'e'

// encodeOffset encodes p: a tag byte, rev as an unsigned varint, then key.
// The start of the journal is the zero Offset.
func encodeOffset(p feedPos) persistence.Offset {
	if p.rev == 0 {
		return ""
	}
	b := binary.AppendUvarint([]byte{offsetTag}, uint64(p.rev))
	return persistence.Offset(append(b, p.key...))
}

// decodeOffset decodes an Offset encodeOffset made; anything else is
// refused with persistence.ErrInvalid.
func decodeOffset(o persistence.Offset) (feedPos, error) {
	if o == "" {
		return feedPos{}, nil
	}
	bad := fmt.Errorf("%w: not an etcd journal offset", persistence.ErrInvalid)
	b := []byte(o)
	if b[0] != offsetTag {
		return feedPos{}, bad
	}
	rev, n := uvarint(b[1:])
	if n <= 0 || rev == 0 || rev > 1<<63-1 {
		return feedPos{}, bad
	}
	p := feedPos{rev: int64(rev), key: string(b[1+n:])}
	if p.key != "" {
		if _, _, err := parseEventKey(p.key); err != nil {
			return feedPos{}, bad
		}
	}
	return p, nil
}
