package cluster

import (
	"errors"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/placement"
	"github.com/ordo-actors/ordo/proto/ordopb"
)

// RetryPolicy.next waits at least an error's retry-after hint and allows
// MaxAttempts attempts in all (0: no bound).
func TestRetryPolicyNext(t *testing.T) {
	p := DefaultRetryPolicy()
	p.MaxAttempts = 3
	hinted := &actors.Error{Code: ordopb.Code_CODE_UNAVAILABLE, RetryAfter: time.Hour}
	for attempt := 0; attempt < 2; attempt++ {
		wait, more := p.next(attempt, attempt+1, hinted)
		if !more || wait < time.Hour {
			t.Fatalf("after attempt %d: wait %v, more %v; want at least the hint, more", attempt, wait, more)
		}
		if wait, _ := p.next(attempt, attempt+1, errors.New("no hint")); wait > p.Max {
			t.Fatalf("after attempt %d: wait %v without a hint, above Max", attempt, wait)
		}
	}
	if _, more := p.next(2, 3, hinted); more {
		t.Fatal("a fourth attempt allowed with MaxAttempts 3")
	}
	if _, more := p.next(100, 2, hinted); !more {
		t.Fatal("attempts that reached no node counted against MaxAttempts")
	}
	p.MaxAttempts = 0
	if _, more := p.next(1000, 1000, nil); !more {
		t.Fatal("MaxAttempts 0 must not bound the attempts")
	}
	if DefaultRetryPolicy().MaxAttempts == 0 {
		t.Fatal("the default policy must bound the attempts")
	}
	p.MaxAttempts = -1
	if p.validate() == nil {
		t.Fatal("negative MaxAttempts accepted")
	}
}

// A call's backoff grows with its failures since the shard's owner last
// changed: a new owner (or none, then one) starts the streak over.
func TestFailStreakRestartsWithTheOwner(t *testing.T) {
	a := placement.Owner{NodeID: "a", Epoch: 1}
	b := placement.Owner{NodeID: "b", Epoch: 2}
	var s failStreak
	steps := []struct {
		owner placement.Owner
		owned bool
		want  int
	}{
		{a, true, 0}, {a, true, 1}, {a, true, 2}, {a, true, 3},
		{placement.Owner{}, false, 0}, {placement.Owner{}, false, 1},
		{b, true, 0}, {b, true, 1},
		{placement.Owner{NodeID: "b", Epoch: 3}, true, 0}, // b again, a new epoch
		{a, true, 0}, {a, true, 1}, {a, true, 2},
	}
	for i, st := range steps {
		if got := s.failed(st.owner, st.owned); got != st.want {
			t.Fatalf("failure %d (owner %v, owned %v): streak %d, want %d", i, st.owner, st.owned, got, st.want)
		}
	}
}
