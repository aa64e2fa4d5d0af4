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

// routerFixture is a router to one node, n1, that owns shard 3 and never
// answers while the test runs (a fake node), with its table in a real etcd.
type routerFixture struct {
	t     *testing.T
	ctx   context.Context
	cli   *clientv3.Client
	keys  placement.Keys
	lease clientv3.LeaseID
	epoch int64
	tbl   *placement.Table
	tr    *transport
	r     *router
	addr  string
}

const fixtureShard = 3

func newRouterFixture(t *testing.T, policy RetryPolicy) *routerFixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	srv, err := etcdembed.Start(ctx, etcdembed.Config{Dir: t.TempDir(), UnsafeNoFsync: true, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })

	block := make(chan struct{})
	addr, _ := startFake(t, &fakeNode{answer: func(*ordopb.Call) []*ordopb.Result {
		<-block // never answers while the test runs
		return nil
	}})
	t.Cleanup(func() { close(block) })

	keys, err := placement.NewKeys("/router-test")
	if err != nil {
		t.Fatal(err)
	}
	f := &routerFixture{t: t, ctx: ctx, cli: cli, keys: keys, addr: addr}
	f.register("n1", addr)
	lease, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	f.lease = lease.ID
	if f.epoch, err = placement.Acquire(ctx, cli, keys, fixtureShard, "n1", lease.ID); err != nil {
		t.Fatal(err)
	}
	if f.tbl, err = placement.NewTable(cli, "/router-test", quietLog()); err != nil {
		t.Fatal(err)
	}
	if err := f.tbl.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.tbl.Close() })
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if o, ok := f.tbl.Lookup(fixtureShard); !ok || o.NodeID != "n1" {
			return errors.New("the table does not show n1 owning the shard yet")
		}
		if _, ok := f.tbl.Node("n1"); !ok {
			return errors.New("the table does not know n1 yet")
		}
		return nil
	})
	f.tr = newTransport(quietLog(), nil)
	t.Cleanup(func() { f.tr.close(true) })
	f.r = &router{table: f.tbl, tr: f.tr, shards: 8, policy: policy, log: quietLog()}
	return f
}

// register publishes a node's address, as the node itself would.
func (f *routerFixture) register(id, remote string) {
	f.t.Helper()
	v, err := json.Marshal(placement.NodeInfo{ID: id, RemoteAddr: remote})
	if err != nil {
		f.t.Fatal(err)
	}
	if _, err := f.cli.Put(f.ctx, f.keys.Node(id), string(v)); err != nil {
		f.t.Fatal(err)
	}
}

// pending returns a check that want calls wait in the transport for n1.
func (f *routerFixture) pending(want int) func() error {
	return func() error {
		p, err := f.tr.peer(f.addr)
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

// An attempt in flight is abandoned as soon as the placement table shows
// another owner for its shard, without waiting for AttemptTimeout: a node
// that crashed or handed the shard off may never answer. A change of the
// table that leaves the owner as it was does not end the attempt.
func TestAttemptAbandonedWhenTheOwnerMoves(t *testing.T) {
	leakCheck(t)
	policy := DefaultRetryPolicy()
	policy.AttemptTimeout = time.Hour
	f := newRouterFixture(t, policy)
	ctx, tbl := f.ctx, f.tbl

	type result struct {
		rep   *ordopb.Reply
		err   error
		owner placement.Owner // the shard's owner in the table when the attempt ended
	}
	done := make(chan result, 1)
	go func() {
		rep, err := f.r.attempt(ctx, fixtureShard, &ordopb.Envelope{RequestId: "r1"})
		owner, _ := tbl.Lookup(fixtureShard)
		done <- result{rep, err, owner}
	}()
	inFlight := f.pending(1)
	testutil.Eventually(t, 10*time.Second, time.Millisecond, inFlight)

	// Another node joins: the table changes, the shard's owner does not.
	f.register("n3", "127.0.0.1:1")
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
	if err := placement.Unlock(ctx, f.cli, f.keys, fixtureShard, f.epoch); err != nil {
		t.Fatal(err)
	}
	f.register("n2", "127.0.0.1:1")
	if _, err := placement.Acquire(ctx, f.cli, f.keys, fixtureShard, "n2", f.lease); err != nil {
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
	testutil.Eventually(t, 10*time.Second, time.Millisecond, f.pending(0))
}

// An attempt whose owner does not answer ends after AttemptTimeout as
// unreachable (retried), with its caller's context still alive, and the
// transport forgets its call. Attempts one after another each get their
// full bound (their timers are reused).
func TestAttemptEndsAtAttemptTimeout(t *testing.T) {
	leakCheck(t)
	policy := DefaultRetryPolicy()
	policy.AttemptTimeout = 20 * time.Millisecond
	f := newRouterFixture(t, policy)
	for i := range 3 {
		rep, err := f.r.attempt(f.ctx, fixtureShard, &ordopb.Envelope{RequestId: fmt.Sprintf("r%d", i)})
		if !errors.Is(err, errUnreachable) || !strings.Contains(err.Error(), "attempt timed out") {
			t.Fatalf("attempt %d to a node that does not answer = %v, %v; want errUnreachable (timed out)", i, rep, err)
		}
		if f.ctx.Err() != nil {
			t.Fatal(f.ctx.Err())
		}
		testutil.Eventually(t, 10*time.Second, time.Millisecond, f.pending(0))
	}
}
