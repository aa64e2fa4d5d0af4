package etcdstore

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ordo-actors/ordo/persistence"
)

var _ persistence.ReminderIndex = (*Store)(nil)

// planDue adds to g the move of r's reminder index entry: the delete of
// its entry at r.PrevDue and the put of one at r.Due. The store cannot
// read the old due time within the transaction: it relies on the writer's
// PrevDue (see persistence.ReminderIndex on stale entries).
func (s *Store) planDue(g *group, r *persistence.Record) {
	if r.Due == r.PrevDue {
		return
	}
	if r.PrevDue > 0 {
		k := dueKey(s.cfg.Prefix, r.Shard, r.PrevDue, r.Kind, r.ID)
		g.ops = append(g.ops, clientv3.OpDelete(k))
		g.size += len(k) + opOverhead
	}
	if r.Due > 0 {
		g.put(dueKey(s.cfg.Prefix, r.Shard, r.Due, r.Kind, r.ID), "", putWhat{what: "reminder index entry of", kind: r.Kind, id: r.ID})
	}
}

// Due implements persistence.ReminderIndex: one range read of the shard's
// index keys, which list in due order (a linearizable read).
func (s *Store) Due(ctx context.Context, shard uint32, upTo int64, limit int) ([]persistence.DueEntry, error) {
	if err := persistence.ValidateDueQuery(upTo, limit); err != nil {
		return nil, err
	}
	if s.closed.Load() {
		return nil, persistence.ErrClosed
	}
	p := duePrefix(s.cfg.Prefix, shard)
	rctx, cancel := s.request(ctx)
	resp, err := s.cli.Get(rctx, p, clientv3.WithRange(dueBound(s.cfg.Prefix, shard, upTo)),
		clientv3.WithLimit(int64(limit)), clientv3.WithKeysOnly())
	cancel()
	if err != nil {
		return nil, fmt.Errorf("etcdstore: reminder index of shard %d: %w", shard, err)
	}
	out := make([]persistence.DueEntry, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		e, err := parseDueKey(string(kv.Key[len(p):]))
		if err != nil {
			return nil, fmt.Errorf("etcdstore: reminder index of shard %d: %w", shard, err)
		}
		out = append(out, e)
	}
	return out, nil
}
