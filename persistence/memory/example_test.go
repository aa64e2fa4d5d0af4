package memory_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/ordo-actors/ordo/persistence"
	"github.com/ordo-actors/ordo/persistence/memory"
)

func Example() {
	ctx := context.TODO()
	s := memory.New()
	defer s.Close()

	// The owner of shard 7 under epoch 3 fences the shard, then writes.
	if err := s.Fence(ctx, 7, 3); err != nil {
		fmt.Println(err)
		return
	}
	out, err := s.Save(ctx, []persistence.Record{{Kind: "account", ID: "alice", Shard: 7, Epoch: 3, Data: []byte("100")}})
	fmt.Println(out[7], err)

	// A new owner fences with epoch 4: the old owner's writes are refused.
	_ = s.Fence(ctx, 7, 4)
	out, _ = s.Save(ctx, []persistence.Record{{Kind: "account", ID: "alice", Shard: 7, Epoch: 3, Data: []byte("0")}})
	fmt.Println(errors.Is(out[7], persistence.ErrFenced), out[7])

	r, _ := s.Load(ctx, "account", "alice")
	fmt.Printf("%s epoch %d\n", r.Data, r.Epoch)
	// Output:
	// <nil> <nil>
	// true persistence: shard 7 fenced: epoch 3, store has 4
	// 100 epoch 3
}

// An event-sourced entity appends events with the record that holds its
// snapshot, replays them from a sequence number, and a projection follows
// the kind's journal from a stored offset.
func Example_journal() {
	ctx := context.TODO()
	var store persistence.Store = memory.New()
	defer store.Close()
	j, ok := store.(persistence.Journal) // stores without journals refuse event-sourced kinds
	if !ok {
		return
	}
	_ = j.Fence(ctx, 7, 3)

	// Data (snapshot and dedup window) and events, in one atomic step.
	out, _ := j.Save(ctx, []persistence.Record{{Kind: "account", ID: "alice", Shard: 7, Epoch: 3, Data: []byte("snapshot@0"),
		Events: []persistence.Event{{Seq: 1, Data: []byte("deposited 100")}, {Seq: 2, Data: []byte("withdrew 30")}}}})
	fmt.Println(out[7])

	// Events must continue the journal: seq 3 comes next, not 4.
	out, _ = j.Save(ctx, []persistence.Record{{Kind: "account", ID: "alice", Shard: 7, Epoch: 3, Data: []byte("snapshot@0"),
		Events: []persistence.Event{{Seq: 4, Data: []byte("deposited 5")}}}})
	fmt.Println(errors.Is(out[7], persistence.ErrSequence), out[7])

	// A snapshot of the state after seq 2 goes with event 3, and events 1
	// and 2 can go (a journal's last event is always kept).
	out, _ = j.Save(ctx, []persistence.Record{{Kind: "account", ID: "alice", Shard: 7, Epoch: 3, Data: []byte("snapshot@2"),
		Events: []persistence.Event{{Seq: 3, Data: []byte("deposited 5")}}, DeleteEventsBefore: 3}})
	fmt.Println(out[7])

	// Activation: load the snapshot, replay what follows it.
	r, _ := j.Load(ctx, "account", "alice")
	events, _ := j.ReadEvents(ctx, "account", "alice", 3, 100)
	fmt.Printf("%s, then %d event(s): %s\n", r.Data, len(events), events[0].Data)

	// A projection stores next with its read model and resumes from it.
	entries, next, _ := j.ReadJournal(ctx, "account", "", 100)
	for _, e := range entries {
		fmt.Printf("%s/%s %d %s\n", e.Kind, e.ID, e.Seq, e.Data)
	}
	entries, again, _ := j.ReadJournal(ctx, "account", next, 100)
	fmt.Println(len(entries), again == next)
	// Output:
	// <nil>
	// true persistence: shard 7: events of account/alice start at seq 4, the journal ends at 2
	// <nil>
	// snapshot@2, then 1 event(s): deposited 5
	// account/alice 3 deposited 5
	// 0 true
}
