package pgstore_test

import (
	"context"
	"fmt"

	"github.com/ordo-actors/ordo/persistence"
	pgstore "github.com/ordo-actors/ordo/persistence/pgstore"
)

func ExampleOpen() {
	ctx := context.TODO()
	cfg := pgstore.DefaultConfig()
	cfg.URL = "postgres://postgres:ordo@127.0.0.1:5432/ordo_test?sslmode=disable"
	s, err := pgstore.Open(ctx, cfg) // creates or upgrades the schema
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()

	// Fence before reading or writing anything of the shard.
	if err := s.Fence(ctx, 3, 1); err != nil {
		fmt.Println(err)
		return
	}
	out, err := s.Save(ctx, []persistence.Record{{Kind: "account", ID: "alice", Shard: 3, Epoch: 1, Data: []byte("100")}})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(out[3])
}
