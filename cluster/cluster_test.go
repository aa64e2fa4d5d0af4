package cluster_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/cluster"
	"github.com/ordo-actors/ordo/proto/testpb"
	"github.com/stretchr/testify/require"
)

// Three nodes and a client-only process: every call is answered, from
// wherever it is made, and each caller's calls to an entity apply in order.
func TestCallsFromEveryNodeAndClient(t *testing.T) {
	e := newEnv(t, nil, 64)
	e.startN(3)
	e.settled(e.nodes...)
	client := e.dial()
	callers := []actors.Invoker{e.nodes[0], e.nodes[1], e.nodes[2], client}

	entities := 10_000
	if testing.Short() {
		entities = 1000
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // a safety net, not a speed bound
	defer cancel()
	var failed atomic.Int64
	var wg sync.WaitGroup
	work := make(chan int)
	for w := 0; w < 32; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				inv := callers[i%len(callers)]
				if _, err := cluster.Call[*testpb.Value](ctx, inv, counter(fmt.Sprintf("e%05d", i)), &testpb.Add{Delta: 1}); err != nil {
					failed.Add(1)
					t.Errorf("entity %d: %v", i, err)
				}
			}
		}()
	}
	for i := 0; i < entities; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	require.Zero(t, failed.Load())

	// Per-caller FIFO: each caller sends a sequence to one shared entity.
	const perCaller = 50
	for ci, inv := range callers {
		wg.Add(1)
		go func(ci int, inv actors.Invoker) {
			defer wg.Done()
			sender := fmt.Sprintf("caller-%d", ci)
			for seq := uint64(1); seq <= perCaller; seq++ {
				v, err := cluster.Call[*testpb.Value](ctx, inv, counter("shared"), &testpb.Add{Delta: 1, Sender: sender, Seq: seq})
				if err != nil {
					t.Errorf("%s seq %d: %v", sender, seq, err)
					return
				}
				if v.PrevSeq != seq-1 {
					t.Errorf("%s: seq %d applied after %d", sender, seq, v.PrevSeq)
				}
			}
		}(ci, inv)
	}
	wg.Wait()
	v, err := cluster.Call[*testpb.Value](ctx, client, counter("shared"), &testpb.Get{})
	require.NoError(t, err)
	require.EqualValues(t, perCaller*len(callers), v.Value)
	// Every entity of the first phase holds exactly one add.
	for _, i := range []int{0, 1, entities / 2, entities - 1} {
		v, err := cluster.Call[*testpb.Value](ctx, client, counter(fmt.Sprintf("e%05d", i)), &testpb.Get{})
		require.NoError(t, err)
		require.EqualValues(t, 1, v.Value)
	}
}
