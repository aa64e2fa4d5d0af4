package etcdstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/ordo-actors/ordo/etcdembed"
	"github.com/ordo-actors/ordo/persistence"
	etcdstore "github.com/ordo-actors/ordo/persistence/etcdstore"
	"github.com/ordo-actors/ordo/persistence/storetest"
)

// One embedded etcd member, with a real etcd's default limits, serves every
// test of the package; each test works under its own prefix.
var (
	endpoints []string
	prefixes  atomic.Int64
)

const (
	serverMaxTxnOps       = 128
	serverMaxRequestBytes = 1536 * 1024
)

func TestMain(m *testing.M) {
	os.Exit(func() int {
		dir, err := os.MkdirTemp("", "etcdstore-test-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		srv, err := etcdembed.Start(ctx, etcdembed.Config{
			Dir: dir, UnsafeNoFsync: true,
			MaxTxnOps: serverMaxTxnOps, MaxRequestBytes: serverMaxRequestBytes,
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		endpoints = srv.Endpoints()
		code := m.Run()
		srv.Close()
		if code == 0 {
			if err := goleak.Find(); err != nil {
				fmt.Fprintln(os.Stderr, "goleak:", err)
				return 1
			}
		}
		return code
	}())
}

func newClient(t testing.TB, eps []string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

func newPrefix() string { return fmt.Sprintf("/test/%d/store/", prefixes.Add(1)) }

func newStore(t testing.TB, cli *clientv3.Client, cfg etcdstore.Config) *etcdstore.Store {
	t.Helper()
	if cfg.Prefix == "" {
		cfg.Prefix = newPrefix()
	}
	s, err := etcdstore.New(cli, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	storetest.RunWithReopen(t, func(t *testing.T) storetest.Opener {
		prefix := newPrefix()
		return func(t *testing.T) persistence.Store {
			// A new client each time, so that reopening shares nothing but etcd.
			return newStore(t, newClient(t, endpoints), etcdstore.Config{Prefix: prefix})
		}
	})
}

func TestConfig(t *testing.T) {
	if err := etcdstore.DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	if err := (etcdstore.Config{}).Validate(); err != nil {
		t.Fatalf("zero Config: %v", err)
	}
	for _, c := range []etcdstore.Config{{MaxTxnOps: 1}, {MaxRequestBytes: 100}, {Prefix: "a\x00"}, {RequestTimeout: -1}} {
		if err := c.Validate(); !errors.Is(err, persistence.ErrInvalidConfig) {
			t.Fatalf("%+v: %v, want ErrInvalidConfig", c, err)
		}
	}
	if _, err := etcdstore.New(nil, etcdstore.Config{}); err == nil {
		t.Fatal("New(nil client) succeeded")
	}
}

func fence(t *testing.T, s persistence.Store, shard uint32, epoch int64) {
	t.Helper()
	if err := s.Fence(t.Context(), shard, epoch); err != nil {
		t.Fatal(err)
	}
}

// countingClient counts transactions sent through cli's KV.
func countingClient(t *testing.T) (*clientv3.Client, *atomic.Int64) {
	cli := newClient(t, endpoints)
	n := new(atomic.Int64)
	cli.KV = &countingKV{KV: cli.KV, n: n}
	return cli, n
}

type countingKV struct {
	clientv3.KV
	n *atomic.Int64
}

func (c *countingKV) Txn(ctx context.Context) clientv3.Txn {
	c.n.Add(1)
	return c.KV.Txn(ctx)
}

func TestSplitsByOps(t *testing.T) {
	cli, txns := countingClient(t)
	s := newStore(t, cli, etcdstore.Config{MaxTxnOps: 10})
	var recs []persistence.Record
	for sh := uint32(0); sh < 7; sh++ {
		fence(t, s, sh, 1)
		for i := range 4 {
			recs = append(recs, persistence.Record{Kind: "k", ID: fmt.Sprint(sh, "-", i), Shard: sh, Epoch: 1, Data: []byte("x")})
		}
	}
	// A shard of 11 records can never fit; it fails alone.
	for i := range 11 {
		recs = append(recs, persistence.Record{Kind: "k", ID: fmt.Sprint("big-", i), Shard: 99, Epoch: 1, Data: []byte("x")})
	}
	fence(t, s, 99, 1)
	txns.Store(0)
	out, err := s.Save(t.Context(), recs)
	if err != nil {
		t.Fatal(err)
	}
	for sh := uint32(0); sh < 7; sh++ {
		if out[sh] != nil {
			t.Fatalf("shard %d: %v", sh, out[sh])
		}
	}
	if !errors.Is(out[99], persistence.ErrTooLarge) {
		t.Fatalf("oversized shard: %v", out[99])
	}
	// 7 groups of 4 puts, 2 groups per transaction: 4 transactions.
	if n := txns.Load(); n != 4 {
		t.Fatalf("%d transactions, want 4", n)
	}
	for _, r := range recs {
		_, err := s.Load(t.Context(), r.Kind, r.ID)
		if r.Shard == 99 && !errors.Is(err, persistence.ErrNotFound) || r.Shard != 99 && err != nil {
			t.Fatalf("%s/%s: %v", r.Kind, r.ID, err)
		}
	}
}

func TestOneTxnAndRetryWhenFenced(t *testing.T) {
	cli, txns := countingClient(t)
	s := newStore(t, cli, etcdstore.Config{})
	var recs []persistence.Record
	for sh := uint32(0); sh < 20; sh++ {
		fence(t, s, sh, 1)
		recs = append(recs, persistence.Record{Kind: "k", ID: fmt.Sprint(sh), Shard: sh, Epoch: 1, Data: []byte("x")})
	}
	txns.Store(0)
	out, err := s.Save(t.Context(), recs)
	if err != nil || len(out) != 20 {
		t.Fatal(out, err)
	}
	if n := txns.Load(); n != 1 {
		t.Fatalf("%d transactions for a batch within limits, want 1", n)
	}
	fence(t, s, 3, 2)
	fence(t, s, 17, 2)
	txns.Store(0)
	out, err = s.Save(t.Context(), recs)
	if err != nil {
		t.Fatal(err)
	}
	for sh, e := range out {
		if (sh == 3 || sh == 17) != errors.Is(e, persistence.ErrFenced) || (sh != 3 && sh != 17 && e != nil) {
			t.Fatalf("shard %d: %v", sh, e)
		}
	}
	if n := txns.Load(); n != 2 {
		t.Fatalf("%d transactions, want 2 (guarded, then retried without the fenced shards)", n)
	}
}

func TestSplitsByBytes(t *testing.T) {
	cli, txns := countingClient(t)
	s := newStore(t, cli, etcdstore.Config{})
	big := make([]byte, 700<<10)
	var recs []persistence.Record
	for sh := uint32(0); sh < 4; sh++ {
		fence(t, s, sh, 1)
		recs = append(recs, persistence.Record{Kind: "k", ID: fmt.Sprint(sh), Shard: sh, Epoch: 1, Data: big})
	}
	txns.Store(0)
	out, err := s.Save(t.Context(), recs)
	if err != nil {
		t.Fatal(err)
	}
	for sh, e := range out {
		if e != nil {
			t.Fatalf("shard %d: %v", sh, e)
		}
	}
	if n := txns.Load(); n != 2 {
		t.Fatalf("%d transactions, want 2", n)
	}
}

func TestTooLarge(t *testing.T) {
	s := newStore(t, newClient(t, endpoints), etcdstore.Config{})
	fence(t, s, 1, 1)
	fence(t, s, 2, 1)
	fence(t, s, 3, 1)
	recs := []persistence.Record{
		{Kind: "k", ID: "huge", Shard: 1, Epoch: 1, Data: make([]byte, 2<<20)},
		{Kind: "k", ID: "small", Shard: 1, Epoch: 1, Data: []byte("same shard as huge")},
		// Two records of 1 MiB fit alone but not together, and one shard is
		// never split.
		{Kind: "k", ID: "a", Shard: 2, Epoch: 1, Data: make([]byte, 1<<20)},
		{Kind: "k", ID: "b", Shard: 2, Epoch: 1, Data: make([]byte, 1<<20)},
		{Kind: "k", ID: "ok", Shard: 3, Epoch: 1, Data: []byte("fine")},
	}
	out, err := s.Save(t.Context(), recs)
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(out[1], persistence.ErrTooLarge) || !strings.Contains(out[1].Error(), "k/huge") {
		t.Fatalf("shard 1: %v", out[1])
	}
	if !errors.Is(out[2], persistence.ErrTooLarge) {
		t.Fatalf("shard 2: %v", out[2])
	}
	if out[3] != nil {
		t.Fatalf("shard 3: %v", out[3])
	}
	if _, err := s.Load(t.Context(), "k", "ok"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"huge", "small", "a", "b"} {
		if _, err := s.Load(t.Context(), "k", id); !errors.Is(err, persistence.ErrNotFound) {
			t.Fatalf("%s: %v", id, err)
		}
	}
}

// The largest record the store sends is one the server accepts; one byte
// more is refused by the store itself.
func TestRecordSizeLimitEdge(t *testing.T) {
	s := newStore(t, newClient(t, endpoints), etcdstore.Config{Prefix: "/edge/"})
	fence(t, s, 1, 1)
	// Shard 1's guard, key and encoding overhead use a few hundred bytes
	// at most of the limit's margin; find the largest accepted size.
	size := serverMaxRequestBytes - 4096 + 256 // just over the store's own margin
	for ; size > 0; size -= 128 {
		out, err := s.Save(t.Context(), []persistence.Record{{Kind: "k", ID: "edge", Shard: 1, Epoch: 1, Data: make([]byte, size)}})
		if err != nil {
			t.Fatal(err)
		}
		if out[1] == nil {
			break
		}
		if !errors.Is(out[1], persistence.ErrTooLarge) || !strings.Contains(out[1].Error(), "record k/edge") {
			t.Fatalf("size %d: %v", size, out[1])
		}
	}
	if size < serverMaxRequestBytes-8192 {
		t.Fatalf("largest accepted record is %d bytes, want within 8 KiB of %d", size, serverMaxRequestBytes)
	}
}

// A store configured above the server's limits gets the server's refusal
// as an ErrTooLarge outcome for the shards concerned, and only for them:
// a transaction of several shards that the server refuses is split, and
// the shards that fit alone are written.
func TestServerLimitBelowConfig(t *testing.T) {
	cli, txns := countingClient(t)
	s := newStore(t, cli, etcdstore.Config{MaxTxnOps: 4 * serverMaxTxnOps})
	fence(t, s, 1, 1)
	fence(t, s, 2, 1)
	var recs []persistence.Record
	for i := range serverMaxTxnOps + 1 {
		recs = append(recs, persistence.Record{Kind: "k", ID: fmt.Sprint(i), Shard: 1, Epoch: 1, Data: []byte("x")})
	}
	for i := range 10 {
		recs = append(recs, persistence.Record{Kind: "k", ID: fmt.Sprint("fits-", i), Shard: 2, Epoch: 1, Data: []byte("x")})
	}
	txns.Store(0)
	out, err := s.Save(t.Context(), recs)
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(out[1], persistence.ErrTooLarge) {
		t.Fatalf("shard 1: got %v", out[1])
	}
	if out[2] != nil {
		t.Fatalf("shard 2, which fits alone: %v", out[2])
	}
	// Both shards in one transaction (refused), then each alone.
	if n := txns.Load(); n != 3 {
		t.Fatalf("%d transactions, want 3", n)
	}
	for _, r := range recs {
		_, err := s.Load(t.Context(), r.Kind, r.ID)
		if r.Shard == 1 && !errors.Is(err, persistence.ErrNotFound) || r.Shard == 2 && err != nil {
			t.Fatalf("%s/%s: %v", r.Kind, r.ID, err)
		}
	}
}

func TestCorruptValues(t *testing.T) {
	cli := newClient(t, endpoints)
	prefix := newPrefix()
	s := newStore(t, cli, etcdstore.Config{Prefix: prefix})
	if _, err := cli.Put(t.Context(), prefix+"fences/0000000001", "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(t.Context(), prefix+"entities/k/a", "\x07junk"); err != nil {
		t.Fatal(err)
	}
	if err := s.Fence(t.Context(), 1, 1); !errors.Is(err, etcdstore.ErrCorrupt) {
		t.Fatalf("Fence over a corrupt fence: %v", err)
	}
	out, err := s.Save(t.Context(), []persistence.Record{{Kind: "k", ID: "b", Shard: 1, Epoch: 1, Data: []byte{}}})
	if err != nil || !errors.Is(out[1], etcdstore.ErrCorrupt) {
		t.Fatalf("Save under a corrupt fence: %v, %v", out, err)
	}
	if _, err := s.Load(t.Context(), "k", "a"); !errors.Is(err, etcdstore.ErrCorrupt) {
		t.Fatalf("Load of a corrupt record: %v", err)
	}
}

// With the server gone, Save reports an unknown outcome per shard (not a
// batch error, not ErrFenced), and Fence and Load fail.
func TestConnectionLoss(t *testing.T) {
	srv, err := etcdembed.Start(t.Context(), etcdembed.Config{Dir: t.TempDir(), UnsafeNoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	// etcdembed.Server.Close is not idempotent (embed.Etcd.Close panics the
	// second time), so it is called exactly once, on every path.
	closeSrv := sync.OnceFunc(srv.Close)
	defer closeSrv()
	s := newStore(t, newClient(t, srv.Endpoints()), etcdstore.Config{})
	fence(t, s, 1, 1)
	fence(t, s, 2, 1)
	closeSrv()
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	out, err := s.Save(ctx, []persistence.Record{
		{Kind: "k", ID: "a", Shard: 1, Epoch: 1, Data: []byte("x")},
		{Kind: "k", ID: "b", Shard: 2, Epoch: 1, Data: []byte("x")},
	})
	if err != nil {
		t.Fatal(err)
	}
	for sh, e := range out {
		if !errors.Is(e, etcdstore.ErrOutcomeUnknown) || errors.Is(e, persistence.ErrFenced) {
			t.Fatalf("shard %d: %v", sh, e)
		}
	}
	if err := s.Fence(ctx, 1, 2); err == nil {
		t.Fatal("Fence without a server succeeded")
	}
	if _, err := s.Load(ctx, "k", "a"); err == nil || errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("Load without a server: %v", err)
	}
}

// TestServerRestart stops the etcd member while saves run and starts it
// again on the same data and port: saves fail with unknown outcomes
// meanwhile, nothing is partly written, no acknowledged round is lost, and
// the same store recovers.
//
// After a Save with an unknown outcome the writer raises every shard's
// fence to a new epoch before it writes again, as the runtime does (it
// serves such a shard again only under a new epoch). It must: an unknown
// outcome does not end the transaction. The store leaves it running (up to
// 30s), and the etcd client holds a call made while the member is down
// until it connects again, so a round given up during the outage is sent
// after the restart, and can be applied after later rounds were
// acknowledged. Under the same epoch it would overwrite them (etcd's
// history showed rounds 6 and 7, both given up, applied after round 10 was
// acknowledged); under a new epoch the fence rejects it.
func TestServerRestart(t *testing.T) {
	dir := t.TempDir()
	srv, err := etcdembed.Start(t.Context(), etcdembed.Config{Dir: dir, UnsafeNoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	eps := srv.Endpoints()
	var closeOnce sync.Once // etcdembed.Server.Close is not idempotent
	stopSrv := func() { closeOnce.Do(srv.Close) }
	s := newStore(t, newClient(t, eps), etcdstore.Config{})
	const shards, perShard = 3, 10
	for sh := uint32(0); sh < shards; sh++ {
		fence(t, s, sh, 1)
	}
	batch := func(round int, epoch int64) []persistence.Record {
		var recs []persistence.Record
		for sh := uint32(0); sh < shards; sh++ {
			for i := range perShard {
				recs = append(recs, persistence.Record{Kind: "r", ID: fmt.Sprint(sh, "-", i), Shard: sh, Epoch: epoch, Data: []byte(fmt.Sprint(round))})
			}
		}
		return recs
	}
	var (
		mu         sync.Mutex
		lastAcked  = -1
		errs, oks  int
		restarting bool
		stop, done = make(chan struct{}), make(chan error, 1)
		epoch      = int64(1) // the writer's; read by the test after done
	)
	stopWriter := sync.OnceFunc(func() { close(stop) })
	defer stopWriter()
	go func() {
		for round := 0; ; round++ {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
			out, err := s.Save(ctx, batch(round, epoch))
			cancel()
			if err != nil {
				done <- err
				return
			}
			allOK := true
			for sh, e := range out {
				if errors.Is(e, persistence.ErrFenced) || (e != nil && !errors.Is(e, etcdstore.ErrOutcomeUnknown)) {
					done <- fmt.Errorf("round %d shard %d: %w", round, sh, e)
					return
				}
				allOK = allOK && e == nil
			}
			mu.Lock()
			if allOK {
				lastAcked = round
			}
			if restarting {
				if allOK {
					oks++
				} else {
					errs++
				}
			}
			mu.Unlock()
			if allOK {
				continue
			}
			// The round may still land: write on only under a new epoch,
			// whose fence rejects it. Fence fails while the member is down.
			epoch++
			for sh := uint32(0); sh < shards; {
				ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
				err := s.Fence(ctx, sh, epoch)
				cancel()
				switch {
				case err == nil:
					sh++
					continue
				case errors.Is(err, persistence.ErrFenced):
					done <- fmt.Errorf("fence shard %d at %d: %w", sh, epoch, err)
					return
				}
				select {
				case <-stop:
					done <- nil
					return
				case <-time.After(5 * time.Millisecond):
				}
			}
		}
	}()
	storetest.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error {
		mu.Lock()
		defer mu.Unlock()
		if lastAcked < 3 {
			return errors.New("no saves yet")
		}
		restarting = true
		return nil
	})
	stopSrv()
	storetest.CheckFor(t, 10*time.Second, 5*time.Millisecond, func() error {
		mu.Lock()
		defer mu.Unlock()
		if errs == 0 {
			return errors.New("no save failed yet")
		}
		return nil
	})
	srv2, err := etcdembed.Start(t.Context(), etcdembed.Config{Dir: dir, UnsafeNoFsync: true, ClientURL: eps[0]})
	if err != nil {
		stopWriter()
		<-done
		t.Fatal(err)
	}
	defer srv2.Close()
	storetest.CheckFor(t, 30*time.Second, 10*time.Millisecond, func() error {
		mu.Lock()
		defer mu.Unlock()
		if oks < 3 {
			return fmt.Errorf("after restart: %d failed, %d succeeded", errs, oks)
		}
		return nil
	})
	stopWriter()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Shut out anything in flight, then check every shard holds one round.
	for sh := uint32(0); sh < shards; sh++ {
		fence(t, s, sh, epoch+1)
		var first string
		for i := range perShard {
			r, err := s.Load(t.Context(), "r", fmt.Sprint(sh, "-", i))
			if err != nil {
				t.Fatal(err)
			}
			if i == 0 {
				first = string(r.Data)
				var round int
				if _, err := fmt.Sscan(first, &round); err != nil || round < lastAcked {
					t.Fatalf("shard %d at round %q, last acknowledged %d", sh, first, lastAcked)
				}
			} else if string(r.Data) != first {
				t.Fatalf("shard %d partly written: record 0 has round %s, record %d has %s", sh, first, i, r.Data)
			}
		}
	}
}

// lostKV never answers a transaction, as etcd does with a write a
// follower forwarded to a leader that just died: Commit returns only when
// its context ends.
type lostKV struct{ clientv3.KV }

func (l lostKV) Txn(ctx context.Context) clientv3.Txn { return lostTxn{ctx} }

type lostTxn struct{ ctx context.Context }

func (t lostTxn) If(...clientv3.Cmp) clientv3.Txn  { return t }
func (t lostTxn) Then(...clientv3.Op) clientv3.Txn { return t }
func (t lostTxn) Else(...clientv3.Op) clientv3.Txn { return t }
func (t lostTxn) Commit() (*clientv3.TxnResponse, error) {
	<-t.ctx.Done()
	return nil, t.ctx.Err()
}

// TestLostWriteIsBounded checks that a Save whose transaction etcd never
// answers ends with ErrOutcomeUnknown at Config.RequestTimeout, while the
// caller's context is still live.
func TestLostWriteIsBounded(t *testing.T) {
	prefix := newPrefix()
	fence(t, newStore(t, newClient(t, endpoints), etcdstore.Config{Prefix: prefix}), 1, 1)
	cli := newClient(t, endpoints)
	cli.KV = lostKV{cli.KV}
	s := newStore(t, cli, etcdstore.Config{Prefix: prefix, RequestTimeout: 100 * time.Millisecond})
	// The caller's deadline only keeps an unbounded Save from hanging the test.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	out, err := s.Save(ctx, []persistence.Record{{Kind: "k", ID: "a", Shard: 1, Epoch: 1, Data: []byte("x")}})
	if ctx.Err() != nil {
		t.Fatalf("caller's context ended: %v", ctx.Err())
	}
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(out[1], etcdstore.ErrOutcomeUnknown) {
		t.Fatalf("shard 1: %v, want ErrOutcomeUnknown", out[1])
	}
}

// lateOutcome partitions a store from etcd, starts a Save that ends as
// unknown, runs between (with the partition still up) and heals. It
// returns the store that lost touch.
func lateOutcome(t *testing.T, prefix string, between func()) *etcdstore.Store {
	t.Helper()
	px, err := etcdembed.StartProxy(endpoints[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	cut := newStore(t, newClient(t, []string{px.Endpoint()}), etcdstore.Config{Prefix: prefix, RequestTimeout: 100 * time.Millisecond})
	// Connect before the partition.
	if _, err := cut.Load(t.Context(), "k", "warm-up"); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatal(err)
	}
	px.Partition()
	out, err := cut.Save(t.Context(), []persistence.Record{{Kind: "k", ID: "a", Shard: 1, Epoch: 1, Data: []byte("x")}})
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(out[1], etcdstore.ErrOutcomeUnknown) {
		t.Fatalf("shard 1 through a partition: %v, want ErrOutcomeUnknown", out[1])
	}
	between()
	px.Heal()
	return cut
}

// A stale write that etcd rejects after its Save gave up on it is counted
// by LateFenced, and never becomes visible.
func TestLateFencedIsCounted(t *testing.T) {
	prefix := newPrefix()
	direct := newStore(t, newClient(t, endpoints), etcdstore.Config{Prefix: prefix})
	fence(t, direct, 1, 1)
	cut := lateOutcome(t, prefix, func() { fence(t, direct, 1, 2) })
	storetest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if n := cut.LateFenced(); n != 1 {
			return fmt.Errorf("LateFenced = %d, want 1", n)
		}
		return nil
	})
	if _, err := direct.Load(t.Context(), "k", "a"); !errors.Is(err, persistence.ErrNotFound) {
		t.Fatalf("the fenced write is visible: %v", err)
	}
}

// A write that lands after its Save gave up on it is not counted.
func TestLateSuccessIsNotCounted(t *testing.T) {
	prefix := newPrefix()
	direct := newStore(t, newClient(t, endpoints), etcdstore.Config{Prefix: prefix})
	fence(t, direct, 1, 1)
	cut := lateOutcome(t, prefix, func() {})
	storetest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		_, err := direct.Load(t.Context(), "k", "a")
		return err
	})
	// The landing write's answer reaches the store after etcd applied it;
	// wait until nothing of it is left running (Close waits for that).
	if err := cut.Close(); err != nil {
		t.Fatal(err)
	}
	if n := cut.LateFenced(); n != 0 {
		t.Fatalf("LateFenced = %d after a write that landed", n)
	}
}

func events(first uint64, n int) []persistence.Event {
	out := make([]persistence.Event, n)
	for i := range out {
		out[i] = persistence.Event{Seq: first + uint64(i), Data: []byte("e")}
	}
	return out
}

// Each event is one put of the transaction, and each journal appended to
// one or two comparisons: a shard's group must fit MaxTxnOps in both, or
// it fails alone with ErrTooLarge, writing nothing.
func TestJournalTxnLimits(t *testing.T) {
	s := newStore(t, newClient(t, endpoints), etcdstore.Config{})
	fence(t, s, 1, 1)
	fence(t, s, 2, 1)
	save := func(recs ...persistence.Record) map[uint32]error {
		t.Helper()
		out, err := s.Save(t.Context(), recs)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	// The record and 127 events: 128 puts, the limit.
	out := save(persistence.Record{Kind: "k", ID: "a", Shard: 1, Epoch: 1, Data: []byte{}, Events: events(1, serverMaxTxnOps-1)})
	if out[1] != nil {
		t.Fatalf("128 puts: %v", out[1])
	}
	// One more does not fit; shard 2 in the same batch is not affected.
	out = save(
		persistence.Record{Kind: "k", ID: "a", Shard: 1, Epoch: 1, Data: []byte("x"), Events: events(serverMaxTxnOps, serverMaxTxnOps)},
		persistence.Record{Kind: "k", ID: "b", Shard: 2, Epoch: 1, Data: []byte{}, Events: events(1, 1)},
	)
	if !errors.Is(out[1], persistence.ErrTooLarge) || out[2] != nil {
		t.Fatalf("129 puts: %v", out)
	}
	if last, err := s.LastSeq(t.Context(), "k", "a"); err != nil || last != serverMaxTxnOps-1 {
		t.Fatalf("LastSeq = %d, %v", last, err)
	}
	// 64 journals appended to past their first event need 1 + 128
	// comparisons, one over the limit, though only 128 puts.
	var recs []persistence.Record
	for i := range 64 {
		recs = append(recs, persistence.Record{Kind: "k", ID: fmt.Sprint("m", i), Shard: 2, Epoch: 1, Data: []byte{}, Events: events(1, 1)})
	}
	if out := save(recs...); out[2] != nil {
		t.Fatalf("64 first events: %v", out[2])
	}
	for i := range recs {
		recs[i].Events = events(2, 1)
	}
	out = save(recs...)
	if !errors.Is(out[2], persistence.ErrTooLarge) || !strings.Contains(out[2].Error(), "129 comparisons") {
		t.Fatalf("129 comparisons: %v", out[2])
	}
	if out := save(recs[:63]...); out[2] != nil {
		t.Fatalf("127 comparisons: %v", out[2])
	}
}

// Groups with events are packed into transactions by their puts, and a
// transaction guarded on both fences and journals that fails for one
// group is retried with the others.
func TestJournalSplitsAndRetries(t *testing.T) {
	cli, txns := countingClient(t)
	s := newStore(t, cli, etcdstore.Config{})
	var recs []persistence.Record
	for sh := uint32(1); sh <= 3; sh++ {
		fence(t, s, sh, 1)
		recs = append(recs, persistence.Record{Kind: "k", ID: fmt.Sprint(sh), Shard: sh, Epoch: 1, Data: []byte{}, Events: events(1, 60)})
	}
	txns.Store(0)
	out, err := s.Save(t.Context(), recs)
	if err != nil || out[1] != nil || out[2] != nil || out[3] != nil {
		t.Fatal(out, err)
	}
	if n := txns.Load(); n != 2 {
		t.Fatalf("3 groups of 61 puts in %d transactions, want 2", n)
	}
	// Shard 2 out of sequence: one transaction fails on it, the next
	// writes the others.
	recs = []persistence.Record{
		{Kind: "k", ID: "1", Shard: 1, Epoch: 1, Data: []byte{}, Events: events(61, 1)},
		{Kind: "k", ID: "2", Shard: 2, Epoch: 1, Data: []byte{}, Events: events(60, 1)},
		{Kind: "k", ID: "3", Shard: 3, Epoch: 1, Data: []byte{}, Events: events(61, 1)},
	}
	txns.Store(0)
	out, err = s.Save(t.Context(), recs)
	var se *persistence.SequenceError
	if err != nil || out[1] != nil || out[3] != nil || !errors.As(out[2], &se) || se.Last != 60 {
		t.Fatal(out, err)
	}
	if n := txns.Load(); n != 2 {
		t.Fatalf("%d transactions, want 2 (guarded, then retried without shard 2)", n)
	}
}

func TestJournalCorruptValues(t *testing.T) {
	cli := newClient(t, endpoints)
	prefix := newPrefix()
	s := newStore(t, cli, etcdstore.Config{Prefix: prefix})
	fence(t, s, 1, 1)
	out, err := s.Save(t.Context(), []persistence.Record{{Kind: "k", ID: "a", Shard: 1, Epoch: 1, Data: []byte{}, Events: events(1, 2)}})
	if err != nil || out[1] != nil {
		t.Fatal(out, err)
	}
	if _, err := cli.Put(t.Context(), prefix+"journal/k/a\x0000000000000000000002", "\x09junk"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReadEvents(t.Context(), "k", "a", 1, 10); !errors.Is(err, etcdstore.ErrCorrupt) {
		t.Fatalf("ReadEvents over a corrupt event: %v", err)
	}
	if _, _, err := s.ReadJournal(t.Context(), "k", "", 10); !errors.Is(err, etcdstore.ErrCorrupt) {
		t.Fatalf("ReadJournal over a corrupt event: %v", err)
	}
	if _, err := cli.Put(t.Context(), prefix+"journal/k/b\x00x", "\x01"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.LastSeq(t.Context(), "k", "b"); !errors.Is(err, etcdstore.ErrCorrupt) {
		t.Fatalf("LastSeq over a corrupt key: %v", err)
	}
}
