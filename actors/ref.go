package actors

import (
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/ordo-actors/ordo/persistence"
	"github.com/ordo-actors/ordo/proto/ordopb"
)

// Ref names one entity: a kind and an ID within it. The zero Ref is
// invalid. Refs are values and safe to share.
type Ref struct {
	Kind string
	ID   string
}

// NewRef returns a validated Ref. Kind and ID must be non-empty, valid
// UTF-8, free of NUL bytes, and at most persistence.MaxKindLen and
// persistence.MaxIDLen bytes long.
func NewRef(kind, id string) (Ref, error) {
	r := Ref{Kind: kind, ID: id}
	return r, r.Validate()
}

// Validate reports whether r is well formed (see NewRef).
func (r Ref) Validate() error {
	if err := persistence.ValidateKey(r.Kind, r.ID); err != nil {
		return fmt.Errorf("actors: invalid ref %q/%q: %w", r.Kind, r.ID, err)
	}
	return nil
}

// String returns "kind/id".
func (r Ref) String() string { return r.Kind + "/" + r.ID }

// Proto returns the wire form of r.
func (r Ref) Proto() *ordopb.EntityRef { return &ordopb.EntityRef{Kind: r.Kind, Id: r.ID} }

// RefFromProto converts and validates a wire ref.
func RefFromProto(p *ordopb.EntityRef) (Ref, error) {
	if p == nil {
		return Ref{}, fmt.Errorf("actors: missing ref: %w", persistence.ErrInvalid)
	}
	return NewRef(p.GetKind(), p.GetId())
}

// ShardOf returns the shard of r among shards shards: the 64-bit FNV-1a
// hash of the kind, a zero byte and the ID, modulo shards. An ID of the
// form "{kind/id}key" (see Colocated) is placed with the entity kind/id
// instead: its shard is that entity's shard. This function is part of
// ordo's stable contract: every node and client must agree on it.
func ShardOf(r Ref, shards uint32) uint32 {
	if p, ok := PlacedWith(r); ok {
		r = p
	}
	h := fnv.New64a()
	h.Write([]byte(r.Kind))
	h.Write([]byte{0})
	h.Write([]byte(r.ID))
	return uint32(h.Sum64() % uint64(shards))
}

// Colocated returns the ref of the entity key of kind placed in the shard
// of the entity with: its ID is "{" + with.Kind + "/" + with.ID + "}" + key
// (like a Redis Cluster hash tag). Co-located entities always live on the
// same node: messages between them never leave it and are not serialized,
// and their writes can share one Save, which stores apply per shard
// atomically. The cost is balance: everything placed with a hot entity
// lands on that entity's node. with.ID must not contain '}'.
func Colocated(kind string, with Ref, key string) (Ref, error) {
	if err := with.Validate(); err != nil {
		return Ref{}, err
	}
	if strings.ContainsRune(with.ID, '}') {
		return Ref{}, fmt.Errorf("actors: cannot place with %s: its ID contains '}': %w", with, persistence.ErrInvalid)
	}
	return NewRef(kind, "{"+with.Kind+"/"+with.ID+"}"+key)
}

// PlacedWith returns the entity r is placed with, if r's ID has the form
// Colocated gives ("{kind/id}key", kind and id non-empty).
func PlacedWith(r Ref) (Ref, bool) {
	id := r.ID
	if len(id) < 5 || id[0] != '{' {
		return Ref{}, false
	}
	end := strings.IndexByte(id, '}')
	if end < 0 {
		return Ref{}, false
	}
	kind, wid, ok := strings.Cut(id[1:end], "/")
	if !ok || kind == "" || wid == "" {
		return Ref{}, false
	}
	return Ref{Kind: kind, ID: wid}, true
}
