package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/etcdembed"
	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/ordo-actors/ordo/placement"
	"github.com/ordo-actors/ordo/proto/ordopb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// An attempt in flight is abandoned as soon as the placement table shows
// another owner for its shard, without waiting for AttemptTimeout: a node
// that crashed or handed the shard off may never answer. A change of the
// table that leaves the owner as it was does not end the attempt.
func TestAttemptAbandonedWhenTheOwnerMoves(t *testing.T) {
	leakCheck(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := etcdembed.Start(ctx, etcdembed.Config{Dir: t.TempDir(), UnsafeNoFsync: true, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()

	block := make(chan struct{})
	addr, _ := startFake(t, &fakeNode{answer: func(*ordopb.Call) []*ordopb.Result {
		<-block // never answers while the test runs
		return nil
	}})
	defer close(block)

	const prefix, shard = "/router-test", 3
	keys, err := placement.NewKeys(prefix)
	if err != nil {
		t.Fatal(err)
	}
	register := func(id, remote string) {
		v, err := json.Marshal(placement.NodeInfo{ID: id, RemoteAddr: remote})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cli.Put(ctx, keys.Node(id), string(v)); err != nil {
			t.Fatal(err)
		}
	}
	register("n1", addr)
	lease, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	epoch, err := placement.Acquire(ctx, cli, keys, shard, "n1", lease.ID)
	if err != nil {
		t.Fatal(err)
	}

	tbl, err := placement.NewTable(cli, prefix, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	if err := tbl.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer tbl.Close()
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if o, ok := tbl.Lookup(shard); !ok || o.NodeID != "n1" {
			return errors.New("the table does not show n1 owning the shard yet")
		}
		if _, ok := tbl.Node("n1"); !ok {
			return errors.New("the table does not know n1 yet")
		}
		return nil
	})

	tr := newTransport(quietLog(), nil)
	defer tr.close(true)
	policy := DefaultRetryPolicy()
	policy.AttemptTimeout = time.Hour
	r := &router{table: tbl, tr: tr, shards: 8, policy: policy, log: quietLog()}

	type result struct {
		rep   *ordopb.Reply
		err   error
		owner placement.Owner // the shard's owner in the table when the attempt ended
	}
	done := make(chan result, 1)
	go func() {
		rep, err := r.attempt(ctx, shard, &ordopb.Envelope{RequestId: "r1"})
		owner, _ := tbl.Lookup(shard)
		done <- result{rep, err, owner}
	}()
	pending := func(want int) func() error { // calls waiting in the transport
		return func() error {
			p, err := tr.peer(addr)
			if err != nil {
				return err
			}
			p.mu.Lock()
			defer p.mu.Unlock()
			if len(p.pending) != want {
				return fmt.Errorf("%d calls pending in the transport, want %d", len(p.pending), want)
			}
			return nil
		}
	}
	inFlight := pending(1)
	testutil.Eventually(t, 10*time.Second, time.Millisecond, inFlight)

	// Another node joins: the table changes, the shard's owner does not.
	register("n3", "127.0.0.1:1")
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if _, ok := tbl.Node("n3"); !ok {
			return errors.New("the table does not know n3 yet")
		}
		return nil
	})
	select {
	case res := <-done:
		t.Fatalf("the attempt ended on a change that kept its owner: %v, %v", res.rep, res.err)
	default:
	}
	if err := inFlight(); err != nil {
		t.Fatal(err)
	}

	// The shard moves to n2: the attempt ends, as unreachable (retried).
	if err := placement.Unlock(ctx, cli, keys, shard, epoch); err != nil {
		t.Fatal(err)
	}
	register("n2", "127.0.0.1:1")
	if _, err := placement.Acquire(ctx, cli, keys, shard, "n2", lease.ID); err != nil {
		t.Fatal(err)
	}
	res := <-done
	if !errors.Is(res.err, errUnreachable) || !strings.Contains(res.err.Error(), "moved") {
		t.Fatalf("attempt after the shard moved = %v, %v; want errUnreachable (moved)", res.rep, res.err)
	}
	if res.owner.NodeID == "n1" {
		t.Fatal("the attempt ended while n1 still owned the shard")
	}
	// The abandoned call no longer waits in the transport.
	testutil.Eventually(t, 10*time.Second, time.Millisecond, pending(0))
}
