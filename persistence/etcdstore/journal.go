package etcdstore

import (
	"bytes"
	"context"
	"fmt"
	"sort"
	"strings"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ordo-actors/ordo/persistence"
)

// journalEndOp reads where the journal of (kind, id) ends: its first key
// and the number of its keys (etcd counts a range from its in-memory
// index, without reading the values). See journalEnd.
func (s *Store) journalEndOp(kind, id string) clientv3.Op {
	ep := journalEntityPrefix(s.cfg.Prefix, kind, id)
	return clientv3.OpGet(ep, clientv3.WithRange(clientv3.GetPrefixRangeEnd(ep)), clientv3.WithLimit(1), clientv3.WithKeysOnly())
}

// journalEnd returns the last Seq of a journal from a journalEndOp read:
// the journal is contiguous, so it is the first Seq plus the count less
// one (0 for no events).
func (s *Store) journalEnd(kind string, rr *etcdserverpb.RangeResponse) (uint64, error) {
	if rr == nil || rr.Count == 0 {
		return 0, nil
	}
	if len(rr.Kvs) == 0 {
		return 0, fmt.Errorf("%w: journal of %d events without a first key", ErrCorrupt, rr.Count)
	}
	_, first, err := s.splitEventKey(kind, rr.Kvs[0].Key)
	if err != nil {
		return 0, err
	}
	return first + uint64(rr.Count) - 1, nil
}

// splitEventKey parses a stored event key of kind.
func (s *Store) splitEventKey(kind string, key []byte) (id string, seq uint64, err error) {
	rest, ok := strings.CutPrefix(string(key), journalKindPrefix(s.cfg.Prefix, kind))
	if !ok {
		return "", 0, fmt.Errorf("%w: event key %q outside kind %q", ErrCorrupt, key, kind)
	}
	return parseEventKey(rest)
}

func (s *Store) lastSeq(ctx context.Context, kind, id string) (uint64, error) {
	rctx, cancel := s.request(ctx)
	defer cancel()
	op := s.journalEndOp(kind, id)
	resp, err := s.cli.Do(rctx, op)
	if err != nil {
		return 0, err
	}
	return s.journalEnd(kind, (*etcdserverpb.RangeResponse)(resp.Get()))
}

// LastSeq implements persistence.Journal with one read of the journal's
// first key and its count.
func (s *Store) LastSeq(ctx context.Context, kind, id string) (uint64, error) {
	if err := persistence.ValidateKey(kind, id); err != nil {
		return 0, err
	}
	if s.closed.Load() {
		return 0, persistence.ErrClosed
	}
	last, err := s.lastSeq(ctx, kind, id)
	if err != nil {
		return 0, fmt.Errorf("etcdstore: last seq of %s/%s: %w", kind, id, err)
	}
	return last, nil
}

// ReadEvents implements persistence.Journal with one range read.
func (s *Store) ReadEvents(ctx context.Context, kind, id string, from uint64, limit int) ([]persistence.Event, error) {
	if err := persistence.ValidateRead(kind, id, limit); err != nil {
		return nil, err
	}
	if s.closed.Load() {
		return nil, persistence.ErrClosed
	}
	end := clientv3.GetPrefixRangeEnd(journalEntityPrefix(s.cfg.Prefix, kind, id))
	rctx, cancel := s.request(ctx)
	resp, err := s.cli.Get(rctx, eventKey(s.cfg.Prefix, kind, id, max(from, 1)), clientv3.WithRange(end), clientv3.WithLimit(int64(limit)))
	cancel()
	if err != nil {
		return nil, fmt.Errorf("etcdstore: read events of %s/%s: %w", kind, id, err)
	}
	out := make([]persistence.Event, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		e, err := s.decodeEventKV(kind, id, kv)
		if err != nil {
			return nil, fmt.Errorf("etcdstore: read events of %s/%s: %w", kind, id, err)
		}
		out = append(out, e.Event)
	}
	return out, nil
}

// decodeEventKV decodes a stored event of kind (and of id, unless id is
// empty).
func (s *Store) decodeEventKV(kind, id string, kv *mvccpb.KeyValue) (persistence.JournalEntry, error) {
	gotID, seq, err := s.splitEventKey(kind, kv.Key)
	if err != nil {
		return persistence.JournalEntry{}, err
	}
	if id != "" && gotID != id {
		return persistence.JournalEntry{}, fmt.Errorf("%w: event key %q read for %s", ErrCorrupt, kv.Key, id)
	}
	data, err := decodeEvent(kv.Value)
	if err != nil {
		return persistence.JournalEntry{}, fmt.Errorf("event %d of %s/%s: %w", seq, kind, gotID, err)
	}
	return persistence.JournalEntry{Kind: kind, ID: gotID, Event: persistence.Event{Seq: seq, Data: data}}, nil
}

// ReadJournal implements persistence.Journal. The feed's order is the
// order of ModRevisions, which etcd assigns at commit, then of keys within
// a transaction: one global commit order. Each call reads the kind's
// events whose ModRevision is above the offset's, sorted by ModRevision;
// etcd filters and sorts a range on the server only after reading all of
// it, so a call costs a read of the kind's whole journal there. It reads
// at the current revision, so compaction never affects it.
func (s *Store) ReadJournal(ctx context.Context, kind string, after persistence.Offset, limit int) ([]persistence.JournalEntry, persistence.Offset, error) {
	if err := persistence.ValidateFeed(kind, limit); err != nil {
		return nil, after, err
	}
	pos, err := decodeOffset(after)
	if err != nil {
		return nil, after, err
	}
	if s.closed.Load() {
		return nil, after, persistence.ErrClosed
	}
	out, pos, err := s.readFeed(ctx, kind, pos, limit)
	if err != nil {
		return nil, after, fmt.Errorf("etcdstore: read the journal of %s: %w", kind, err)
	}
	if len(out) == 0 {
		return nil, after, nil
	}
	return out, encodeOffset(pos), nil
}

func (s *Store) readFeed(ctx context.Context, kind string, pos feedPos, limit int) ([]persistence.JournalEntry, feedPos, error) {
	kp := journalKindPrefix(s.cfg.Prefix, kind)
	end := clientv3.WithRange(clientv3.GetPrefixRangeEnd(kp))
	var out []persistence.JournalEntry
	// take appends kvs, sorted by ModRevision then key, up to the limit,
	// and moves pos after the last one taken.
	take := func(kvs []*mvccpb.KeyValue) error {
		for _, kv := range kvs {
			if len(out) == limit {
				return nil
			}
			e, err := s.decodeEventKV(kind, "", kv)
			if err != nil {
				return err
			}
			out = append(out, e)
			pos = feedPos{rev: kv.ModRevision, key: string(kv.Key[len(kp):])}
		}
		return nil
	}
	get := func(opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
		rctx, cancel := s.request(ctx)
		defer cancel()
		return s.cli.Get(rctx, kp, append(opts, end)...)
	}
	// wholeRev reads every event committed at rev, sorted by key.
	wholeRev := func(rev int64) ([]*mvccpb.KeyValue, error) {
		resp, err := get(clientv3.WithMinModRev(rev), clientv3.WithMaxModRev(rev))
		if err != nil {
			return nil, err
		}
		return resp.Kvs, nil
	}
	if pos.key != "" {
		// Part of pos.rev was read: the rest of it first.
		kvs, err := wholeRev(pos.rev)
		if err != nil {
			return nil, pos, err
		}
		i := sort.Search(len(kvs), func(i int) bool { return string(kvs[i].Key[len(kp):]) > pos.key })
		kvs = kvs[i:]
		if err := take(kvs); err != nil {
			return nil, pos, err
		}
		if len(out) < len(kvs) {
			return out, pos, nil
		}
		pos.key = ""
		if len(out) == limit {
			return out, pos, nil
		}
	}
	resp, err := get(clientv3.WithMinModRev(pos.rev+1), clientv3.WithSort(clientv3.SortByModRevision, clientv3.SortAscend),
		clientv3.WithLimit(int64(limit-len(out))))
	if err != nil {
		return nil, pos, err
	}
	kvs := resp.Kvs
	if len(kvs) == 0 {
		return out, pos, nil
	}
	// etcd's sort is not stable: order events of one revision by key.
	sort.SliceStable(kvs, func(i, j int) bool {
		if kvs[i].ModRevision != kvs[j].ModRevision {
			return kvs[i].ModRevision < kvs[j].ModRevision
		}
		return bytes.Compare(kvs[i].Key, kvs[j].Key) < 0
	})
	if resp.More {
		// The limit may have cut the last revision anywhere: keep the
		// revisions before it, or, when there is only one, read it whole
		// and take a prefix of it in key order.
		lastRev := kvs[len(kvs)-1].ModRevision
		i := sort.Search(len(kvs), func(i int) bool { return kvs[i].ModRevision == lastRev })
		if i == 0 {
			if kvs, err = wholeRev(lastRev); err != nil {
				return nil, pos, err
			}
			before := len(out)
			if err := take(kvs); err != nil {
				return nil, pos, err
			}
			if len(out)-before == len(kvs) {
				pos.key = "" // the revision was taken whole after all
			}
			return out, pos, nil
		}
		kvs = kvs[:i]
	}
	if err := take(kvs); err != nil {
		return nil, pos, err
	}
	pos.key = "" // every revision taken was taken whole
	return out, pos, nil
}
