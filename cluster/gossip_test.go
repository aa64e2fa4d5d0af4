package cluster_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/ordo-actors/ordo/cluster"
	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/ordo-actors/ordo/proto/testpb"
	"github.com/stretchr/testify/require"
)

// metric reads an unlabelled counter from a node's /metrics.
func metric(t *testing.T, n *cluster.Node, name string) int {
	t.Helper()
	rec := httptest.NewRecorder()
	n.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\d+)`).FindStringSubmatch(rec.Body.String())
	require.NotNil(t, m, "metric %s missing", name)
	v, err := strconv.Atoi(m[1])
	require.NoError(t, err)
	return v
}

// failoverChecks sums, over nodes, the times a node checked the lease of
// a node gossip declared dead: none happen while gossip vouches for every
// registered node.
func failoverChecks(t *testing.T, nodes ...*cluster.Node) int {
	t.Helper()
	total := 0
	for _, n := range nodes {
		total += metric(t, n, "ordo_failover_checks_total")
	}
	return total
}

// allLive checks that every node in nodes counts every other as live and
// none as dead.
func allLive(nodes ...*cluster.Node) error {
	for _, n := range nodes {
		st := n.Status()
		seen := map[string]cluster.Member{}
		for _, m := range st.Members {
			seen[m.ID] = m
		}
		for _, o := range nodes {
			m, ok := seen[o.ID()]
			if !ok || !m.Registered || !m.Alive || m.Dead {
				return fmt.Errorf("%s sees %s as %+v", n.ID(), o.ID(), m)
			}
		}
	}
	return nil
}

// owners returns every shard's owner and epoch as the nodes hold them.
func owners(nodes ...*cluster.Node) map[uint32]string {
	m := map[uint32]string{}
	for _, n := range nodes {
		for s, ep := range n.Owned() {
			m[s] = fmt.Sprintf("%s@%d", n.ID(), ep)
		}
	}
	return m
}

// fakeMeta is the node metadata an ordo node gossips, as an agent forges
// it.
type fakeMeta struct {
	ID     string `json:"id"`
	Remote string `json:"remote"`
	Lease  int64  `json:"lease"`
}

// agentDelegate gossips fixed metadata.
type agentDelegate struct{ meta []byte }

func (d agentDelegate) NodeMeta(int) []byte           { return d.meta }
func (agentDelegate) NotifyMsg([]byte)                {}
func (agentDelegate) GetBroadcasts(int, int) [][]byte { return nil }
func (agentDelegate) LocalState(bool) []byte          { return nil }
func (agentDelegate) MergeRemoteState([]byte, bool)   {}

// holdsFor checks f every 50ms for d, and fails the test at its first
// error: for properties that must hold over a period, not become true
// (the period is the property, not a wait for something to happen).
func holdsFor(t *testing.T, d time.Duration, f func() error) {
	t.Helper()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	end := time.After(d)
	for {
		require.NoError(t, f())
		select {
		case <-end:
			return
		case <-tick.C:
		}
	}
}

// startAgent starts a bare memberlist agent on a free loopback port: not
// an ordo node, registered nowhere, gossiping meta, encrypting with keys
// (none: plaintext). Shut it down with stop (idempotent; also at cleanup).
func startAgent(t *testing.T, name string, meta fakeMeta, keys [][]byte) (ml *memberlist.Memberlist, stop func(leave bool)) {
	t.Helper()
	mc := memberlist.DefaultLocalConfig()
	mc.Name = name
	mc.BindAddr = "127.0.0.1"
	mc.BindPort = 0
	mc.AdvertisePort = 0
	mc.ProbeInterval = 200 * time.Millisecond
	mc.ProbeTimeout = 100 * time.Millisecond
	mc.GossipInterval = 50 * time.Millisecond
	b, err := json.Marshal(meta)
	require.NoError(t, err)
	mc.Delegate = agentDelegate{meta: b}
	if len(keys) > 0 {
		if mc.Keyring, err = memberlist.NewKeyring(keys, keys[0]); err != nil {
			t.Fatal(err)
		}
	}
	if os.Getenv("ORDO_TEST_LOG") != "" {
		mc.Logger = log.New(os.Stderr, "agent "+name+": ", log.LstdFlags)
	} else {
		mc.Logger = log.New(io.Discard, "", 0)
	}
	ml, err = memberlist.Create(mc)
	require.NoError(t, err)
	done := false
	stop = func(leave bool) {
		if done {
			return
		}
		done = true
		if leave {
			_ = ml.Leave(time.Second)
		}
		_ = ml.Shutdown()
	}
	t.Cleanup(func() { stop(false) })
	return ml, stop
}

// memberListed reports whether node's Status lists a member named name.
func memberListed(n *cluster.Node, name string) (cluster.Member, bool) {
	for _, m := range n.Status().Members {
		if m.ID == name {
			return m, true
		}
	}
	return cluster.Member{}, false
}

// With gossip keys, nodes gossip encrypted; an agent without the key or
// with another key cannot join and no node ever lists it.
func TestEncryptedGossipRejectsAgentsWithoutTheKey(t *testing.T) {
	e := newEnv(t, nil, 16)
	e.startN(3)
	e.converged(e.nodes...)
	testutil.Eventually(t, 30*time.Second, 20*time.Millisecond, func() error { return allLive(e.nodes...) })
	before := owners(e.nodes...)

	wrong, err := cluster.GenerateGossipKey()
	require.NoError(t, err)
	for _, c := range []struct {
		name string
		keys [][]byte
	}{{"plaintext", nil}, {"wrong-key", [][]byte{wrong}}} {
		t.Run(c.name, func(t *testing.T) {
			ml, stop := startAgent(t, "intruder-"+c.name, fakeMeta{ID: "n2", Remote: e.nodes[1].RemoteAddr()}, c.keys)
			_, err := ml.Join([]string{e.nodes[0].GossipAddr(), e.nodes[1].GossipAddr()})
			require.Error(t, err, "an agent without the key joined")
			require.Equal(t, 1, ml.NumMembers(), "the agent learnt members")
			// Its probes and gossip, if any, are dropped too: no node ever
			// lists it, and every node still counts every other as live.
			for _, n := range e.nodes {
				_, listed := memberListed(n, ml.LocalNode().Name)
				require.False(t, listed, "%s lists the agent", n.ID())
			}
			stop(true)
			require.NoError(t, allLive(e.nodes...))
		})
	}
	require.Equal(t, before, owners(e.nodes...))
	require.Zero(t, failoverChecks(t, e.nodes...))

	// The cluster serves through all this.
	client := e.dial()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 20 {
		_, err := cluster.Call[*testpb.Value](ctx, client, counter(fmt.Sprintf("enc%d", i)), &testpb.Add{Delta: 1})
		require.NoError(t, err)
	}
}

// Keys rotate on running nodes without losing membership: add the new
// key as a secondary everywhere, make it primary everywhere, drop the
// old one. At each step an agent shows which keys the nodes send and
// accept.
func TestGossipKeyRotation(t *testing.T) {
	e := newEnv(t, nil, 16)
	e.startN(3)
	e.converged(e.nodes...)
	testutil.Eventually(t, 30*time.Second, 20*time.Millisecond, func() error { return allLive(e.nodes...) })
	old := e.gossipKey
	next, err := cluster.GenerateGossipKey()
	require.NoError(t, err)

	// canJoin reports whether an agent with keys (first primary) can join
	// the cluster through n1, then takes it out.
	seq := 0
	canJoin := func(keys ...[]byte) bool {
		seq++
		ml, stop := startAgent(t, fmt.Sprintf("probe%d", seq), fakeMeta{ID: fmt.Sprintf("probe%d", seq)}, keys)
		defer stop(true)
		_, err := ml.Join([]string{e.nodes[0].GossipAddr()})
		return err == nil
	}
	setAll := func(keys ...[]byte) {
		t.Helper()
		for _, n := range e.nodes {
			require.NoError(t, n.SetGossipKeys(keys))
		}
	}
	checkMembership := func(step string) {
		t.Helper()
		require.NoError(t, allLive(e.nodes...), step)
		require.Zero(t, failoverChecks(t, e.nodes...), "%s: a node was declared dead", step)
	}

	require.False(t, canJoin(next), "the new key is accepted before it is added")
	setAll(old, next)
	checkMembership("new key added")
	// Accepted, but the nodes still send with the old key: an agent with
	// only the new key cannot read the answer.
	require.False(t, canJoin(next), "nodes send with the new key before it is primary")
	require.True(t, canJoin(old, next))

	setAll(next, old)
	checkMembership("new key primary")
	require.True(t, canJoin(next), "nodes do not send with the new primary key")
	require.True(t, canJoin(old, next), "the old key is no longer accepted while still on the ring")

	setAll(next)
	checkMembership("old key dropped")
	require.False(t, canJoin(old, next), "the old key is still accepted")
	require.True(t, canJoin(next))

	// A node started with only the new key joins, and all count one
	// another as live.
	cfg := e.config("n4")
	cfg.GossipKeys = [][]byte{next}
	e.start(cfg)
	e.converged(e.nodes...)
	testutil.Eventually(t, 30*time.Second, 20*time.Millisecond, func() error { return allLive(e.nodes...) })
	require.Zero(t, failoverChecks(t, e.nodes...), "a node was declared dead during the rotation")

	require.ErrorIs(t, e.nodes[0].SetGossipKeys([][]byte{[]byte("short")}), cluster.ErrGossipKey)
	require.Error(t, e.nodes[0].SetGossipKeys(nil))
}

// SetGossipKeys needs a node started with keys; Validate checks key sizes.
func TestGossipKeysValidation(t *testing.T) {
	e := newEnv(t, nil, 4)
	cfg := e.config("n1")
	cfg.GossipKeys = [][]byte{make([]byte, 16), make([]byte, 15)}
	require.ErrorIs(t, cfg.Validate(), cluster.ErrGossipKey)
	require.ErrorIs(t, cfg.Validate(), cluster.ErrInvalidConfig)
	for _, tweak := range []func(*cluster.Config){
		func(c *cluster.Config) { c.NodeID = "" },
		func(c *cluster.Config) { c.Placement.HandoffRate = -1 },
		func(c *cluster.Config) { c.Host.MaxActive = -1 },
	} {
		c := e.config("n1")
		tweak(&c)
		require.ErrorIs(t, c.Validate(), cluster.ErrInvalidConfig)
	}
	cfg.GossipKeys = [][]byte{make([]byte, 24), make([]byte, 32)}
	require.NoError(t, cfg.Validate())

	cfg = e.config("n1")
	cfg.GossipKeys = nil
	rec := testutil.NewRecorder()
	cfg.Logger = slog.New(rec)
	n := e.start(cfg)
	err := n.SetGossipKeys([][]byte{make([]byte, 16)})
	require.Error(t, err)
	require.NotErrorIs(t, err, cluster.ErrGossipKey)
	var warned int
	for _, r := range rec.Records() {
		if r.Level == slog.LevelWarn && strings.Contains(r.Message, "gossip is not encrypted") {
			warned++
		}
	}
	require.Equal(t, 1, warned, "plaintext gossip is warned about once")
}

func TestGossipKeyFile(t *testing.T) {
	dir := t.TempDir()
	k1, err := cluster.GenerateGossipKey()
	require.NoError(t, err)
	k2 := make([]byte, 16)
	path := filepath.Join(dir, "gossip.keys")
	require.NoError(t, cluster.WriteGossipKeys(path, [][]byte{k1, k2}))
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	keys, err := cluster.ReadGossipKeys(path)
	require.NoError(t, err)
	require.Equal(t, [][]byte{k1, k2}, keys)

	for name, body := range map[string]string{
		"comments":  "# rotated 2024-01-01\n\n  AAAAAAAAAAAAAAAAAAAAAA==  \n",
		"not64":     "not base64!\n",
		"short":     "AAAA\n",
		"empty":     "\n# nothing\n",
		"truncated": "AAAAAAAAAAAAAAAAAAAAAA\n",
	} {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
		keys, err := cluster.ReadGossipKeys(p)
		if name == "comments" {
			require.NoError(t, err)
			require.Equal(t, [][]byte{make([]byte, 16)}, keys)
			continue
		}
		require.ErrorIs(t, err, cluster.ErrGossipKey, name)
		require.NotContains(t, err.Error(), strings.TrimSpace(body), "the error shows key material")
	}
	_, err = cluster.ReadGossipKeys(filepath.Join(dir, "missing"))
	require.ErrorIs(t, err, os.ErrNotExist)
	require.ErrorIs(t, cluster.WriteGossipKeys(path, nil), cluster.ErrGossipKey)
}

// A gossip member that holds the key but is not registered in etcd, and
// claims a registered node's ID, lease and remote address, changes
// nothing: that node stays live for everyone, nobody checks (let alone
// revokes) its lease, no shard moves. The mismatch is logged.
func TestUnregisteredMemberWithAnotherNodesIDChangesNothing(t *testing.T) {
	for _, c := range []struct {
		name      string
		agentName func(victim string) string
		leave     bool
		logged    string // a warning the first loggedBy nodes log
		loggedBy  int
	}{
		// Another memberlist name: memberlist takes it as a new member,
		// which every node learns.
		{"own-name", func(string) string { return "intruder" }, true, "does not match its etcd registration", 3},
		// The victim's memberlist name: memberlist keeps the first
		// claimant. The node the agent joins through sees the conflict.
		{"same-name", func(v string) string { return v }, false, "claims the name of another", 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, nil, 16)
			rec := testutil.NewRecorder()
			for i := range 3 {
				cfg := e.config(fmt.Sprintf("n%d", i+1))
				cfg.Logger = slog.New(rec)
				e.start(cfg)
			}
			e.converged(e.nodes...)
			testutil.Eventually(t, 30*time.Second, 20*time.Millisecond, func() error { return allLive(e.nodes...) })
			victim := e.nodes[1]
			lease := victim.Status().Lease
			before := owners(e.nodes...)
			require.Zero(t, failoverChecks(t, e.nodes...))

			forged := fakeMeta{ID: victim.ID(), Remote: victim.RemoteAddr(), Lease: int64(lease)}
			ml, stop := startAgent(t, c.agentName(victim.ID()), forged, [][]byte{e.gossipKey})
			_, err := ml.Join([]string{e.nodes[0].GossipAddr()})
			require.NoError(t, err)

			unchanged := func() error {
				if err := allLive(e.nodes...); err != nil {
					return err
				}
				if got := victim.Status().Lease; got != lease {
					return fmt.Errorf("the victim's lease changed from %x to %x", lease, got)
				}
				if n := failoverChecks(t, e.nodes...); n != 0 {
					return fmt.Errorf("%d checks of a dead node's lease", n)
				}
				if got := owners(e.nodes...); fmt.Sprint(got) != fmt.Sprint(before) {
					return fmt.Errorf("shards moved: %v, were %v", got, before)
				}
				return nil
			}
			// The forged claims reach every node (each logs them), and
			// change nothing meanwhile.
			testutil.Eventually(t, 30*time.Second, 50*time.Millisecond, func() error {
				if err := unchanged(); err != nil {
					t.Fatal(err)
				}
				logged := map[string]bool{}
				for _, r := range rec.Records() {
					if r.Level == slog.LevelWarn && strings.Contains(r.Message, c.logged) {
						r.Attrs(func(a slog.Attr) bool {
							if a.Key == "node" {
								logged[a.Value.String()] = true
							}
							return true
						})
					}
				}
				for _, n := range e.nodes[:c.loggedBy] {
					if !logged[n.ID()] {
						return fmt.Errorf("%s has not logged %q yet", n.ID(), c.logged)
					}
				}
				return nil
			})
			if c.name == "own-name" {
				for _, n := range e.nodes {
					m, ok := memberListed(n, "intruder")
					require.True(t, ok, "%s does not list the intruder", n.ID())
					require.False(t, m.Registered)
					require.Contains(t, m.Mismatch, `claims node ID "`+victim.ID()+`"`)
				}
			}

			// The agent goes away (leaving, or as a crash): the member that
			// gossip now declares gone is not the victim.
			stop(c.leave)
			if c.leave {
				testutil.Eventually(t, 30*time.Second, 20*time.Millisecond, func() error {
					for _, n := range e.nodes {
						if _, ok := memberListed(n, "intruder"); ok {
							return fmt.Errorf("%s still lists the intruder", n.ID())
						}
					}
					return unchanged()
				})
			}
			// Over several live-loop rounds and probe periods, still nothing.
			holdsFor(t, 2*time.Second, unchanged)
		})
	}
}

// A node that gossip declares dead (its gossip cut, its lease renewing)
// counts as live again once gossip shows it alive: its dead mark clears
// and nobody checks its lease any more.
func TestDeadMemberAliveAgainIsLive(t *testing.T) {
	e := newEnv(t, nil, 16)
	e.startN(3)
	e.converged(e.nodes...)
	testutil.Eventually(t, 30*time.Second, 20*time.Millisecond, func() error { return allLive(e.nodes...) })
	n1, n2, n3 := e.nodes[0], e.nodes[1], e.nodes[2]
	before := owners(e.nodes...)

	e.cl.Isolate(n3.GossipAddr())
	testutil.Eventually(t, 30*time.Second, 20*time.Millisecond, func() error {
		for _, n := range []*cluster.Node{n1, n2} {
			m, _ := memberListed(n, n3.ID())
			if m.Alive || !m.Dead {
				return fmt.Errorf("%s sees n3 as %+v", n.ID(), m)
			}
		}
		return nil
	})
	// Its lease renews, so the revoker checks it and does not revoke.
	testutil.Eventually(t, 30*time.Second, 20*time.Millisecond, func() error {
		if failoverChecks(t, n1, n2) == 0 {
			return errors.New("no check of n3's lease yet")
		}
		return nil
	})
	require.True(t, n3.Status().LeaseValid)

	e.cl.Heal()
	testutil.Eventually(t, 30*time.Second, 20*time.Millisecond, func() error { return allLive(e.nodes...) })
	// The checks stop: the dead mark is gone. (While it stuck, the
	// revoker would check n3's lease at every live-loop round.)
	last, since := -1, time.Now()
	testutil.Eventually(t, 30*time.Second, 50*time.Millisecond, func() error {
		if c := failoverChecks(t, e.nodes...); c != last {
			last, since = c, time.Now()
		}
		if time.Since(since) < time.Second {
			return fmt.Errorf("checks of n3's lease went on until %v ago", time.Since(since))
		}
		return nil
	})
	holdsFor(t, time.Second, func() error { return allLive(e.nodes...) })
	require.Equal(t, before, owners(e.nodes...), "ownership moved")
}
