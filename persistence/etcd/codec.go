package etcdstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/url"
	"strconv"

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
