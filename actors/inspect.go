package actors

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/ordo-actors/ordo/persistence"
	"github.com/ordo-actors/ordo/proto/ordopb"
	"google.golang.org/protobuf/proto"
)

// This file holds the host's read-only views for admin tools (the
// dashboard and the entity inspector of package cluster). None of them
// changes what the host runs, and each is a snapshot: the host goes on
// activating and passivating meanwhile.

// ActiveIn returns the entities active on the host in shard, sorted by
// kind then ID; nil when the host does not serve the shard. Entities
// passivating are included until they have stopped. Safe for concurrent
// use.
func (h *Host) ActiveIn(shard uint32) []Ref {
	h.mu.Lock()
	sh, ok := h.shards[shard]
	var refs []Ref
	if ok {
		refs = make([]Ref, 0, len(sh.entities))
		for ref := range sh.entities {
			refs = append(refs, ref)
		}
	}
	h.mu.Unlock()
	sort.Slice(refs, func(i, j int) bool {
		if refs[i].Kind != refs[j].Kind {
			return refs[i].Kind < refs[j].Kind
		}
		return refs[i].ID < refs[j].ID
	})
	return refs
}

// ActivePerShard returns, for every shard the host serves, the number of
// its entities active on the host. Safe for concurrent use.
func (h *Host) ActivePerShard() map[uint32]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[uint32]int, len(h.shards))
	for id, sh := range h.shards {
		out[id] = len(sh.entities)
	}
	return out
}

// IsActive reports whether ref is active on the host (its shard served
// here and the entity activated and not yet stopped). Safe for concurrent
// use.
func (h *Host) IsActive(ref Ref) bool {
	shard := ShardOf(ref, h.cfg.Shards)
	h.mu.Lock()
	defer h.mu.Unlock()
	sh, ok := h.shards[shard]
	if !ok {
		return false
	}
	_, ok = sh.entities[ref]
	return ok
}

// KindNames returns the names of the kinds the host runs, sorted.
func (h *Host) KindNames() []string {
	names := make([]string, 0, len(h.kinds))
	for name := range h.kinds {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// Record is an entity's durable record as LoadRecord reads it.
type Record struct {
	// Ref is the entity.
	Ref Ref
	// Found is false when the entity was never saved; State is then the
	// kind's fresh state and the other fields are zero.
	Found bool
	// Shard and Epoch are the shard and fencing epoch the record was
	// written under.
	Shard uint32
	Epoch int64
	// Seq is the entity's write sequence number (one per write).
	Seq uint64
	// Size is the stored record's size in bytes, StateSize its state's.
	Size, StateSize int
	// Recent is the number of recent requests stored for deduplication.
	Recent int
	// State is the entity's state, decoded as its kind's state message.
	// That of an event-sourced entity is rebuilt as its activation would:
	// its snapshot, then the events after it.
	State proto.Message
	// SnapshotSeq and LastEvent are, for an event-sourced entity, the last
	// event its snapshot covers and the last event of its journal.
	SnapshotSeq, LastEvent uint64
}

// ErrNoState is returned by LoadRecord for a kind whose state is not a
// protobuf message the host can decode (a kind not made by NewKind).
var ErrNoState = errors.New("actors: kind has no decodable state")

// LoadRecord reads ref's durable record from the host's store and decodes
// it with its kind's state message. It is a plain read: it neither fences
// nor activates anything, so the record may be older than the state of an
// active entity (whose latest writes may be in flight), and reading a
// record of a shard another node owns is allowed. A kind the host does not
// run fails with ErrUnknownKind. Safe for concurrent use.
func (h *Host) LoadRecord(ctx context.Context, ref Ref) (Record, error) {
	if err := ref.Validate(); err != nil {
		return Record{}, fmt.Errorf("%w: %v", ErrBadRequest, err)
	}
	k, ok := h.kinds[ref.Kind]
	if !ok {
		return Record{}, fmt.Errorf("%w: %q", ErrUnknownKind, ref.Kind)
	}
	sb, ok := k.newBehavior().(interface{ stateMessage() proto.Message })
	if !ok {
		return Record{}, fmt.Errorf("%w: %q", ErrNoState, ref.Kind)
	}
	out := Record{Ref: ref, Shard: ShardOf(ref, h.cfg.Shards)}
	rec, err := h.store.Load(ctx, ref.Kind, ref.ID)
	switch {
	case errors.Is(err, persistence.ErrNotFound):
		out.State = sb.stateMessage()
		return out, nil
	case err != nil:
		return Record{}, fmt.Errorf("actors: loading %s: %w", ref, err)
	}
	var stored ordopb.EntityRecord
	if err := proto.Unmarshal(rec.Data, &stored); err != nil {
		return Record{}, fmt.Errorf("actors: decoding the record of %s: %w", ref, err)
	}
	var state proto.Message
	if k.eventSourced() {
		if state, err = h.rebuild(ctx, ref, k, &stored); err != nil {
			return Record{}, fmt.Errorf("actors: rebuilding the state of %s: %w", ref, err)
		}
		out.SnapshotSeq, out.LastEvent = stored.GetSnapshotSeq(), stored.GetLastEvent()
	} else {
		state = sb.stateMessage()
		if err := proto.Unmarshal(stored.GetState(), state); err != nil {
			return Record{}, fmt.Errorf("actors: decoding the state of %s: %w", ref, err)
		}
	}
	out.Found = true
	out.Shard, out.Epoch = rec.Shard, rec.Epoch
	out.Seq = stored.GetSeq()
	out.Size, out.StateSize = len(rec.Data), proto.Size(state)
	out.Recent = len(stored.GetRecent())
	out.State = state
	return out, nil
}

// stateMessage returns the behavior's state (a fresh one for a behavior
// just made).
func (b *typedBehavior[S]) stateMessage() proto.Message { return b.state }
