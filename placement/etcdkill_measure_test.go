package placement_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/peer"

	"github.com/ordo-actors/ordo/etcdembed"
	"github.com/ordo-actors/ordo/internal/testutil"
)

// measureLog is a timeline of what the node and its etcd client did,
// relative to the kill.
type measureLog struct {
	mu    sync.Mutex
	t0    time.Time
	lines []string
}

func (l *measureLog) add(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf("%8.3fs ", time.Since(l.t0).Seconds())+fmt.Sprintf(format, args...))
}

type measureHandler struct{ l *measureLog }

func (h measureHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h measureHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	r.Attrs(func(a slog.Attr) bool { fmt.Fprintf(&b, " %s=%v", a.Key, a.Value); return true })
	h.l.add("LOG %s%s", r.Message, b.String())
	return nil
}
func (h measureHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h measureHandler) WithGroup(string) slog.Handler      { return h }

// TestMeasureEtcdMemberCrash is a measurement, not a check: it crashes one
// member (follower, then leader; no leadership transfer, as with SIGKILL)
// of a 3-member cluster under a node with a 2s lease and a 0.75s margin,
// reached through a proxy per member or directly, and logs how long the
// node's session stays invalid, with the node's log and every slow or
// failed unary etcd request (method, member, duration). Run it with
// ORDO_MEASURE_ETCD_CRASH=1 -v.
func TestMeasureEtcdMemberCrash(t *testing.T) {
	if os.Getenv("ORDO_MEASURE_ETCD_CRASH") == "" {
		t.Skip("measurement; set ORDO_MEASURE_ETCD_CRASH=1 to run it")
	}
	for _, proxied := range []bool{true, false} {
		for _, leader := range []bool{false, true} {
			name := fmt.Sprintf("proxied=%v/leader=%v", proxied, leader)
			t.Run(name, func(t *testing.T) { measureCrash(t, proxied, leader) })
		}
	}
}

func measureCrash(t *testing.T, proxied, killLeader bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := etcdembed.StartCluster(ctx, etcdembed.ClusterConfig{Dir: t.TempDir(), Members: 3, UnsafeNoFsync: true, Logger: zap.NewNop(), TickMs: 100, ElectionMs: 1000})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	eps := cl.Endpoints()
	if proxied {
		eps = nil
		for i := 0; i < cl.Size(); i++ {
			px, err := etcdembed.StartProxy(cl.Endpoint(i))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = px.Close() })
			eps = append(eps, px.Endpoint())
		}
	}
	lg := &measureLog{t0: time.Now()}
	rec := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		start := time.Now()
		var p peer.Peer
		err := invoker(ctx, method, req, reply, cc, append(opts, grpc.Peer(&p))...)
		if d := time.Since(start); d > 100*time.Millisecond || err != nil {
			lg.add("RPC %s to %v took %v err=%v (started %.3fs)", method[strings.LastIndex(method, "/")+1:], p.Addr, d.Round(time.Millisecond), err, start.Sub(lg.t0).Seconds())
		}
		return err
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(rec)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	cfg := testConfig("a", "/ordo/exp")
	cfg.Shards = 64
	cfg.ValidityMargin = 750 * time.Millisecond
	cfg.RequestTimeout = 5 * time.Second
	cfg.Logger = slog.New(measureHandler{lg})
	h := newRecHost("a", &history{})
	n := startNode(t, cfg, c, h)
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		if len(n.Owned()) != 64 {
			return fmt.Errorf("owned %d", len(n.Owned()))
		}
		return nil
	})
	victim := -1
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		l := cl.Leader()
		if l < 0 {
			return fmt.Errorf("no leader")
		}
		victim = l
		if !killLeader {
			victim = (l + 1) % cl.Size()
		}
		return nil
	})
	lease0 := n.Lease()
	// Wait for a keepalive sent from now on to be acknowledged.
	from := time.Now()
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		if !n.Deadline().After(from.Add(cfg.LeaseTTL - cfg.ValidityMargin)) {
			return errors.New("no keepalive acknowledged yet")
		}
		return nil
	})
	kill := time.Now()
	lg.mu.Lock()
	lg.t0 = kill
	lg.mu.Unlock()
	lg.add("KILL member %d (leader=%v) %v; endpoints %v", victim, killLeader, cl.Endpoint(victim), eps)
	cl.Crash(victim)
	var invalid, firstInvalid, validAgain, reowned time.Duration
	var wasInvalid bool
	lastLeader := victim
	last := time.Now()
	for time.Since(kill) < 15*time.Second {
		now := time.Now()
		v := n.Valid()
		if !v {
			invalid += now.Sub(last)
			if !wasInvalid && firstInvalid == 0 {
				firstInvalid = now.Sub(kill)
				lg.add("node invalid")
			}
			wasInvalid = true
		} else if wasInvalid && validAgain == 0 {
			validAgain = now.Sub(kill)
			lg.add("node valid again lease %x -> %x", int64(lease0), int64(n.Lease()))
		}
		if wasInvalid && reowned == 0 && v && len(n.Owned()) == 64 {
			reowned = now.Sub(kill)
			lg.add("all shards owned again")
		}
		if l := cl.Leader(); l != lastLeader {
			lg.add("leader %d -> %d", lastLeader, l)
			lastLeader = l
		}
		last = now
		time.Sleep(5 * time.Millisecond) // sampling period
	}
	lg.mu.Lock()
	for _, l := range lg.lines {
		t.Log(l)
	}
	lg.mu.Unlock()
	t.Logf("RESULT proxied=%v leader=%v: invalid total %v, first invalid at %v, valid again at %v, all owned at %v, lost callbacks %d",
		proxied, killLeader, invalid.Round(time.Millisecond), firstInvalid.Round(time.Millisecond), validAgain.Round(time.Millisecond), reowned.Round(time.Millisecond), h.lostCount())
}
