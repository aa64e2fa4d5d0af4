package actors

import (
	"slices"

	"github.com/ordo-actors/ordo/proto/ordopb"
	"google.golang.org/protobuf/encoding/protowire"
)

// Fenced messages. An entity's storage writes are fenced by its shard's
// epoch; its messages to other entities are fenced the same way: each
// carries the sender's shard and epoch (Envelope.sender_fence), and the
// receiving entity keeps, in its record, the highest epoch it has accepted
// from each sender shard. A message from a lower epoch was sent by an
// owner the shard has since moved away from (held in a socket, a proxy or
// a paused process until after the new owner took over) and is refused
// with ErrFenced without running anything: the new owner has re-driven,
// from durable state, whatever that message was for, possibly long enough
// ago that the receiver's dedup window no longer remembers it.
//
// What it costs: at most one entry per sender shard in each entity's
// record (HostConfig.Shards bounds it), about three bytes each, written
// with the record. Messages within one shard are not fenced: the shard's
// entities share one owner, and its messages end with its ownership.
//
// What it needs from an application: work that must survive an owner
// change is re-driven from durable state when the entity activates
// (OnActivate), as a saga does; a refused late message is then redundant.

// senderFences is an entity's highest accepted epoch per sender shard.
type senderFences struct {
	shards []uint32 // ascending
	epochs []int64
	enc    []byte // fields 5 and 6 of EntityRecord; immutable once made
}

// encoded returns fields 5 and 6 of EntityRecord (nil: none).
func (f *senderFences) encoded() []byte {
	if f == nil {
		return nil
	}
	return f.enc
}

// epoch returns the highest epoch accepted from shard (0: none).
func (f *senderFences) epoch(shard uint32) int64 {
	if f == nil {
		return 0
	}
	if i, ok := slices.BinarySearch(f.shards, shard); ok {
		return f.epochs[i]
	}
	return 0
}

// accept records that a message from (shard, epoch) was applied, and
// reports whether that changed anything.
func (f *senderFences) accept(shard uint32, epoch int64) bool {
	i, ok := slices.BinarySearch(f.shards, shard)
	switch {
	case ok && f.epochs[i] >= epoch:
		return false
	case ok:
		f.epochs = slices.Clone(f.epochs)
		f.epochs[i] = epoch
	default:
		f.shards = slices.Insert(slices.Clone(f.shards), i, shard)
		f.epochs = slices.Insert(slices.Clone(f.epochs), i, epoch)
	}
	f.enc = f.encode()
	return true
}

// encode returns fields 5 and 6 of EntityRecord, packed.
func (f *senderFences) encode() []byte {
	if len(f.shards) == 0 {
		return nil
	}
	var shards, epochs []byte
	for i, s := range f.shards {
		shards = protowire.AppendVarint(shards, uint64(s))
		epochs = protowire.AppendVarint(epochs, uint64(f.epochs[i]))
	}
	b := protowire.AppendTag(make([]byte, 0, len(shards)+len(epochs)+8), 5, protowire.BytesType)
	b = protowire.AppendBytes(b, shards)
	b = protowire.AppendTag(b, 6, protowire.BytesType)
	return protowire.AppendBytes(b, epochs)
}

// loadSenderFences returns the fences of a stored record (nil: none), or
// false for a record whose two lists disagree in length or order: it was
// not written by this runtime.
func loadSenderFences(rec *ordopb.EntityRecord) (*senderFences, bool) {
	shards, epochs := rec.GetSenderShards(), rec.GetSenderEpochs()
	if len(shards) != len(epochs) || !slices.IsSorted(shards) || len(slices.Compact(slices.Clone(shards))) != len(shards) {
		return nil, false
	}
	if len(shards) == 0 {
		return nil, true
	}
	f := &senderFences{shards: shards, epochs: epochs}
	f.enc = f.encode()
	return f, true
}

// staleSender reports whether c is a message from an owner its sender's
// shard has moved away from, and the epoch that superseded it.
func (e *entity) staleSender(c *call) (int64, bool) {
	sf := c.fence
	if sf == nil || sf.GetShard() == e.en.shard.id {
		return 0, false
	}
	have := e.fences.epoch(sf.GetShard())
	return have, sf.GetEpoch() < have
}

// acceptSender records c's sender fence as accepted, to be written with
// the run's write.
func (e *entity) acceptSender(c *call) (moved bool) {
	if sf := c.fence; sf != nil && sf.GetShard() != e.en.shard.id && sf.GetEpoch() > 0 {
		if e.fences == nil {
			e.fences = &senderFences{}
		}
		if e.fences.accept(sf.GetShard(), sf.GetEpoch()) {
			e.dirty = true
			return true
		}
	}
	return false
}

// refuseStale answers c, a message from a superseded owner of its sender's
// shard, with ErrFenced. Kept out of handleInvoke: its formatting would
// grow that function's frame, which every message's goroutine pays for.
//
//go:noinline
func (e *entity) refuseStale(c *call, have int64) {
	e.h.finish(c, errReply(c.env, errf(ordopb.Code_CODE_FENCED,
		"message from %s sent at epoch %d of shard %d, which %s has accepted messages from at epoch %d: its sender's shard moved on; nothing applied",
		c.caller.Entity, c.fence.GetEpoch(), c.fence.GetShard(), e.en.ref, have)))
}
