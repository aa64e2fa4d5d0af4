package cluster_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/cluster"
	"github.com/ordo-actors/ordo/cluster/dashboard"
	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/ordo-actors/ordo/persistence/memory"
	"github.com/ordo-actors/ordo/proto/testpb"
	"github.com/stretchr/testify/require"
)

// startAdminNodes starts n nodes with admin endpoints and waits until they
// own every shard, each its desired share, and each knows the others'
// admin addresses (gossiped).
func startAdminNodes(e *env, n int) []*cluster.Node {
	e.t.Helper()
	for i := 0; i < n; i++ {
		cfg := e.config(fmt.Sprintf("n%d", len(e.nodes)+1))
		cfg.AdminAddr = "127.0.0.1:0"
		e.start(cfg)
	}
	e.converged(e.nodes...)
	for _, node := range e.nodes {
		testutil.Eventually(e.t, 10*time.Second, 10*time.Millisecond, func() error {
			var f dashboard.Frame
			getJSON(e.t, "http://"+node.AdminAddr()+"/dashboard/api/state", &f)
			for _, m := range f.Members {
				if m.AdminAddr == "" {
					return fmt.Errorf("%s does not know %s's admin address", node.ID(), m.ID)
				}
			}
			if len(f.Members) != len(e.nodes) {
				return fmt.Errorf("%s knows %d members", node.ID(), len(f.Members))
			}
			return nil
		})
	}
	return e.nodes
}

func getJSON(t testing.TB, url string, v any) int {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.NoError(t, json.NewDecoder(resp.Body).Decode(v), "GET %s", url)
	return resp.StatusCode
}

// /status keeps its JSON; / is the page; the entity inspector answers
// where the entity lives, its durable record and its decoded state, from
// any node.
func TestDashboardStatusPageAndInspector(t *testing.T) {
	e := newEnv(t, memory.New(), 16)
	nodes := startAdminNodes(e, 2)
	ctx := testCtx(t)
	for i := int64(1); i <= 3; i++ {
		_, err := cluster.Call[*testpb.Value](ctx, nodes[0], counter("alice"), &testpb.Add{Delta: i})
		require.NoError(t, err)
	}

	var st cluster.Status
	require.Equal(t, http.StatusOK, getJSON(t, "http://"+nodes[0].AdminAddr()+"/status", &st))
	require.Equal(t, "n1", st.Node)
	require.Len(t, st.Members, 2)

	code, body := get(t, "http://"+nodes[0].AdminAddr()+"/")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "<title>ordo dashboard</title>")
	code, body = get(t, "http://"+nodes[0].AdminAddr()+"/dashboard/app.js")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "EventSource")
	code, _ = get(t, "http://"+nodes[0].AdminAddr()+"/nope")
	require.Equal(t, http.StatusNotFound, code)

	shard := actors.ShardOf(counter("alice"), 16)
	owner, other := nodes[0], nodes[1]
	if _, ok := other.Owned()[shard]; ok {
		owner, other = other, owner
	}
	epoch := owner.Owned()[shard]

	// The inspector reads the owner from the routing table, which learns
	// of an acquisition through its watch, a moment after Owned does.
	var ent dashboard.Entity
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		ent = dashboard.Entity{}
		if code := getJSON(t, "http://"+owner.AdminAddr()+"/entities/counter/alice", &ent); code != http.StatusOK {
			return fmt.Errorf("inspector: %d", code)
		}
		if ent.Owner != owner.ID() {
			return fmt.Errorf("inspector shows owner %q, want %q", ent.Owner, owner.ID())
		}
		return nil
	})
	require.Equal(t, "counter", ent.Kind)
	require.Equal(t, "alice", ent.ID)
	require.Equal(t, shard, ent.Shard)
	require.Equal(t, owner.ID(), ent.Owner)
	require.Equal(t, epoch, ent.Epoch)
	require.Equal(t, owner.ID(), ent.Node)
	require.True(t, ent.Active)
	require.True(t, ent.Record.Found)
	require.Equal(t, uint64(3), ent.Record.Seq)
	require.Equal(t, epoch, ent.Record.Epoch)
	require.Positive(t, ent.Record.Size)
	require.Equal(t, "ordo.test.v1.Counter", ent.Record.StateType)
	var state struct{ Value string }
	require.NoError(t, json.Unmarshal(ent.Record.State, &state))
	require.Equal(t, "6", state.Value, "protojson encodes int64 as a string")
	// Active on the owner: its in-memory state there, nothing waiting.
	require.NotNil(t, ent.Runtime)
	require.Equal(t, shard, ent.Runtime.Shard)
	require.Equal(t, epoch, ent.Runtime.Epoch)
	require.Equal(t, &actors.ActorRuntime{Loaded: true, Seq: 3, Durable: 3}, ent.Runtime.Actor)
	require.Equal(t, &actors.WritesRuntime{Durable: 3}, ent.Runtime.Writes)

	// The other node answers for itself: not active there.
	ent = dashboard.Entity{}
	require.Equal(t, http.StatusOK, getJSON(t, "http://"+other.AdminAddr()+"/entities/counter/alice", &ent))
	require.Equal(t, other.ID(), ent.Node)
	require.False(t, ent.Active)
	require.Nil(t, ent.Runtime)
	require.Equal(t, uint64(3), ent.Record.Seq)
	// Through the dashboard's API, the other node asks the owner.
	require.Equal(t, http.StatusOK, getJSON(t, "http://"+other.AdminAddr()+"/dashboard/api/entities/counter/alice", &ent))
	require.Equal(t, owner.ID(), ent.Node)
	require.True(t, ent.Active)
	require.Empty(t, ent.Error)

	// An entity never saved, an ID with a slash, an unknown kind.
	require.Equal(t, http.StatusOK, getJSON(t, "http://"+other.AdminAddr()+"/entities/counter/never%2Fsaved", &ent))
	require.Equal(t, "never/saved", ent.ID)
	require.False(t, ent.Record.Found)
	require.False(t, ent.Active)
	require.JSONEq(t, `{"value":"0","lastSeq":{},"ballast":"","forwarded":"0"}`, string(ent.Record.State))
	var failure struct{ Error string }
	require.Equal(t, http.StatusNotFound, getJSON(t, "http://"+owner.AdminAddr()+"/entities/nokind/x", &failure))
	require.Contains(t, failure.Error, "unknown kind")

	// The shard's active entities, asked of any node.
	var se dashboard.ShardEntities
	require.Equal(t, http.StatusOK, getJSON(t, fmt.Sprintf("http://%s/dashboard/api/shards/%d", other.AdminAddr(), shard), &se))
	require.Equal(t, owner.ID(), se.Node)
	require.Equal(t, owner.ID(), se.Owner)
	require.Equal(t, epoch, se.Epoch)
	require.Equal(t, map[string][]string{"counter": {"alice"}}, se.Kinds)
	se = dashboard.ShardEntities{}
	require.Equal(t, http.StatusOK, getJSON(t, fmt.Sprintf("http://%s/dashboard/api/shards/%d", owner.AdminAddr(), shard), &se))
	require.Equal(t, owner.ID(), se.Node)
	require.Empty(t, se.Error)
	require.Equal(t, 1, se.Count)
	require.Equal(t, http.StatusBadRequest, getJSON(t, "http://"+other.AdminAddr()+"/dashboard/api/shards/16", &failure))
}

// sseReader reads a dashboard's event stream and keeps the latest frame
// and every event received.
type sseReader struct {
	mu     sync.Mutex
	frames int
	last   dashboard.Frame
	nodes  map[string][]dashboard.Sample
	events []dashboard.Event
	err    error
}

func readSSE(t *testing.T, url string) *sseReader {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	r := &sseReader{nodes: map[string][]dashboard.Sample{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var f dashboard.Frame
			err := json.Unmarshal([]byte(data), &f)
			r.mu.Lock()
			if err != nil {
				r.err = err
				r.mu.Unlock()
				return
			}
			if f.Reset != (r.frames == 0) {
				r.err = fmt.Errorf("frame %d: reset %v", r.frames, f.Reset)
			}
			r.frames++
			r.last = f
			for id, nf := range f.Nodes {
				if nf.Reset {
					r.nodes[id] = nil
				}
				r.nodes[id] = append(r.nodes[id], nf.Samples...)
			}
			r.events = append(r.events, f.Events...)
			r.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return r
}

// check runs f on the reader's state, under its lock.
func (r *sseReader) check(f func(last dashboard.Frame, samples map[string][]dashboard.Sample, events []dashboard.Event) error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return r.err
	}
	if r.frames == 0 {
		return fmt.Errorf("no frame yet")
	}
	return f(r.last, r.nodes, r.events)
}

func memberStates(f dashboard.Frame) map[string]string {
	out := map[string]string{}
	for _, m := range f.Members {
		out[m.ID] = m.State
	}
	return out
}

// The event stream shows every member, every shard's owner and epoch and
// every node's numbers, read from the other nodes' admin endpoints; when a
// node crashes it shows the node dead or down, its shards taken over at
// higher epochs, and the moves and the failover in the timeline.
func TestDashboardEventStream(t *testing.T) {
	const shards = 16
	e := newEnv(t, memory.New(), shards)
	nodes := startAdminNodes(e, 3)
	ctx := testCtx(t)
	for i := 0; i < 20; i++ {
		_, err := cluster.Call[*testpb.Value](ctx, nodes[0], counter(fmt.Sprintf("c%d", i)), &testpb.Add{Delta: 1})
		require.NoError(t, err)
	}
	sse := readSSE(t, "http://"+nodes[0].AdminAddr()+"/dashboard/events")

	testutil.Eventually(t, 20*time.Second, 20*time.Millisecond, func() error {
		return sse.check(func(f dashboard.Frame, samples map[string][]dashboard.Sample, _ []dashboard.Event) error {
			if f.Self != "n1" || len(f.Shards) != shards {
				return fmt.Errorf("self %q, %d shards", f.Self, len(f.Shards))
			}
			if st := memberStates(f); fmt.Sprint(st) != "map[n1:alive n2:alive n3:alive]" {
				return fmt.Errorf("members %v", st)
			}
			for s, c := range f.Shards {
				if c.Owner == "" || c.Epoch == 0 {
					return fmt.Errorf("shard %d: %+v", s, c)
				}
			}
			for _, m := range f.Members {
				if m.AdminAddr == "" || !m.Reachable || m.LeaseTTL == nil || m.LeaseValid == nil || !*m.LeaseValid {
					return fmt.Errorf("member %+v", m)
				}
			}
			// Calls made through n1, answered by n2 and n3: every node's
			// samples arrive, with n1's caller-side rates.
			var calls float64
			for _, s := range samples["n1"] {
				calls += s.Calls["counter"]["ok"]
			}
			if calls == 0 || len(samples["n2"]) == 0 || len(samples["n3"]) == 0 {
				return fmt.Errorf("samples: n1 %d (calls %v), n2 %d, n3 %d", len(samples["n1"]), calls, len(samples["n2"]), len(samples["n3"]))
			}
			return nil
		})
	})
	before := map[uint32]int64{}
	for s, ep := range nodes[2].Owned() {
		before[s] = ep
	}
	require.NotEmpty(t, before)

	e.kill(nodes[2])
	testutil.Eventually(t, 20*time.Second, 20*time.Millisecond, func() error {
		return sse.check(func(f dashboard.Frame, _ map[string][]dashboard.Sample, events []dashboard.Event) error {
			if st := memberStates(f)["n3"]; st != dashboard.StateDead && st != dashboard.StateDown {
				return fmt.Errorf("n3 is %s", st)
			}
			for s, ep := range before {
				c := f.Shards[s]
				if c.Owner != "n1" && c.Owner != "n2" || c.Epoch <= ep {
					return fmt.Errorf("shard %d: %+v, was n3's at epoch %d", s, c, ep)
				}
			}
			moved := map[uint32]bool{}
			var dead bool
			for _, ev := range events {
				dead = dead || (ev.Type == dashboard.EventDead && ev.Subject == "n3")
				for _, m := range ev.Moves {
					if m.From == "n3" && m.FromEpoch == before[m.Shard] && m.ToEpoch > m.FromEpoch {
						moved[m.Shard] = true
					}
				}
			}
			if !dead || len(moved) != len(before) {
				return fmt.Errorf("timeline: n3 dead %v, %d of %d moves of n3's shards", dead, len(moved), len(before))
			}
			return nil
		})
	})
}

// The dashboard serves before Start (nothing to show yet) and its stream
// ends when the node stops.
func TestDashboardBeforeStartAndAfterStop(t *testing.T) {
	e := newEnv(t, memory.New(), 8)
	cfg := e.config("n1")
	cfg.AdminAddr = "127.0.0.1:0"
	n, err := cluster.New(cfg, counterKind)
	require.NoError(t, err)
	h := n.Handler()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/dashboard/api/state", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	var f dashboard.Frame
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &f))
	require.Len(t, f.Members, 1)
	require.Equal(t, "n1", f.Members[0].ID)
	require.Equal(t, dashboard.StateStarting, f.Members[0].State)
	require.Equal(t, "starting", f.Members[0].NotReady)
	require.Len(t, f.Shards, 8)
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/entities/counter/a", nil))
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)

	ctx := testCtx(t)
	require.NoError(t, n.Start(ctx))
	waitReady(t, n)
	sse := readSSE(t, "http://"+n.AdminAddr()+"/dashboard/events")
	testutil.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		return sse.check(func(f dashboard.Frame, _ map[string][]dashboard.Sample, _ []dashboard.Event) error {
			if st := memberStates(f); st["n1"] != dashboard.StateAlive {
				return fmt.Errorf("members %v", st)
			}
			return nil
		})
	})
	require.NoError(t, n.Shutdown(ctx))
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/dashboard/events", nil))
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
}

// Nodes that share an admin token read each other's numbers with it: the
// dashboard's page API shows every node reachable, while a request
// without the token is still refused.
func TestDashboardAdminToken(t *testing.T) {
	e := newEnv(t, memory.New(), 8)
	for i := 1; i <= 3; i++ {
		cfg := e.config(fmt.Sprintf("n%d", i))
		cfg.AdminAddr, cfg.AdminToken = "127.0.0.1:0", adminToken
		e.start(cfg)
	}
	e.converged(e.nodes...)
	state := func(n *cluster.Node, token string) (int, dashboard.Frame) {
		req, err := http.NewRequest(http.MethodGet, "http://"+n.AdminAddr()+"/dashboard/api/state", nil)
		require.NoError(t, err)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var f dashboard.Frame
		if resp.StatusCode == http.StatusOK {
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&f))
		}
		return resp.StatusCode, f
	}
	for _, n := range e.nodes {
		testutil.Eventually(t, 15*time.Second, 20*time.Millisecond, func() error {
			code, f := state(n, adminToken)
			if code != http.StatusOK {
				return fmt.Errorf("%s: %d", n.ID(), code)
			}
			if len(f.Members) != len(e.nodes) {
				return fmt.Errorf("%s shows %d members", n.ID(), len(f.Members))
			}
			for _, m := range f.Members {
				if !m.Reachable {
					return fmt.Errorf("%s shows %s unreachable: %s", n.ID(), m.ID, m.Error)
				}
			}
			return nil
		})
		code, _ := state(n, "")
		require.Equal(t, http.StatusUnauthorized, code, "%s answered without the token", n.ID())
		code = adminGet(t, http.DefaultClient, "http", n.AdminAddr(), "/dashboard/api/node", "wrong-"+adminToken)
		require.Equal(t, http.StatusUnauthorized, code, "%s answered a peer's read with a wrong token", n.ID())
	}
}
