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
