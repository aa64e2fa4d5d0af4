package placement

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// NodeInfo is the JSON value of P/nodes/<id>, bound to the node's lease.
type NodeInfo struct {
	// ID is the node ID.
	ID string `json:"id"`
	// RemoteAddr is where other nodes send calls.
	RemoteAddr string `json:"remote_addr,omitempty"`
	// GossipAddr is the node's memberlist address.
	GossipAddr string `json:"gossip_addr,omitempty"`
	// Lease is the etcd lease the entry (and the node's shard keys) is bound to.
	Lease int64 `json:"lease"`
	// Kinds names the entity kinds the node hosts; nil when the node did
	// not say (callers then assume it hosts every kind).
	Kinds []string `json:"kinds,omitempty"`
}

// Owner is the holder of a shard lock.
type Owner struct {
	// NodeID is the owner's node ID (the value of P/shards/<n>).
	NodeID string
	// Epoch is the CreateRevision of P/shards/<n>: the fencing epoch.
	Epoch int64
	// Lease is the lease the key is bound to.
	Lease int64
}

type clusterConfig struct {
	Shards uint32 `json:"shards"`
}

// Keys builds the etcd keys of one cluster prefix. The zero value is not
// usable; build it with NewKeys. Safe for concurrent use.
type Keys struct{ prefix string }

// NewKeys returns the key layout under prefix, which must pass the same
// checks as Config.Prefix.
func NewKeys(prefix string) (Keys, error) {
	if err := validPrefix(prefix); err != nil {
		return Keys{}, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	return Keys{prefix: prefix}, nil
}

// Config returns P/config.
func (k Keys) Config() string { return k.prefix + "/config" }

// NodesPrefix returns P/nodes/.
func (k Keys) NodesPrefix() string { return k.prefix + "/nodes/" }

// Node returns P/nodes/<id>.
func (k Keys) Node(id string) string { return k.NodesPrefix() + id }

// ShardsPrefix returns P/shards/.
func (k Keys) ShardsPrefix() string { return k.prefix + "/shards/" }

// Shard returns P/shards/<n> (decimal, no padding).
func (k Keys) Shard(n uint32) string { return k.ShardsPrefix() + strconv.FormatUint(uint64(n), 10) }

// Root returns P/ (every key of the cluster).
func (k Keys) Root() string { return k.prefix + "/" }

// tableRange is the key range a Table lists and watches: from the node
// entries to the end of the shard entries ("nodes/" sorts before
// "shards/"). It leaves out whatever else lives under the prefix, such as
// an etcd store's entity records under P/store/, whose every write would
// otherwise reach every table.
func (k Keys) tableRange() (start, end string) {
	return k.NodesPrefix(), clientv3.GetPrefixRangeEnd(k.ShardsPrefix())
}

// parseShard returns the shard number of a P/shards/<n> key.
func (k Keys) parseShard(key string) (uint32, bool) {
	rest, ok := strings.CutPrefix(key, k.ShardsPrefix())
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(rest, 10, 32)
	if err != nil {
		return 0, false
	}
	return uint32(n), true
}

// EnsureShardCount writes P/config with shards if absent, and otherwise
// checks that the recorded count equals shards (ErrShardCountMismatch).
func EnsureShardCount(ctx context.Context, client *clientv3.Client, keys Keys, shards uint32) error {
	val, err := json.Marshal(clusterConfig{Shards: shards})
	if err != nil {
		return fmt.Errorf("placement: encode config: %w", err)
	}
	resp, err := client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(keys.Config()), "=", 0)).
		Then(clientv3.OpPut(keys.Config(), string(val))).
		Else(clientv3.OpGet(keys.Config())).
		Commit()
	if err != nil {
		return fmt.Errorf("placement: write %s: %w", keys.Config(), err)
	}
	if resp.Succeeded {
		return nil
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return fmt.Errorf("placement: %s vanished while being read", keys.Config())
	}
	var have clusterConfig
	if err := json.Unmarshal(kvs[0].Value, &have); err != nil {
		return fmt.Errorf("placement: decode %s: %w", keys.Config(), err)
	}
	if have.Shards != shards {
		return fmt.Errorf("%w: %s records %d shards, this node is configured with %d",
			ErrShardCountMismatch, keys.Config(), have.Shards, shards)
	}
	return nil
}

// Register writes info to P/nodes/<info.ID> bound to lease, unless the key
// exists under another lease (ErrNodeIDInUse). prev, when not 0, is the
// lease of this node's own previous session: an entry still bound to it is
// moved to lease (atomically, only if still bound to prev), so a node
// re-registers without waiting for its ended lease to be revoked or to
// expire. Revoking prev afterwards no longer deletes the entry.
func Register(ctx context.Context, client *clientv3.Client, keys Keys, info NodeInfo, lease, prev clientv3.LeaseID) error {
	info.Lease = int64(lease)
	val, err := json.Marshal(info)
	if err != nil {
		return fmt.Errorf("placement: encode node info: %w", err)
	}
	key := keys.Node(info.ID)
	// A few rounds: the entry can vanish (prev revoked or expired) between
	// the create attempt and the move.
	for range 3 {
		resp, err := client.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, string(val), clientv3.WithLease(lease))).
			Else(clientv3.OpGet(key)).
			Commit()
		if err != nil {
			return fmt.Errorf("placement: register %s: %w", key, err)
		}
		if resp.Succeeded {
			return nil
		}
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 {
			continue
		}
		held := clientv3.LeaseID(kvs[0].Lease)
		if held != lease && (prev == 0 || held != prev) {
			return fmt.Errorf("%w: %s is bound to lease %x (it frees when that lease expires)", ErrNodeIDInUse, key, int64(held))
		}
		resp, err = client.Txn(ctx).
			If(clientv3.Compare(clientv3.LeaseValue(key), "=", held)).
			Then(clientv3.OpPut(key, string(val), clientv3.WithLease(lease))).
			Commit()
		if err != nil {
			return fmt.Errorf("placement: register %s: %w", key, err)
		}
		if resp.Succeeded {
			return nil
		}
	}
	return fmt.Errorf("placement: register %s: the entry kept changing", key)
}

// Acquire takes the lock of shard for nodeID under lease:
//
//	Txn(If(CreateRevision(P/shards/n) == 0)).Then(Put(P/shards/n, nodeID, WithLease(lease))).Else(Get(P/shards/n))
//
// and returns the epoch, the revision of that transaction (which is the
// key's CreateRevision). It fails with ErrShardTaken when the key exists,
// unless nodeID already holds it under lease (a non-zero lease): then it
// returns that lock's epoch. So an Acquire whose reply was lost (a
// timeout, an etcd leader change), although etcd applied it, is repeated
// safely: the retry learns the epoch the lost reply carried.
func Acquire(ctx context.Context, client *clientv3.Client, keys Keys, shard uint32, nodeID string, lease clientv3.LeaseID) (int64, error) {
	key := keys.Shard(shard)
	resp, err := client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, nodeID, clientv3.WithLease(lease))).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return 0, fmt.Errorf("placement: acquire shard %d: %w", shard, err)
	}
	if resp.Succeeded {
		return resp.Header.Revision, nil
	}
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) == 1 && lease != 0 &&
		kvs[0].Lease == int64(lease) && string(kvs[0].Value) == nodeID {
		return kvs[0].CreateRevision, nil
	}
	return 0, fmt.Errorf("%w: shard %d", ErrShardTaken, shard)
}

// heldAt reports whether nodeID holds shard's lock under lease at epoch
// (a linearizable read): a lock whose Acquire reply was lost, which the
// node takes back at that epoch. It never takes a free lock.
func heldAt(ctx context.Context, client *clientv3.Client, keys Keys, shard uint32, nodeID string, lease clientv3.LeaseID, epoch int64) (bool, error) {
	resp, err := client.Get(ctx, keys.Shard(shard))
	if err != nil {
		return false, fmt.Errorf("placement: read shard %d: %w", shard, err)
	}
	if len(resp.Kvs) != 1 {
		return false, nil
	}
	kv := resp.Kvs[0]
	return lease != 0 && kv.Lease == int64(lease) && string(kv.Value) == nodeID && kv.CreateRevision == epoch, nil
}

// Unlock deletes the lock of shard if it still has CreateRevision epoch
// (ShardRunner.Release, by contrast, drains a shard before its lock is deleted):
//
//	Txn(If(CreateRevision(P/shards/n) == epoch)).Then(Delete(P/shards/n))
//
// It fails with ErrNotOwner when the key is gone or belongs to another
// epoch (the lock was already lost; nothing was deleted).
func Unlock(ctx context.Context, client *clientv3.Client, keys Keys, shard uint32, epoch int64) error {
	key := keys.Shard(shard)
	resp, err := client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", epoch)).
		Then(clientv3.OpDelete(key)).
		Commit()
	if err != nil {
		return fmt.Errorf("placement: unlock shard %d: %w", shard, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("%w: shard %d epoch %d", ErrNotOwner, shard, epoch)
	}
	return nil
}

var errBadNodeInfo = errors.New("placement: malformed node info")

func decodeNodeInfo(id string, v []byte) (NodeInfo, error) {
	var ni NodeInfo
	if err := json.Unmarshal(v, &ni); err != nil {
		return NodeInfo{}, fmt.Errorf("%w: %s: %v", errBadNodeInfo, id, err)
	}
	return ni, nil
}
