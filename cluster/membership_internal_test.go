package cluster

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/ordo-actors/ordo/placement"
	"github.com/stretchr/testify/require"
)

func key(b byte) []byte { return bytes.Repeat([]byte{b}, 16) }

// setKeys leaves exactly the keys asked for on the ring, the first
// primary, whatever the ring held and in whatever order.
func TestSetKeysResultingRing(t *testing.T) {
	a, b, c, d := key('a'), key('b'), key('c'), key('d')
	for _, steps := range [][][][]byte{
		{{a, b}, {b, a}, {b}},               // a rotation
		{{a, b, c}, {a, c}},                 // drop one from the middle
		{{a, b, c, d}, {d, b}, {c, a}, {a}}, // anything goes
		{{a}, {a}},
	} {
		kr, err := memberlist.NewKeyring(nil, a)
		require.NoError(t, err)
		m := &membership{keyring: kr}
		for _, want := range steps {
			require.NoError(t, m.setKeys(want))
			got := kr.GetKeys()
			require.Equal(t, want[0], kr.GetPrimaryKey())
			require.ElementsMatch(t, want, got, "asked for %q, ring holds %q", want, got)
		}
	}
	require.ErrorIs(t, (&membership{}).setKeys([][]byte{a}), errGossipPlaintext)
}

// memberAt builds the member memberlist would report for a node.
func memberAt(id, gossip, remote string, lease int64, alive bool) *member {
	return &member{meta: nodeMeta{ID: id, Remote: remote, Lease: lease}, metaOK: true, addr: gossip, alive: alive}
}

// A registered node counts as live or dead only through the member that
// matches its registration.
func TestViewCountsMatchingMembersOnly(t *testing.T) {
	reg := placement.NodeInfo{ID: "n2", RemoteAddr: "10.0.0.2:7000", GossipAddr: "10.0.0.2:7001", Lease: 42}
	for _, c := range []struct {
		name       string
		members    map[string]*member
		live, dead bool
		mismatch   string
	}{
		{"match alive", map[string]*member{"n2": memberAt("n2", "10.0.0.2:7001", "10.0.0.2:7000", 42, true)}, true, false, ""},
		{"match dead", map[string]*member{"n2": memberAt("n2", "10.0.0.2:7001", "10.0.0.2:7000", 42, false)}, false, true, ""},
		{"absent", map[string]*member{}, false, false, ""},
		{"another lease alive", map[string]*member{"n2": memberAt("n2", "10.0.0.2:7001", "10.0.0.2:7000", 41, true)}, false, false, "lease"},
		{"another lease dead", map[string]*member{"n2": memberAt("n2", "10.0.0.2:7001", "10.0.0.2:7000", 41, false)}, false, false, "lease"},
		{"another gossip address", map[string]*member{"n2": memberAt("n2", "10.0.0.9:7001", "10.0.0.2:7000", 42, false)}, false, false, "gossip address"},
		{"another remote address", map[string]*member{"n2": memberAt("n2", "10.0.0.2:7001", "10.0.0.9:7000", 42, true)}, false, false, "remote address"},
		{"no lease yet", map[string]*member{"n2": memberAt("n2", "10.0.0.2:7001", "10.0.0.2:7000", 0, true)}, false, false, "lease"},
		{"unreadable meta", map[string]*member{"n2": {addr: "10.0.0.2:7001", alive: true}}, false, false, "metadata"},
		// Another member claiming n2 (its ID, lease and remote address)
		// counts for nothing, alive or dead.
		{"forger dead", map[string]*member{
			"n2": memberAt("n2", "10.0.0.2:7001", "10.0.0.2:7000", 42, true),
			"x":  memberAt("n2", "10.0.0.9:7001", "10.0.0.2:7000", 42, false),
		}, true, false, ""},
		{"forger alive", map[string]*member{"x": memberAt("n2", "10.0.0.9:7001", "10.0.0.2:7000", 42, true)}, false, false, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := &membership{members: c.members, log: slog.New(testutil.NewRecorder())}
			v := m.view("n1", []placement.NodeInfo{reg})
			_, dead := v.dead["n2"]
			require.Equal(t, c.live, contains(v.live, "n2"), "live %v", v.live)
			require.Equal(t, c.dead, dead, "dead %v", v.dead)
			require.True(t, contains(v.live, "n1"))
			if mem, ok := c.members["n2"]; ok {
				require.Contains(t, identityMismatch("n2", mem, reg, true), c.mismatch)
			}
		})
	}
}

// audit warns once per member and mismatch, after the grace period, and
// forgets dead members that stand for no registration.
func TestAuditWarnsOnceAndForgets(t *testing.T) {
	rec := testutil.NewRecorder()
	m := &membership{log: slog.New(rec), members: map[string]*member{
		"x":    memberAt("n2", "10.0.0.9:7001", "10.0.0.2:7000", 42, true),
		"gone": memberAt("gone", "10.0.0.8:7001", "10.0.0.8:7000", 7, false),
	}}
	t0 := time.Now()
	m.members["gone"].since = t0
	warnings := func() int {
		n := 0
		for _, r := range rec.Records() {
			if r.Level == slog.LevelWarn {
				n++
			}
		}
		return n
	}
	for i := range 10 {
		m.audit("n1", nil, t0.Add(time.Duration(i)*mismatchGrace/4))
	}
	require.Equal(t, 1, warnings(), "%v", rec.Above(slog.LevelInfo))
	require.Contains(t, fmt.Sprint(rec.Above(slog.LevelInfo)), `claims node ID "n2"`)
	require.Contains(t, m.members, "gone")
	m.audit("n1", nil, t0.Add(forgetDeadAfter+time.Second))
	require.NotContains(t, m.members, "gone")
	require.Contains(t, m.members, "x")
}

// Leases gossiped at once (the placement agent's new lease and the live
// loop's) do not race: memberlist's UpdateNode reads the local node's
// address outside its lock, which a concurrent UpdateNode writes.
func TestConcurrentLeaseUpdates(t *testing.T) {
	cfg := Config{Gossip: "local", GossipAddr: "127.0.0.1:0"}
	m, err := startMembership(cfg, nodeMeta{ID: "n1"}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer m.kill()
	var wg sync.WaitGroup
	for g := range 2 {
		wg.Go(func() {
			for i := range 50 {
				m.setLease(int64(2*i + g + 1))
			}
		})
	}
	wg.Wait()
	m.mu.Lock()
	lease := m.meta.Lease
	m.mu.Unlock()
	if lease < 1 || lease > 100 {
		t.Fatalf("lease %d after the updates", lease)
	}
}
