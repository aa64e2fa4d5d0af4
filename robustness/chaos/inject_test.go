package chaos

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/examples/bank/ledger"
)

var errDown = errors.New("down")

func TestProbeMeasuresTheLastOutage(t *testing.T) {
	start := time.Now()
	// Down from 100 ms to 400 ms after start.
	read := func(ctx context.Context, a string) error {
		if d := time.Since(start); d > 100*time.Millisecond && d < 400*time.Millisecond {
			<-ctx.Done() // a stalled owner: the read times out
			return ctx.Err()
		}
		return nil
	}
	healed := make(chan struct{})
	time.AfterFunc(500*time.Millisecond, func() { close(healed) })
	pc := probeConfig{Every: 10 * time.Millisecond, Timeout: 50 * time.Millisecond, Stable: 3, Limit: 5 * time.Second}
	res := probe(context.Background(), read, []string{"a", "b"}, start, healed, pc)
	if !res.recovered || res.failed == 0 {
		t.Fatalf("%+v", res)
	}
	if res.recovery < 400*time.Millisecond || res.recovery > 2*time.Second {
		t.Fatalf("recovery %v, want just after 400ms", res.recovery)
	}
}

func TestProbeWithoutOutage(t *testing.T) {
	healed := make(chan struct{})
	close(healed)
	var n atomic.Int32
	read := func(context.Context, string) error { n.Add(1); return nil }
	pc := probeConfig{Every: time.Millisecond, Timeout: time.Second, Stable: 3, Limit: 5 * time.Second}
	res := probe(context.Background(), read, []string{"a"}, time.Now(), healed, pc)
	if !res.recovered || res.recovery != 0 || res.failed != 0 || n.Load() != 3 {
		t.Fatalf("%+v after %d reads", res, n.Load())
	}
}

func TestProbeNeverRecovers(t *testing.T) {
	healed := make(chan struct{})
	close(healed)
	read := func(context.Context, string) error { return errDown }
	pc := probeConfig{Every: 10 * time.Millisecond, Timeout: time.Second, Stable: 3, Limit: 200 * time.Millisecond}
	res := probe(context.Background(), read, []string{"a", "b"}, time.Now(), healed, pc)
	if res.recovered || res.failed == 0 {
		t.Fatalf("%+v", res)
	}
}

func TestAccountsOf(t *testing.T) {
	owned := map[uint32]bool{1: true, 5: true}
	rng := rand.New(rand.NewPCG(1, 2))
	got := accountsOf(rng, 200, 3, 8, owned)
	if len(got) != 3 {
		t.Fatalf("%v", got)
	}
	for _, a := range got {
		if s := actors.ShardOf(ledger.AccountRef(a), 8); !owned[s] {
			t.Fatalf("%s is in shard %d", a, s)
		}
	}
	again := accountsOf(rand.New(rand.NewPCG(1, 2)), 200, 3, 8, owned)
	if strings.Join(got, ",") != strings.Join(again, ",") {
		t.Fatalf("not deterministic: %v %v", got, again)
	}
	// Nothing owned matches: any accounts.
	if got := accountsOf(rng, 10, 4, 8, map[uint32]bool{99: true}); len(got) != 4 {
		t.Fatalf("fallback %v", got)
	}
}

// fakeCluster is a runner with fake nodes (the test binary as `bank node`)
// whose etcd proxies lead to an HTTP server standing in for etcd.
func fakeCluster(t *testing.T, nodes int) (*runner, *httptest.Server) {
	t.Helper()
	t.Setenv("CHAOS_HELPER", "node")
	t.Setenv("CHAOS_FENCED", "2")
	etcd := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "etcd") }))
	t.Cleanup(etcd.Close)
	r := testRunner(t, nodes)
	r.members = []*member{{name: "e1", clientURL: etcd.URL}}
	r.members[0].proc = newProc("e1", "true", filepath.Join(r.dir, "e1.log"), nil)
	r.shards = 8
	r.start = time.Now()
	t.Cleanup(r.teardown)
	if err := r.startNodes(context.Background()); err != nil {
		t.Fatal(err)
	}
	return r, etcd
}

// throughProxy GETs the fake etcd through node i's proxy.
func throughProxy(ctx context.Context, r *runner, i int) error {
	return get(ctx, r.nodes[i].proxies[0].Endpoint())
}

// get GETs url on a fresh connection and reads the body.
func get(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.ReadAll(resp.Body)
	return err
}

func TestInjectOnFakeNodes(t *testing.T) {
	r, _ := fakeCluster(t, 2)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 1))
	n0, n1 := r.nodes[0], r.nodes[1]
	args := strings.Join(r.nodeArgs(1, r.nodes), " ")
	if !strings.HasSuffix(args, "--join "+n0.gossipProxy.Addr()) ||
		!strings.Contains(args, "--remote "+n1.remote+" --advertise-remote "+n1.remoteProxy.Addr()) ||
		!strings.Contains(args, "--gossip "+n1.gossip+" --advertise-gossip "+n1.gossipProxy.Addr()) ||
		!strings.Contains(args, "--etcd "+n1.proxies[0].Endpoint()) || !strings.Contains(args, "--admin "+n1.admin) ||
		!strings.Contains(args, "--gossip-key "+filepath.Join(r.dir, "gossip.key")) {
		t.Fatalf("node args %s", args)
	}

	// kill: the node is down for the hold time, restarted after.
	_, inc := n0.proc.exited()
	read := func(ctx context.Context, a string) error {
		if !n0.proc.running() {
			return errDown
		}
		return nil
	}
	fr := r.inject(ctx, Fault{Index: 0, Kind: KindKill, Node: 0, Member: -2, Hold: 300 * time.Millisecond}, read, rng)
	if fr.Error != "" || fr.Target != "n1" || !fr.Recovered || fr.RecoveryMS < 300 || fr.FailedProbes == 0 {
		t.Fatalf("kill %+v", fr)
	}
	if d := fr.End.Sub(fr.Start); d < 300*time.Millisecond {
		t.Fatalf("kill lasted %v", d)
	}
	if _, now := n0.proc.exited(); now != inc+1 || !n0.proc.running() {
		t.Fatalf("not restarted: incarnation %d after %d", now, inc)
	}
	if len(fr.Probed) != r.cfg.ProbeAccounts {
		t.Fatalf("probed %v", fr.Probed)
	}
	for _, a := range fr.Probed {
		if s := actors.ShardOf(ledger.AccountRef(a), 8); s > 3 {
			t.Fatalf("probed %s of shard %d, which the node does not own", a, s)
		}
	}
	if err := r.waitNodeReady(ctx, n0, 10*time.Second); err != nil {
		t.Fatal(err)
	}

	// pause: stopped for the hold time, resumed after.
	read = func(ctx context.Context, a string) error {
		if procState(n1.proc.pid()) == "T" {
			return errDown
		}
		return nil
	}
	fr = r.inject(ctx, Fault{Index: 1, Kind: KindPause, Node: 1, Member: -2, Hold: 300 * time.Millisecond}, read, rng)
	if fr.Error != "" || !fr.Recovered || fr.FailedProbes == 0 || n1.proc.isStopped() {
		t.Fatalf("pause %+v", fr)
	}
	if _, err := r.admin.status(ctx, n1.admin); err != nil {
		t.Fatalf("after the pause: %v", err)
	}
	if err := throughProxy(ctx, r, 1); err != nil {
		t.Fatalf("store traffic stalled by the pause not healed: %v", err)
	}

	// partition: the node's etcd proxy stalls, then passes again.
	read = func(ctx context.Context, a string) error { return throughProxy(ctx, r, 0) }
	if err := read(ctx, ""); err != nil {
		t.Fatal(err)
	}
	fr = r.inject(ctx, Fault{Index: 2, Kind: KindPartition, Cut: CutEtcd, Node: 0, Member: -2, Hold: 1500 * time.Millisecond}, read, rng)
	if fr.Error != "" || !fr.Recovered || fr.FailedProbes == 0 || fr.RecoveryMS < 1500 || fr.Target != "n1 from etcd" {
		t.Fatalf("partition %+v", fr)
	}
	if err := throughProxy(ctx, r, 1); err != nil {
		t.Fatalf("the other node's proxy: %v", err)
	}

	// partition from the nodes: the node's advertised remote port stalls,
	// its etcd proxy does not.
	var etcdCut atomic.Bool
	read = func(ctx context.Context, a string) error {
		if err := throughProxy(ctx, r, 0); err != nil {
			etcdCut.Store(true)
		}
		return get(ctx, "http://"+n0.remoteProxy.Addr()+"/status")
	}
	if err := read(ctx, ""); err != nil {
		t.Fatal(err)
	}
	fr = r.inject(ctx, Fault{Index: 2, Kind: KindPartition, Cut: CutNodes, Node: 0, Member: -2, Hold: 1500 * time.Millisecond}, read, rng)
	if fr.Error != "" || !fr.Recovered || fr.FailedProbes == 0 || fr.RecoveryMS < 1500 || fr.Target != "n1 from nodes" {
		t.Fatalf("partition from nodes %+v", fr)
	}
	if etcdCut.Load() {
		t.Fatal("a partition from the nodes cut etcd too")
	}
	if st := n0.gossipProxy.Stats(); st.Conns != 0 || st.Datagrams != 0 {
		t.Fatalf("gossip proxy carried traffic to a fake node: %+v", st)
	}
	fr = r.inject(ctx, Fault{Index: 2, Kind: KindPartition, Cut: "disk", Node: 0, Member: -2, Hold: time.Millisecond}, read, rng)
	if fr.Error == "" {
		t.Fatalf("partition from a disk: %+v", fr)
	}

	// A fault on a node that is down is reported, not injected.
	n1.proc.kill()
	fr = r.inject(ctx, Fault{Index: 3, Kind: KindKill, Node: 1, Member: -2, Hold: time.Millisecond}, nil, rng)
	if fr.Error == "" {
		t.Fatalf("kill of a dead node: %+v", fr)
	}
	r.healAll(ctx)
	if err := r.waitNodeReady(ctx, n1, 10*time.Second); err != nil {
		t.Fatal(err)
	}

	// postgres: the restart command is the fault.
	r.cfg.PGRestart = []string{"sleep", "0.2"}
	fr = r.inject(ctx, Fault{Index: 4, Kind: KindPostgres, Node: -1, Member: -2}, func(context.Context, string) error { return nil }, rng)
	if fr.Error != "" || fr.End.Sub(fr.Start) < 200*time.Millisecond || len(fr.Probed) != 2*r.cfg.ProbeAccounts {
		t.Fatalf("postgres %+v", fr)
	}
	r.cfg.PGRestart = []string{"false"}
	fr = r.inject(ctx, Fault{Index: 5, Kind: KindPostgres, Node: -1, Member: -2}, nil, rng)
	if fr.Error == "" {
		t.Fatalf("failed restart not reported: %+v", fr)
	}

	// Fenced writes: 2 + 1 late per incarnation; n1 had two, n2 two.
	r.scrape(ctx)
	by, sum := r.tally.byNode()
	if by["n1"] != 6 || by["n2"] != 6 || sum != 12 {
		t.Fatalf("fenced %v %d", by, sum)
	}
}

// Teardown leaves no process behind, stopped ones included.
func TestTeardownKillsEverything(t *testing.T) {
	r, _ := fakeCluster(t, 2)
	pids := []int{r.nodes[0].proc.pid(), r.nodes[1].proc.pid()}
	if err := r.nodes[1].proc.signal(19); err != nil { // SIGSTOP
		t.Fatal(err)
	}
	r.teardown()
	for _, pid := range pids {
		if alive(pid) {
			t.Fatalf("pid %d alive after teardown", pid)
		}
	}
	b, err := os.ReadFile(filepath.Join(r.dir, "n2.log"))
	if err != nil || !strings.Contains(string(b), "SIGTERM") {
		t.Fatalf("n2 log %q %v", b, err)
	}
}

func TestUnavailable(t *testing.T) {
	read := func(ctx context.Context, a string) error {
		if a == "acct-000003" || a == "acct-000007" {
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	}
	got := unavailable(context.Background(), read, 40, 50*time.Millisecond)
	if strings.Join(got, ",") != "acct-000003,acct-000007" {
		t.Fatalf("%v", got)
	}
}

func TestUnservedShards(t *testing.T) {
	ids := shardProbes(16, "probe-")
	for s, id := range ids {
		if got := actors.ShardOf(ledger.AccountRef(id), 16); got != uint32(s) {
			t.Fatalf("probe %s of shard %d is in %d", id, s, got)
		}
	}
	read := func(ctx context.Context, a string) error {
		switch actors.ShardOf(ledger.AccountRef(a), 16) {
		case 5:
			<-ctx.Done() // NotHere until the caller gives up
			return ctx.Err()
		case 9:
			return errors.New("unreachable")
		}
		return actors.HandlerError(ledger.CodeUnknownAccount, "account %s is not open", a)
	}
	got := unservedShards(context.Background(), read, 16, 50*time.Millisecond)
	if len(got) != 2 || got[0] != 5 || got[1] != 9 {
		t.Fatalf("%v", got)
	}
}
