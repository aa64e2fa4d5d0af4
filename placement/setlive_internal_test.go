package placement

import (
	"slices"
	"testing"
)

// SetLive recomputes the desired owners and wakes the reconciler only when
// the live set changes: the cluster feeds the same set every 200 ms.
func TestSetLiveWakesReconcileOnlyOnChange(t *testing.T) {
	n := &Agent{cfg: Config{NodeID: "b", Shards: 64}, kick: make(chan struct{}, 1)}
	kicked := func() bool {
		select {
		case <-n.kick:
			return true
		default:
			return false
		}
	}
	n.SetLive([]string{"a"})
	if !kicked() {
		t.Fatal("the first live set woke no reconcile")
	}
	first := n.desired
	for _, live := range [][]string{{"a"}, {"a", "b"}, {"b", "a", "a"}} {
		n.SetLive(live)
		if kicked() {
			t.Fatalf("SetLive(%v), the same set again, woke a reconcile", live)
		}
		if &n.desired[0] != &first[0] {
			t.Fatalf("SetLive(%v), the same set again, recomputed the desired owners", live)
		}
	}
	n.SetLive([]string{"c"})
	if !kicked() {
		t.Fatal("a changed live set woke no reconcile")
	}
	if want := desiredOwners(64, []string{"b", "c"}); !slices.Equal(n.desired, want) {
		t.Fatalf("desired owners over b, c: %v, want %v", n.desired, want)
	}
}
