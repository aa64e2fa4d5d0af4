package etcdstore

import (
	"context"
	"fmt"

	"github.com/ordo-actors/ordo/persistence"
	clientv3 "go.etcd.io/etcd/client/v3"
)

var _ persistence.BatchLoader = (*Store)(nil)

// LoadMany implements persistence.BatchLoader: one read-only transaction
// of Gets per Config.MaxTxnOps keys, each a snapshot of its keys.
func (s *Store) LoadMany(ctx context.Context, keys []persistence.Key) (map[persistence.Key]persistence.Record, error) {
	if err := persistence.ValidateKeys(keys); err != nil {
		return nil, err
	}
	if s.closed.Load() {
		return nil, persistence.ErrClosed
	}
	out := make(map[persistence.Key]persistence.Record, len(keys))
	for len(keys) > 0 {
		chunk := keys[:min(len(keys), s.cfg.MaxTxnOps)]
		keys = keys[len(chunk):]
		ops := make([]clientv3.Op, len(chunk))
		for i, k := range chunk {
			ops[i] = clientv3.OpGet(entityKey(s.cfg.Prefix, k.Kind, k.ID))
		}
		rctx, cancel := s.request(ctx)
		resp, err := s.cli.Txn(rctx).Then(ops...).Commit()
		cancel()
		if err != nil {
			return nil, fmt.Errorf("etcdstore: load %d records: %w", len(chunk), err)
		}
		for i, r := range resp.Responses {
			kvs := r.GetResponseRange().GetKvs()
			if len(kvs) == 0 {
				continue
			}
			k := chunk[i]
			shard, epoch, due, data, err := decodeRecord(kvs[0].Value)
			if err != nil {
				return nil, fmt.Errorf("etcdstore: load %s/%s: %w", k.Kind, k.ID, err)
			}
			if data == nil {
				data = []byte{}
			}
			out[k] = persistence.Record{Kind: k.Kind, ID: k.ID, Shard: shard, Epoch: epoch, Data: data, Due: due}
		}
	}
	return out, nil
}
