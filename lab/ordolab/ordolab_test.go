package ordolab_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/ordo-actors/ordo/lab"
	"github.com/ordo-actors/ordo/lab/ordolab"
)

// The ordo approach under the lab's pauses: transfers carrying a pause
// freeze a node past its lease; money is conserved and every balance is
// readable afterwards.
func TestApproachWithPauses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a, err := ordolab.Builder("ordo", "etcd").New(ctx, lab.Settings{TTL: time.Second, Concurrency: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	const accounts, initial = 16, 100
	if err := a.Setup(ctx, accounts, initial); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 8)
	for c := range 8 {
		go func() {
			var err error
			for i := 0; i < 30 && err == nil; i++ {
				tctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				if c == 0 && i == 5 {
					tctx = lab.WithPause(tctx, 2500*time.Millisecond)
				}
				err = a.Transfer(tctx, (c+i)%accounts, (c+i+1)%accounts, int64(1+i%7))
				cancel()
				if errors.Is(err, lab.ErrInsufficientFunds) {
					err = nil
				}
			}
			done <- err
		}()
	}
	for range 8 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	bctx, bcancel := context.WithTimeout(ctx, 20*time.Second)
	defer bcancel()
	bal, err := a.Balances(bctx)
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, b := range bal {
		sum += b
	}
	if sum != accounts*initial {
		t.Fatalf("total %d, want %d", sum, accounts*initial)
	}
	ap := a.(*ordolab.Approach)
	if ap.Pauses() != 1 {
		t.Fatalf("%d node pauses, want 1", ap.Pauses())
	}
	// No node is left holding shards in placement that it does not serve
	// (a resumed node's stale writes, fenced, must not take the newer
	// ownership of their shards down): every node ends ready, which
	// includes serving every shard it holds (cluster.Node.Readiness).
	for _, n := range ap.Cluster().Nodes() {
		if n == nil {
			continue
		}
		testutil.Eventually(t, 20*time.Second, 20*time.Millisecond, n.Readiness)
	}
}
