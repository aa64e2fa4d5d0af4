package actors_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/persistence"
	"github.com/ordo-actors/ordo/proto/ordopb"
	"github.com/ordo-actors/ordo/proto/testpb"
	"google.golang.org/protobuf/proto"
)

// Arbitrary envelope bytes from the network: decoding may fail, but a
// decoded envelope always gets a reply and never crashes the host.
func FuzzEnvelope(f *testing.F) {
	for _, m := range []proto.Message{&testpb.Add{Delta: 1}, &testpb.Get{}, &testpb.Echo{}} {
		env, _ := actors.Envelope(ref("fz"), m, "req-1")
		b, _ := proto.Marshal(env)
		f.Add(b)
	}
	f.Add([]byte{0x0a, 0x00})
	f.Add([]byte("garbage"))
	h := newHarness(f, nil)
	f.Fuzz(func(t *testing.T, b []byte) {
		var env ordopb.Envelope
		if err := proto.Unmarshal(b, &env); err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		rep, err := h.host.Invoke(ctx, &env)
		if err != nil {
			t.Fatalf("no reply: %v", err)
		}
		if rep.GetError() == nil && rep.GetPayload() == nil {
			t.Fatalf("empty reply %v", rep)
		}
	})
}

// Arbitrary stored record bytes: activation fails cleanly or succeeds,
// never crashes, and a failed activation writes nothing.
func FuzzStoredRecord(f *testing.F) {
	good, _ := proto.Marshal(&ordopb.EntityRecord{State: mustMarshal(&testpb.Counter{Value: 3}), Epoch: 1, Seq: 1})
	f.Add(good)
	f.Add([]byte{})
	f.Add([]byte{0xff, 0x01})
	h := newHarness(f, nil)
	var n atomic.Int64
	f.Fuzz(func(t *testing.T, data []byte) {
		id := fmt.Sprintf("rec-%d", n.Add(1))
		shard := actors.ShardOf(ref(id), h.cfg.Shards)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := h.store.Fence(ctx, shard, 1); err != nil {
			t.Fatal(err)
		}
		if data == nil {
			data = []byte{}
		}
		if _, err := h.store.Save(ctx, []persistence.Record{{Kind: "counter", ID: id, Shard: shard, Epoch: 1, Data: data}}); err != nil {
			t.Fatal(err)
		}
		_, err := h.get(ctx, id)
		if err != nil && actors.Retryable(err) {
			t.Fatalf("bad stored bytes should give a non-retryable error, got %v", err)
		}
	})
}

// Ref validation accepts exactly the documented refs.
func FuzzRef(f *testing.F) {
	f.Add("account", "acct-000001")
	f.Add("", "x")
	f.Add("k", "\xff")
	f.Add("k", "a\x00b")
	f.Fuzz(func(t *testing.T, kind, id string) {
		r, err := actors.NewRef(kind, id)
		valid := kind != "" && id != "" && len(kind) <= persistence.MaxKindLen && len(id) <= persistence.MaxIDLen &&
			utf8.ValidString(kind) && utf8.ValidString(id) && !containsNUL(kind) && !containsNUL(id)
		if (err == nil) != valid {
			t.Fatalf("NewRef(%q, %q) = %v, want valid=%v", kind, id, err, valid)
		}
		if err == nil {
			if s := actors.ShardOf(r, 256); s >= 256 {
				t.Fatalf("shard %d out of range", s)
			}
		}
	})
}

func containsNUL(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return true
		}
	}
	return false
}

func mustMarshal(m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}
