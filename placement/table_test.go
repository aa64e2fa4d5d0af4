package placement_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/ordo-actors/ordo/etcdembed"
	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/ordo-actors/ordo/placement"
)

// tableMatches reports nil when tbl equals a fresh Get of the prefix.
func tableMatches(c *clientv3.Client, tbl *placement.Table, prefix string) error {
	resp, err := c.Get(context.Background(), prefix+"/", clientv3.WithPrefix())
	if err != nil {
		return err
	}
	keys, _ := placement.NewKeys(prefix)
	want := map[uint32]placement.Owner{}
	nodes := map[string]bool{}
	for _, kv := range resp.Kvs {
		k := string(kv.Key)
		if len(k) > len(keys.ShardsPrefix()) && k[:len(keys.ShardsPrefix())] == keys.ShardsPrefix() {
			n, _ := strconv.Atoi(k[len(keys.ShardsPrefix()):])
			want[uint32(n)] = placement.Owner{NodeID: string(kv.Value), Epoch: kv.CreateRevision, Lease: kv.Lease}
		} else if len(k) > len(keys.NodesPrefix()) && k[:len(keys.NodesPrefix())] == keys.NodesPrefix() {
			nodes[k[len(keys.NodesPrefix()):]] = true
		}
	}
	got, rev := tbl.Snapshot()
	if len(got) != len(want) {
		return fmt.Errorf("table (rev %d) has %d shards, etcd (rev %d) %d", rev, len(got), resp.Header.Revision, len(want))
	}
	for s, o := range want {
		if got[s] != o {
			return fmt.Errorf("shard %d: table %+v, etcd %+v", s, got[s], o)
		}
	}
	if len(tbl.Nodes()) != len(nodes) {
		return fmt.Errorf("table has %d nodes, etcd %d", len(tbl.Nodes()), len(nodes))
	}
	for id := range nodes {
		if _, ok := tbl.Node(id); !ok {
			return fmt.Errorf("node %s missing from the table", id)
		}
	}
	return nil
}

// churn runs random lock, registry and lease operations from several
// goroutines until ops operations are done. Errors are ignored: etcd may be
// unreachable for part of the run.
func churn(c *clientv3.Client, prefix string, seed uint64, workers, ops int) {
	keys, _ := placement.NewKeys(prefix)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			ctx := context.Background()
			var lease clientv3.LeaseID
			for i := 0; i < ops; i++ {
				rctx, cancel := context.WithTimeout(ctx, time.Second)
				shard := uint32(rng.IntN(64))
				switch op := rng.IntN(10); {
				case op < 4:
					if lease == 0 {
						if g, err := c.Grant(rctx, 30); err == nil {
							lease = g.ID
						}
					}
					_, _ = placement.Acquire(rctx, c, keys, shard, fmt.Sprintf("w%d", w), lease)
				case op < 7:
					if r, err := c.Get(rctx, keys.Shard(shard)); err == nil && len(r.Kvs) > 0 {
						_ = placement.Unlock(rctx, c, keys, shard, r.Kvs[0].CreateRevision)
					}
				case op < 9:
					id := fmt.Sprintf("node%d", rng.IntN(8))
					if rng.IntN(2) == 0 {
						v, _ := json.Marshal(placement.NodeInfo{ID: id, RemoteAddr: strconv.Itoa(i)})
						_, _ = c.Put(rctx, keys.Node(id), string(v))
					} else {
						_, _ = c.Delete(rctx, keys.Node(id))
					}
				default:
					if lease != 0 {
						_, _ = c.Revoke(rctx, lease) // deletes many keys in one revision
						lease = 0
					}
				}
				cancel()
			}
		}()
	}
	wg.Wait()
}

func TestTableWatchCompleteness(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("ORDO_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (replay with ORDO_SEED)", seed)

	// Only a bound against hanging: the churn alone is thousands of etcd
	// requests, slow on a loaded machine.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := etcdembed.StartCluster(ctx, etcdembed.ClusterConfig{
		Dir: t.TempDir(), Members: 3, UnsafeNoFsync: true, Logger: zap.NewNop(), TickMs: 50, ElectionMs: 500,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	const prefix = "/ordo/table"
	// The table talks to member 0 only; churn goes through members 1 and 2.
	direct := newClient(t, cl.Endpoint(1), cl.Endpoint(2))
	compactions := &countHandler{msg: "placement: watch ended", attr: "compacted"}
	tblClient := newClient(t, cl.Endpoint(0))
	tbl, err := placement.NewTable(tblClient, prefix, slog.New(compactions))
	if err != nil {
		t.Fatal(err)
	}
	if err := tbl.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer tbl.Close()
	changes, unsubscribe := tbl.Subscribe()
	defer unsubscribe()
	changed := tbl.Changed()

	// Heavy churn while the table watches.
	churn(direct, prefix, seed, 8, 250)
	testutil.Eventually(t, 20*time.Second, 20*time.Millisecond, func() error { return tableMatches(direct, tbl, prefix) })
	select {
	case <-changes:
	default:
		t.Fatal("no change notification after churn")
	}
	select {
	case <-changed:
	default:
		t.Fatal("Changed's channel still open after churn")
	}
	if next := tbl.Changed(); next == changed {
		t.Fatal("Changed returned the closed channel again")
	}
	changed = tbl.Changed()

	// Stop the table's member, churn, compact past the table's revision,
	// restart it: the resumed watch fails with a compaction and the table
	// relists.
	before := tbl.Revision()
	cl.Kill(0)
	churn(direct, prefix, seed+1, 4, 100)
	resp, err := direct.Get(ctx, "compact-probe")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := direct.Compact(ctx, resp.Header.Revision); err != nil {
		t.Fatal(err)
	}
	if err := cl.Restart(ctx, 0); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 30*time.Second, 20*time.Millisecond, func() error { return tableMatches(direct, tbl, prefix) })
	select {
	case <-changed:
	default:
		t.Fatal("Changed's channel still open after the relist")
	}
	if tbl.Revision() <= before {
		t.Fatalf("table revision %d did not move past %d", tbl.Revision(), before)
	}
	if compactions.count() == 0 {
		t.Fatal("the watch never reported the compaction; the relist path was not exercised")
	}
}

// countHandler is a slog.Handler counting records with message msg and a
// non-zero attribute attr.
type countHandler struct {
	msg, attr string
	mu        sync.Mutex
	n         int
}

func (h *countHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *countHandler) WithGroup(string) slog.Handler            { return h }
func (h *countHandler) Handle(ctx context.Context, r slog.Record) error {
	if os.Getenv("ORDO_TEST_LOG") != "" {
		_ = testutil.Logger().Handler().Handle(ctx, r)
	}
	if r.Message != h.msg {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == h.attr && a.Value.String() != "0" {
			h.mu.Lock()
			h.n++
			h.mu.Unlock()
		}
		return true
	})
	return nil
}

func (h *countHandler) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}

func TestTableStartFailsWithoutEtcd(t *testing.T) {
	srv := startEtcd(t)
	eps := srv.Endpoints()
	srv.Close()
	tbl, err := placement.NewTable(newClient(t, eps...), "/ordo/x", testutil.Logger())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := tbl.Start(ctx); err == nil {
		t.Fatal("Start succeeded without etcd")
	}
	tbl.Close()
	if _, err := placement.NewTable(nil, "bad prefix", nil); err == nil {
		t.Fatal("NewTable accepted an invalid prefix")
	}
}
