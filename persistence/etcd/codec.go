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

const recordVersion = 1

func fenceKey(prefix string, shard uint32) string {
	return fmt.Sprintf("%sfences/%010d", prefix, shard)
}

func entityKey(prefix, kind, id string) string {
	return prefix + "entities/" + url.PathEscape(kind) + "/" + id
}

// encodeRecord encodes r's shard, epoch and data as a stored value.
func encodeRecord(r *persistence.Record) []byte {
	b := make([]byte, 0, 1+2*binary.MaxVarintLen64+len(r.Data))
	b = append(b, recordVersion)
	b = binary.AppendUvarint(b, uint64(r.Shard))
	b = binary.AppendUvarint(b, uint64(r.Epoch))
	return append(b, r.Data...)
}

// decodeRecord decodes a stored value into shard, epoch and data. data
// aliases b. Only the canonical encoding is accepted.
func decodeRecord(b []byte) (shard uint32, epoch int64, data []byte, err error) {
	if len(b) == 0 || b[0] != recordVersion {
		return 0, 0, nil, fmt.Errorf("%w: unknown record version", ErrCorrupt)
	}
	b = b[1:]
	s, n := uvarint(b)
	if n <= 0 || s > uint64(^uint32(0)) {
		return 0, 0, nil, fmt.Errorf("%w: bad shard", ErrCorrupt)
	}
	b = b[n:]
	e, n := uvarint(b)
	if n <= 0 || e == 0 || e > 1<<63-1 {
		return 0, 0, nil, fmt.Errorf("%w: bad epoch", ErrCorrupt)
	}
	return uint32(s), int64(e), b[n:], nil
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

func formatSeq(seq uint64) string { return fmt.Sprintf("%0*d", seqDigits, seq) }

func eventKey(prefix, kind, id string, seq uint64) string {
	return journalEntityPrefix(prefix, kind, id) + formatSeq(seq)
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
	return string(append([]byte{eventVersion}, data...))
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
