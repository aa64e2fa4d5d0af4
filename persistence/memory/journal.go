package memory

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"sort"

	"github.com/ordo-actors/ordo/persistence"
)

// journal is one entity's events: data[i] has Seq first+i.
type journal struct {
	first uint64
	data  [][]byte
}

// last returns the Seq of the last event, 0 for none (or a nil journal).
func (j *journal) last() uint64 {
	if j == nil || len(j.data) == 0 {
		return 0
	}
	return j.first + uint64(len(j.data)) - 1
}

// feed is one kind's events in the order they were appended, which is the
// order their Saves committed (Save appends under s.mu). Entries of deleted
// events stay until compact drops them; reads skip them.
type feed struct {
	entries []feedEntry // by off
	dead    int         // entries of deleted events, about
}

type feedEntry struct {
	off  uint64
	id   string
	seq  uint64
	data []byte
}

// compact drops the entries of deleted events.
func (f *feed) compact(journals map[key]*journal, kind string) {
	kept := f.entries[:0:0]
	for _, e := range f.entries {
		if e.seq >= journals[key{kind, e.id}].first {
			kept = append(kept, e)
		}
	}
	f.entries, f.dead = kept, 0
}

// Offsets: a version byte, then the offset of the last event read as an
// unsigned varint (at least 1). The zero Offset is the start.
const offsetVersion = 'm'

func encodeOffset(off uint64) persistence.Offset {
	if off == 0 {
		return ""
	}
	return persistence.Offset(binary.AppendUvarint([]byte{offsetVersion}, off))
}

func decodeOffset(o persistence.Offset) (uint64, error) {
	if o == "" {
		return 0, nil
	}
	b := []byte(o)
	if b[0] != offsetVersion {
		return 0, fmt.Errorf("%w: not a memory journal offset", persistence.ErrInvalid)
	}
	v, n := binary.Uvarint(b[1:])
	if n <= 0 || n != len(b)-1 || v == 0 || string(encodeOffset(v)) != string(o) {
		return 0, fmt.Errorf("%w: malformed memory journal offset", persistence.ErrInvalid)
	}
	return v, nil
}

// ReadEvents implements persistence.Journal.
func (s *Store) ReadEvents(ctx context.Context, kind, id string, from uint64, limit int) ([]persistence.Event, error) {
	if err := persistence.ValidateRead(kind, id, limit); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, persistence.ErrClosed
	}
	j := s.journals[key{kind, id}]
	if j == nil || from > j.last() {
		return nil, nil
	}
	from = max(from, j.first)
	var out []persistence.Event
	for seq := from; seq <= j.last() && len(out) < limit; seq++ {
		out = append(out, persistence.Event{Seq: seq, Data: bytes.Clone(j.data[seq-j.first])})
	}
	return out, nil
}

// LastSeq implements persistence.Journal.
func (s *Store) LastSeq(ctx context.Context, kind, id string) (uint64, error) {
	if err := persistence.ValidateKey(kind, id); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, persistence.ErrClosed
	}
	return s.journals[key{kind, id}].last(), nil
}

// ReadJournal implements persistence.Journal. Events are numbered in the
// order their Saves committed, over all kinds.
func (s *Store) ReadJournal(ctx context.Context, kind string, after persistence.Offset, limit int) ([]persistence.JournalEntry, persistence.Offset, error) {
	if err := persistence.ValidateFeed(kind, limit); err != nil {
		return nil, after, err
	}
	from, err := decodeOffset(after)
	if err != nil {
		return nil, after, err
	}
	if err := ctx.Err(); err != nil {
		return nil, after, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, after, persistence.ErrClosed
	}
	f := s.feeds[kind]
	if f == nil {
		return nil, after, nil
	}
	var out []persistence.JournalEntry
	last := from
	i := sort.Search(len(f.entries), func(i int) bool { return f.entries[i].off > from })
	for ; i < len(f.entries) && len(out) < limit; i++ {
		e := &f.entries[i]
		last = e.off
		if e.seq < s.journals[key{kind, e.id}].first {
			continue // deleted
		}
		out = append(out, persistence.JournalEntry{Kind: kind, ID: e.id, Event: persistence.Event{Seq: e.seq, Data: bytes.Clone(e.data)}})
	}
	if len(out) == 0 {
		return nil, after, nil
	}
	return out, encodeOffset(last), nil
}
