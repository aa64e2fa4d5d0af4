package memory

import (
	"cmp"
	"context"

	"github.com/google/btree"

	"github.com/ordo-actors/ordo/persistence"
)

var _ persistence.ReminderIndex = (*Store)(nil)

// dueItem is one entry of a shard's reminder index.
type dueItem struct {
	due int64
	key key
}

func dueLess(a, b dueItem) bool {
	if c := cmp.Compare(a.due, b.due); c != 0 {
		return c < 0
	}
	if c := cmp.Compare(a.key.kind, b.key.kind); c != 0 {
		return c < 0
	}
	return a.key.id < b.key.id
}

// index moves r's entry in its shard's index from old's due time (old is
// the record r replaces, if any) to r's. The store reads the old due
// itself: Record.PrevDue is not needed. s.mu is held.
func (s *Store) index(old persistence.Record, replaced bool, r persistence.Record) {
	k := key{r.Kind, r.ID}
	if replaced && old.Due > 0 {
		if t := s.due[old.Shard]; t != nil {
			t.Delete(dueItem{old.Due, k})
		}
	}
	if r.Due > 0 {
		t := s.due[r.Shard]
		if t == nil {
			t = btree.NewG(32, dueLess)
			s.due[r.Shard] = t
		}
		t.ReplaceOrInsert(dueItem{r.Due, k})
	}
}

// Due implements persistence.ReminderIndex: an ordered tree per shard,
// read under the store's lock (a snapshot).
func (s *Store) Due(ctx context.Context, shard uint32, upTo int64, limit int) ([]persistence.DueEntry, error) {
	if err := persistence.ValidateDueQuery(upTo, limit); err != nil {
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
	s.dueQueries++
	var out []persistence.DueEntry
	if t := s.due[shard]; t != nil {
		t.Ascend(func(it dueItem) bool {
			if it.due > upTo || len(out) == limit {
				return false
			}
			out = append(out, persistence.DueEntry{Kind: it.key.kind, ID: it.key.id, Due: it.due})
			return true
		})
	}
	return out, nil
}

// DueQueries returns how many ReminderIndex.Due calls the store answered.
func (s *Store) DueQueries() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dueQueries
}
