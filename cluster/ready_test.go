package cluster_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/cluster"
	"github.com/ordo-actors/ordo/cluster/clustertest"
	"github.com/ordo-actors/ordo/etcdembed"
	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/ordo-actors/ordo/persistence/memory"
	"github.com/ordo-actors/ordo/placement"
	"github.com/ordo-actors/ordo/proto/testpb"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// notReadyBecause fails unless n is not ready with a reason containing want.
func notReadyBecause(n *cluster.Node, want string) error {
	err := n.Readiness()
	switch {
	case err == nil:
		return errors.New("ready")
	case !errors.Is(err, cluster.ErrNotReady):
		return fmt.Errorf("readiness error %v does not match ErrNotReady", err)
	case !strings.Contains(err.Error(), want):
		return fmt.Errorf("not ready because %v, want %q", err, want)
	}
	return nil
}

func waitReady(t *testing.T, n *cluster.Node) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, n.WaitReady(ctx))
	require.True(t, n.Ready())
}

func TestReadiness(t *testing.T) {
	e := newEnv(t, memory.New(), 16)
	cfg := e.config("n1")
	faults := cfg.Faults.(*clustertest.Faults)
	n, err := cluster.New(cfg, counterKind)
	require.NoError(t, err)
	require.NoError(t, notReadyBecause(n, "starting"))
	require.True(t, n.Healthy())
	short, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	err = n.WaitReady(short)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "starting")

	ctx := testCtx(t)
	require.NoError(t, n.Start(ctx))
	t.Cleanup(func() { _ = n.Shutdown(context.Background()) })
	waitReady(t, n)
	// Alone, its share is every shard, and the host serves each.
	held := n.Owned()
	require.Len(t, held, 16)
	require.Equal(t, held, cluster.HostOf(n).Owned())

	// A shard placement holds but the host does not serve.
	cluster.HostOf(n).Drop(3, errors.New("test"))
	require.NoError(t, notReadyBecause(n, fmt.Sprintf("shard 3 held at epoch %d, not served", held[3])))
	require.NoError(t, cluster.HostOf(n).Own(3, held[3]))
	waitReady(t, n)

	// A lease past its validity deadline.
	faults.Pause()
	testutil.Eventually(t, 10*time.Second, 5*time.Millisecond, func() error { return notReadyBecause(n, "lease not valid") })
	require.True(t, n.Healthy())
	faults.Resume()
	waitReady(t, n)
	v, err := cluster.Call[*testpb.Value](ctx, n, counter("a"), &testpb.Add{Delta: 1})
	require.NoError(t, err)
	require.EqualValues(t, 1, v.Value)

	require.NoError(t, n.Shutdown(ctx))
	require.NoError(t, notReadyBecause(n, "stopped"))
	require.False(t, n.Healthy())
	require.ErrorIs(t, n.WaitReady(ctx), cluster.ErrClosed)
}

// The routing table shows the node owning a shard that placement does not
// hold (a lock written under another lease): not ready until the lock
// goes and the node takes the shard itself.
func TestReadinessTableDisagrees(t *testing.T) {
	e := newEnv(t, memory.New(), 8)
	c, err := clientv3.New(clientv3.Config{Endpoints: e.cl.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	require.NoError(t, err)
	defer c.Close()
	ctx := testCtx(t)
	lease, err := c.Grant(ctx, 60)
	require.NoError(t, err)
	keys, err := placement.NewKeys(e.prefix)
	require.NoError(t, err)
	epoch, err := placement.Acquire(ctx, c, keys, 5, "n1", lease.ID)
	require.NoError(t, err)

	n := e.start(e.config("n1"))
	testutil.Eventually(t, 10*time.Second, 5*time.Millisecond, func() error {
		return notReadyBecause(n, fmt.Sprintf("shard 5 owned in the routing table at epoch %d, not held", epoch))
	})
	_, held := n.Owned()[5]
	require.False(t, held)
	_, err = c.Revoke(ctx, lease.ID)
	require.NoError(t, err)
	waitReady(t, n)
	require.Greater(t, n.Owned()[5], epoch)
}

// A node that joins becomes ready, and so does the one already there.
func TestReadinessJoin(t *testing.T) {
	e := newEnv(t, memory.New(), 32)
	e.startN(1)
	waitReady(t, e.nodes[0])
	e.startN(1)
	waitReady(t, e.nodes[1])
	e.converged(e.nodes...)
	for _, n := range e.nodes {
		waitReady(t, n)
		require.NotEmpty(t, n.Owned())
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

func TestAdminHealthAndReadiness(t *testing.T) {
	e := newEnv(t, memory.New(), 16)
	cfg := e.config("n1")
	cfg.AdminAddr = "127.0.0.1:0"
	n := e.start(cfg)
	base := "http://" + n.AdminAddr()

	code, body := get(t, base+"/healthz")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "ok\n", body)
	testutil.Eventually(t, 30*time.Second, 5*time.Millisecond, func() error {
		if code, body := get(t, base+"/readyz"); code != http.StatusOK || body != "ok\n" {
			return fmt.Errorf("/readyz: %d %q", code, body)
		}
		return nil
	})
	var st cluster.Status
	_, body = get(t, base+"/status")
	require.NoError(t, json.Unmarshal([]byte(body), &st))
	require.True(t, st.Ready)
	require.Empty(t, st.NotReady)

	e.faultsOf(n).Pause()
	testutil.Eventually(t, 10*time.Second, 5*time.Millisecond, func() error {
		if code, body := get(t, base+"/readyz"); code != http.StatusServiceUnavailable || body != "not ready: lease not valid\n" {
			return fmt.Errorf("/readyz: %d %q", code, body)
		}
		return nil
	})
	code, _ = get(t, base+"/healthz")
	require.Equal(t, http.StatusOK, code, "a node whose lease lapsed is still alive")
	e.faultsOf(n).Resume()
	testutil.Eventually(t, 30*time.Second, 5*time.Millisecond, func() error {
		if code, body := get(t, base+"/readyz"); code != http.StatusOK {
			return fmt.Errorf("/readyz: %d %q", code, body)
		}
		return nil
	})

	require.NoError(t, n.Shutdown(testCtx(t)))
	_, err := http.Get(base + "/healthz")
	require.Error(t, err, "the admin endpoint closes with the node")
}

// The handler, mounted on a server of the caller's, answers before Start
// and after Shutdown.
func TestAdminHandlerOutsideStartShutdown(t *testing.T) {
	e := newEnv(t, memory.New(), 8)
	n, err := cluster.New(e.config("n1"), counterKind)
	require.NoError(t, err)
	srv := httptest.NewServer(n.Handler())
	defer srv.Close()
	code, body := get(t, srv.URL+"/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "not ready: starting\n", body)
	code, _ = get(t, srv.URL+"/healthz")
	require.Equal(t, http.StatusOK, code)
	var st cluster.Status
	_, body = get(t, srv.URL+"/status")
	require.NoError(t, json.Unmarshal([]byte(body), &st))
	require.Equal(t, cluster.Status{Node: "n1", NotReady: "starting", Time: st.Time}, st)

	ctx := testCtx(t)
	require.NoError(t, n.Start(ctx))
	waitReady(t, n)
	code, _ = get(t, srv.URL+"/readyz")
	require.Equal(t, http.StatusOK, code)
	require.NoError(t, n.Shutdown(ctx))
	code, body = get(t, srv.URL+"/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "not ready: stopped\n", body)
	code, body = get(t, srv.URL+"/healthz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "stopped\n", body)
}

// A node and its embedded etcd, started, called and stopped normally, log
// nothing above info, the etcd client's and server's logs included (the
// node and its client use TLS: plaintext is worth a warning).
func TestNormalRunLogsNothingAboveInfo(t *testing.T) {
	rec := testutil.NewRecorder()
	log := slog.New(rec)
	ctx := testCtx(t)
	srv, err := etcdembed.Start(ctx, etcdembed.Config{Dir: filepath.Join(t.TempDir(), "etcd"), UnsafeNoFsync: true, Slog: log})
	require.NoError(t, err)
	defer srv.Close()
	cfg := cluster.DefaultLocalConfig()
	cfg.NodeID = "n1"
	cfg.EtcdEndpoints = srv.Endpoints()
	cfg.Store = memory.New()
	cfg.Placement.Shards = 8
	cfg.Logger = log
	cfg.AdminAddr = "127.0.0.1:0"
	cfg.TLS = nodeTLS("n1")
	key, err := cluster.GenerateGossipKey()
	require.NoError(t, err)
	cfg.GossipKeys = [][]byte{key} // plaintext gossip is warned about
	n, err := cluster.New(cfg, counterKind)
	require.NoError(t, err)
	require.NoError(t, n.Start(ctx))
	require.NoError(t, n.WaitReady(ctx))
	_, err = cluster.Call[*testpb.Value](ctx, n, counter("a"), &testpb.Add{Delta: 1})
	require.NoError(t, err)
	ccfg := cluster.DefaultClientConfig()
	ccfg.Prefix = cfg.Placement.Prefix
	ccfg.Logger = log
	ccfg.TLS = clientTLS("client")
	client, err := cluster.Dial(ctx, srv.Endpoints(), ccfg)
	require.NoError(t, err)
	_, err = cluster.Call[*testpb.Value](ctx, client, counter("a"), &testpb.Add{Delta: 1})
	require.NoError(t, err)
	require.NoError(t, client.Close())
	require.NoError(t, n.Shutdown(ctx))
	srv.Close()

	for _, line := range rec.Above(slog.LevelInfo) {
		t.Errorf("logged above info: %s", line)
	}
	var infos int
	for _, r := range rec.Records() {
		if r.Level == slog.LevelInfo {
			infos++
		}
	}
	require.NotZero(t, infos, "the node logs at info")
	for _, r := range rec.Records() {
		if r.Level >= slog.LevelInfo || strings.Contains(testutil.Format(r), "etcd-client") {
			t.Log(testutil.Format(r))
		}
	}
}
