package actors

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/ordo-actors/ordo/proto/ordopb"
	"google.golang.org/protobuf/proto"
)

// A record is the EntityRecord proto.Marshal makes of its scalar fields,
// followed by the encoded fields the write carries, in a slice of the
// Save's buffer of exactly its length: what goes to other records (the
// dedup window, the events, the snapshot) takes no room in it, and what
// the buffer held before is left as it was.
func TestRecordEncoding(t *testing.T) {
	seed := rand.Uint64()
	rng := rand.New(rand.NewPCG(seed, 1))
	pick := func(vs ...uint64) uint64 { return vs[rng.IntN(len(vs))] }
	for i := range 2000 {
		w := write{
			ref:      Ref{Kind: "k", ID: "e"},
			epoch:    int64(pick(0, 1, 127, 128, math.MaxInt64, rng.Uint64())),
			seq:      pick(0, 1, 300, math.MaxUint64, rng.Uint64()),
			dedupGen: pick(0, 1, 1<<40, rng.Uint64()),
			dedupLen: int(pick(0, 1, 128, math.MaxUint32)),
			cold:     [][]byte{make([]byte, 9000)},
			coldSize: 9000,
		}
		if rng.IntN(3) > 0 {
			w.state = make([]byte, rng.IntN(300))
			for j := range w.state {
				w.state[j] = byte(rng.Uint32())
			}
		}
		var extra []byte
		for range rng.IntN(4) {
			e := encodeRecent(randomID(rng), rng.Uint64(), &ordopb.Reply{})
			w.recent = append(w.recent, e)
			extra = append(extra, e...)
		}
		if rng.IntN(2) == 0 {
			w.fences = protoBytes(t, &ordopb.EntityRecord{SenderShards: []uint32{3, 9}, SenderEpochs: []int64{4, 7}})
			extra = append(extra, w.fences...)
		}
		if rng.IntN(2) == 0 {
			w.reminders = protoBytes(t, &ordopb.EntityRecord{Reminders: []*ordopb.Reminder{{Name: "r", DueUnixNano: 5}}})
			extra = append(extra, w.reminders...)
		}
		if rng.IntN(2) == 0 {
			w.journal.meta = encodeJournalMeta(rng.Uint64(), rng.Uint64(), 2)
			extra = append(extra, w.journal.meta...)
		}
		w.size = len(w.state) + len(extra) + w.coldSize
		p := newPending(w, nil)
		before := make([]byte, rng.IntN(3)*100)
		arena := append(make([]byte, 0, rng.IntN(2)*4096), before...)
		rec, arena := p.record(arena)
		got := rec.Data
		want := append(protoBytes(t, &ordopb.EntityRecord{State: w.state, Epoch: w.epoch, Seq: w.seq,
			DedupGeneration: w.dedupGen, DedupLen: uint32(w.dedupLen)}), extra...)
		if !bytes.Equal(got, want) {
			t.Fatalf("seed %d, case %d: record\n%x\nwant\n%x", seed, i, got, want)
		}
		if cap(got) != len(got) {
			t.Fatalf("seed %d, case %d: record of %d bytes in a slice of %d", seed, i, len(got), cap(got))
		}
		if len(arena) != len(before)+len(got) || !bytes.Equal(arena[:len(before)], before) ||
			!bytes.Equal(arena[len(before):], got) {
			t.Fatalf("seed %d, case %d: the buffer holds %d bytes, want the %d before and the record's %d",
				seed, i, len(arena), len(before), len(got))
		}
	}
}

func protoBytes(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func randomID(rng *rand.Rand) string {
	b := make([]byte, 1+rng.IntN(40))
	for i := range b {
		b[i] = 'a' + byte(rng.IntN(26))
	}
	return string(b)
}
