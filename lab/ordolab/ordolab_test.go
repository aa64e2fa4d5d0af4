package ordolab_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/ordo-actors/ordo/lab"
	"github.com/ordo-actors/ordo/lab/ordolab"
	"github.com/ordo-actors/ordo/persistence/pgstore/pgtest"
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

// runShort runs a short lab workload on the approach the builder makes and
// requires every check to pass.
func runShort(t *testing.T, b lab.Builder, s lab.Settings) lab.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s.TTL, s.Concurrency = time.Second, 4
	a, err := b.New(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := a.Close(); err != nil {
			t.Error(err)
		}
	}()
	w := lab.DefaultWorkload()
	w.Accounts, w.Concurrency, w.Duration = 8, 4, 500*time.Millisecond
	w.Seed = uint64(time.Now().UnixNano())
	r, err := lab.Run(ctx, a, w)
	if err != nil {
		t.Fatalf("seed %d: %v", w.Seed, err)
	}
	if !r.Passed() || r.Unknown != 0 {
		t.Fatalf("seed %d: %+v", w.Seed, r)
	}
	return r
}

// ordo on the in-memory store runs the bank's transfers with every check
// passing, and, keeping nothing in PostgreSQL, reports no WAL.
func TestApproachOnMemoryStore(t *testing.T) {
	r := runShort(t, ordolab.Builder("ordo-mem", "memory"), lab.Settings{})
	if r.WALBytes != 0 || r.WALError != "" || r.CheckpointError != "" {
		t.Fatalf("WAL %d bytes, error %q, checkpoint error %q, for an approach with no PostgreSQL", r.WALBytes, r.WALError, r.CheckpointError)
	}
	checkWork(t, r)
	t.Logf("ordo-mem: %d ok, %.0f/s", r.OK, r.Throughput)
}

// checkWork checks the approach's counts of its work against what a
// transfer must cost at least: the client's call over the network, and
// two records of its saga (the start, saved with the debit, and the
// outcome, saved after the credit), and the saga's activation; that every
// Save carries a record; and that sagas start without reading the store
// (ledger.SubmitNew's hint): were every one read, store reads would be
// at least one per transfer. (A write may carry more than its entity's
// record, e.g. an account's older dedup entries, so records may
// outnumber writes.)
func checkWork(t *testing.T, r lab.Result) {
	t.Helper()
	got := map[string]uint64{}
	for _, c := range r.Work {
		got[c.Name] = c.N
	}
	ok := uint64(r.OK)
	if r.WorkError != "" || len(got) != 7 || ok == 0 {
		t.Fatalf("work %+v, error %q, %d ok", r.Work, r.WorkError, ok)
	}
	saves, records, writes := got["store saves"], got["records saved"], got["entity writes"]
	reads, activations := got["store reads"], got["activations"]
	calls, frames := got["network calls"], got["network frames"]
	if saves == 0 || records < saves || writes == 0 || records < 2*ok {
		t.Fatalf("%d ok transfers: %d saves of %d records from %d writes", ok, saves, records, writes)
	}
	if activations < ok || reads >= ok {
		t.Fatalf("%d ok transfers: %d activations, %d store reads", ok, activations, reads)
	}
	if calls < ok || frames == 0 {
		t.Fatalf("%d ok transfers: %d network calls in %d frames", ok, calls, frames)
	}
	per := func(n uint64) float64 { return float64(n) / float64(ok) }
	t.Logf("per transfer: %.2f saves, %.2f records, %.2f writes, %.2f store reads, %.2f activations, %.2f network calls, %.2f frames",
		per(saves), per(records), per(writes), per(reads), per(activations), per(calls), per(frames))
}

// ordo on the PostgreSQL store reports the WAL the server wrote per
// transfer: a transfer's saga and both accounts are written, so it is
// well above a single row's.
func TestApproachOnPostgresReportsWAL(t *testing.T) {
	r := runShort(t, ordolab.Builder("ordo-pg", "postgres"), lab.Settings{PG: pgtest.URL(t)})
	if r.WALError != "" || r.WALBytes <= 0 || r.WALPerTransfer < 200 || r.CheckpointError != "" {
		t.Fatalf("WAL %d bytes, %.0f per transfer, error %q; checkpoint error %q", r.WALBytes, r.WALPerTransfer, r.WALError, r.CheckpointError)
	}
	checkWork(t, r)
	t.Logf("ordo-pg: %d ok, %.0f/s, %.0f B of WAL per transfer", r.OK, r.Throughput, r.WALPerTransfer)
}

// Transfers whose client gave up are settled by Balances, several at once,
// each exactly once: the balances it reads conserve money and reflect
// every one of them.
func TestBalancesSettlesTransfersWhoseClientGaveUp(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a, err := ordolab.Builder("ordo-mem", "memory").New(ctx, lab.Settings{TTL: time.Second, Concurrency: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	const accounts, initial, n = 8, 1000, 60
	if err := a.Setup(ctx, accounts, initial); err != nil {
		t.Fatal(err)
	}
	ap := a.(*ordolab.Approach)
	// A client that gives up before its call leaves: the transfer's
	// outcome is unknown to it.
	gone, giveUp := context.WithCancel(ctx)
	giveUp()
	for i := range n {
		if err := a.Transfer(gone, i%2, 2+i%(accounts-2), 1); err == nil {
			t.Fatalf("transfer %d succeeded with a canceled context", i)
		}
	}
	if got := ap.Unsettled(); got != n {
		t.Fatalf("%d unsettled transfers, want %d", got, n)
	}
	bal, err := a.Balances(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := ap.Unsettled(); got != 0 {
		t.Fatalf("%d transfers still unsettled after Balances", got)
	}
	// Accounts 0 and 1 each sent n/2 transfers of 1, which the other
	// accounts received in turn.
	var sum int64
	for i, b := range bal {
		sum += b
		want := int64(initial + n/(accounts-2))
		if i < 2 {
			want = initial - n/2
		}
		if b != want {
			t.Errorf("account %d: balance %d, want %d (each transfer applied exactly once)", i, b, want)
		}
	}
	if sum != accounts*initial {
		t.Fatalf("total %d, want %d", sum, accounts*initial)
	}
}
