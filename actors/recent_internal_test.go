package actors

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/ordo-actors/ordo/proto/ordopb"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// compactRecent is the compact dedup entry as a message: what encodeRecent
// writes directly, and what the test holds it to.
func compactRecent(id string, hash uint64, rep *ordopb.Reply) *ordopb.DedupEntry {
	short := &ordopb.Reply{Error: rep.GetError()}
	if p := rep.GetPayload(); p != nil {
		short.Payload = &anypb.Any{TypeUrl: strings.TrimPrefix(p.GetTypeUrl(), anyPrefix), Value: p.GetValue()}
	}
	return &ordopb.DedupEntry{RequestId: id, Reply: short, PayloadHash: hash}
}

// marshalRecent is encodeRecent by way of proto.Marshal.
func marshalRecent(t testing.TB, id string, hash uint64, rep *ordopb.Reply) []byte {
	t.Helper()
	body, err := proto.Marshal(compactRecent(id, hash, rep))
	if err != nil {
		t.Fatal(err)
	}
	b := protowire.AppendTag(nil, recentField, protowire.BytesType)
	return protowire.AppendBytes(b, body)
}

func checkRecent(t testing.TB, id string, hash uint64, rep *ordopb.Reply) {
	t.Helper()
	before := proto.Clone(rep)
	got, want := encodeRecent(id, hash, rep), marshalRecent(t, id, hash, rep)
	if !bytes.Equal(got, want) {
		t.Fatalf("encodeRecent(%q, %#x, %v) = %x, proto.Marshal makes %x", id, hash, rep, got, want)
	}
	if !proto.Equal(rep, before) {
		t.Fatalf("encodeRecent changed the reply: %v, was %v", rep, before)
	}
	d := decodeRecent(got)
	if d.GetRequestId() != id || d.GetPayloadHash() != hash {
		t.Fatalf("decoded %v, want id %q and hash %#x", d, id, hash)
	}
}

// encodeRecent writes the bytes proto.Marshal makes of the compact entry,
// field for field: the stored form of the dedup window is unchanged, and
// records written by either read back alike.
func TestEncodeRecentMatchesMarshal(t *testing.T) {
	payload, err := anypb.New(&ordopb.Error{Message: "a reply"})
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("x", 300) // lengths past one varint byte
	for _, c := range []struct {
		name string
		id   string
		hash uint64
		rep  *ordopb.Reply
	}{
		{"payload", "req-1", 0x1234_5678_9abc_def0, &ordopb.Reply{RequestId: "req-1", Payload: payload}},
		{"error", "req-2", 7, &ordopb.Reply{Error: &ordopb.Error{Code: ordopb.Code_CODE_HANDLER, Message: "no", HandlerCode: "insufficient_funds"}}},
		{"payload and error", "r", 1, &ordopb.Reply{Payload: payload, Error: &ordopb.Error{Message: "both"}}},
		{"empty payload", "r", 1, &ordopb.Reply{Payload: &anypb.Any{}}},
		{"payload without value", "r", 1, &ordopb.Reply{Payload: &anypb.Any{TypeUrl: anyPrefix + "a.B"}}},
		{"foreign type URL", "r", 1, &ordopb.Reply{Payload: &anypb.Any{TypeUrl: "example.com/a.B", Value: []byte{1}}}},
		{"empty reply", "r", 1, &ordopb.Reply{}},
		{"nil reply", "r", 1, nil},
		{"no hash", "r", 0, &ordopb.Reply{Payload: payload}},
		{"no ID", "", 3, &ordopb.Reply{Payload: payload}},
		{"long", long, 3, &ordopb.Reply{Payload: &anypb.Any{TypeUrl: long, Value: []byte(long)}, Error: &ordopb.Error{Message: long}}},
	} {
		t.Run(c.name, func(t *testing.T) { checkRecent(t, c.id, c.hash, c.rep) })
	}
}

func FuzzEncodeRecent(f *testing.F) {
	f.Add("req-1", uint64(1), "type.googleapis.com/a.B", []byte{1, 2}, false, "", "")
	f.Add("", uint64(0), "", []byte(nil), true, "no", "insufficient_funds")
	f.Fuzz(func(t *testing.T, id string, hash uint64, typeURL string, value []byte, withPayload bool, msg, code string) {
		rep := &ordopb.Reply{}
		if withPayload || typeURL != "" || len(value) > 0 {
			rep.Payload = &anypb.Any{TypeUrl: typeURL, Value: value}
		}
		if msg != "" || code != "" {
			rep.Error = &ordopb.Error{Message: msg, HandlerCode: code}
		}
		for _, s := range []string{id, typeURL, msg, code} {
			if !utf8.ValidString(s) {
				return // proto.Marshal refuses it; envelopes that carry one do not decode
			}
		}
		checkRecent(t, id, hash, rep)
	})
}
