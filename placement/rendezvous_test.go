package placement_test

import (
	"fmt"
	"testing"

	"github.com/ordo-actors/ordo/placement"
)

func TestDesiredDeterministic(t *testing.T) {
	live := []string{"a", "b", "c"}
	rev := []string{"c", "a", "b"}
	for s := uint32(0); s < 1024; s++ {
		if placement.Desired(s, live) != placement.Desired(s, rev) {
			t.Fatalf("shard %d: answer depends on the order of the live set", s)
		}
	}
	if got := placement.Desired(7, nil); got != "" {
		t.Fatalf("empty live set: got %q", got)
	}
	// Pinned values: the hash is part of the placement contract.
	if a, b := placement.Score("a", 0), placement.Score("a", 0); a != b {
		t.Fatal("Score is not a function")
	}
}

func TestDesiredBalanced(t *testing.T) {
	const shards = 4096
	for _, n := range []int{2, 3, 5, 10} {
		live := ids(n)
		count := map[string]int{}
		for s := uint32(0); s < shards; s++ {
			count[placement.Desired(s, live)]++
		}
		mean := shards / n
		for _, id := range live {
			if c := count[id]; c < mean*80/100 || c > mean*120/100 {
				t.Errorf("%d nodes: %s has %d shards, mean %d (outside ±20%%)", n, id, c, mean)
			}
		}
	}
}

func TestDesiredMinimalMovement(t *testing.T) {
	const shards = 4096
	for _, n := range []int{1, 2, 4, 9} {
		before := ids(n)
		after := append(ids(n), "joiner")
		moved, toJoiner := 0, 0
		for s := uint32(0); s < shards; s++ {
			a, b := placement.Desired(s, before), placement.Desired(s, after)
			if a != b {
				moved++
				if b == "joiner" {
					toJoiner++
				}
			}
		}
		if moved != toJoiner {
			t.Errorf("%d nodes: %d shards moved, only %d to the joiner", n, moved, toJoiner)
		}
		ideal := shards / (n + 1)
		if moved > ideal*125/100 {
			t.Errorf("%d nodes: %d shards moved, ideal %d", n, moved, ideal)
		}
		t.Logf("%d -> %d nodes: %d of %d shards moved (ideal %d)", n, n+1, moved, shards, ideal)
	}
}

func TestRevokerDeterministic(t *testing.T) {
	live := []string{"a", "b", "c", "d"}
	for i := 0; i < 50; i++ {
		subject := fmt.Sprintf("dead%d", i)
		r := placement.Revoker(subject, live)
		if r == "" || r == subject {
			t.Fatalf("revoker of %s: %q", subject, r)
		}
		if r2 := placement.Revoker(subject, []string{"d", subject, "c", "b", "a"}); r2 != r {
			t.Fatalf("revoker depends on order or on the subject's presence: %q vs %q", r, r2)
		}
	}
	if r := placement.Revoker("a", []string{"a"}); r != "" {
		t.Fatalf("only the subject live: got %q", r)
	}
}
