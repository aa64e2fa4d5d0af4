package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/ordo-actors/ordo/persistence"
)

// testLoadMany checks persistence.BatchLoader against Load, for stores
// that implement it.
func testLoadMany(t *testing.T, s persistence.Store) {
	bl, ok := s.(persistence.BatchLoader)
	if !ok {
		t.Skip("the store does not implement persistence.BatchLoader")
	}
	ctx := ctxFor(t)
	// More keys than one etcd transaction holds by default (128), across
	// shards, half of them saved.
	const n = 300
	var keys []persistence.Key
	var recs []persistence.Record
	for i := range n {
		k := persistence.Key{Kind: "acct", ID: fmt.Sprintf("a%03d", i)}
		if i%3 == 0 {
			k.Kind = "xfer"
		}
		keys = append(keys, k)
		if i%2 == 0 {
			shard := uint32(i % 5)
			recs = append(recs, persistence.Record{Kind: k.Kind, ID: k.ID, Shard: shard, Epoch: int64(shard) + 1,
				Data: fmt.Appendf(nil, "data of %s/%s", k.Kind, k.ID)})
		}
	}
	recs = append(recs, rec("acct", "empty", 0, 1, ""))
	keys = append(keys, persistence.Key{Kind: "acct", ID: "empty"})
	for sh := range uint32(5) {
		mustFence(t, s, sh, int64(sh)+1)
	}
	for i := 0; i < len(recs); i += 50 {
		mustSaveOK(t, s, recs[i:min(i+50, len(recs))]...)
	}

	got, err := bl.LoadMany(ctx, keys)
	if err != nil {
		t.Fatalf("LoadMany: %v", err)
	}
	if len(got) != len(recs) {
		t.Fatalf("LoadMany found %d records, want %d", len(got), len(recs))
	}
	for _, k := range keys {
		r, found := got[k]
		one, err := s.Load(ctx, k.Kind, k.ID)
		switch {
		case errors.Is(err, persistence.ErrNotFound):
			if found {
				t.Fatalf("LoadMany found %s/%s, which Load does not", k.Kind, k.ID)
			}
			continue
		case err != nil:
			t.Fatalf("Load(%s/%s): %v", k.Kind, k.ID, err)
		case !found:
			t.Fatalf("LoadMany misses %s/%s", k.Kind, k.ID)
		}
		if r.Kind != one.Kind || r.ID != one.ID || r.Shard != one.Shard || r.Epoch != one.Epoch || !bytes.Equal(r.Data, one.Data) {
			t.Fatalf("LoadMany(%s/%s) = %+v, Load = %+v", k.Kind, k.ID, r, one)
		}
		if r.Data == nil {
			t.Fatalf("LoadMany(%s/%s) returned nil Data", k.Kind, k.ID)
		}
	}
	// The data belongs to the caller.
	k := persistence.Key{Kind: "xfer", ID: "a000"}
	got[k].Data[0] ^= 0xff
	again, err := bl.LoadMany(ctx, []persistence.Key{k})
	if err != nil || !bytes.Equal(again[k].Data, []byte("data of xfer/a000")) {
		t.Fatalf("LoadMany after changing a returned record = %v, %v", again, err)
	}

	if got, err := bl.LoadMany(ctx, nil); err != nil || len(got) != 0 {
		t.Fatalf("LoadMany(no keys) = %v, %v", got, err)
	}
	for name, bad := range map[string][]persistence.Key{
		"empty kind": {{Kind: "", ID: "a"}},
		"NUL in id":  {{Kind: "acct", ID: "a\x00"}},
		"duplicate":  {{Kind: "acct", ID: "a000"}, {Kind: "acct", ID: "a000"}},
	} {
		if _, err := bl.LoadMany(ctx, bad); !errors.Is(err, persistence.ErrInvalid) {
			t.Fatalf("LoadMany(%s) = %v, want ErrInvalid", name, err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := bl.LoadMany(ctx, keys[:1]); !errors.Is(err, persistence.ErrClosed) {
		t.Fatalf("LoadMany after Close = %v, want ErrClosed", err)
	}
}
