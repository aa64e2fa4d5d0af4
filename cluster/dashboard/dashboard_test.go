package dashboard

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestQuantile(t *testing.T) {
	bounds := []float64{0.001, 0.002, 0.004, 0.008}
	prev := Histogram{Bounds: bounds, Counts: []uint64{10, 10, 10, 10}, Count: 10}
	// 100 new observations: 50 in (0.001, 0.002], 49 in (0.002, 0.004], 1 above 0.008.
	cur := Histogram{Bounds: bounds, Counts: []uint64{10, 60, 109, 109}, Count: 110}
	for _, c := range []struct {
		q    float64
		want float64
	}{
		{0.25, 0.0015},              // halfway through the second bucket
		{0.5, 0.002},                // its upper bound
		{0.99, 0.004},               // 99 of 100 are within the third bucket
		{0.995, 0.008},              // beyond every bound: the highest
		{0.74, 0.002 + 0.002*24/49}, // within the third bucket
	} {
		got, ok := quantile(c.q, prev, cur)
		require.True(t, ok)
		require.InDelta(t, c.want, got, 1e-9, "q %v", c.q)
	}
	_, ok := quantile(0.5, cur, cur)
	require.False(t, ok, "no observations in the interval")
	got, ok := quantile(0.5, Histogram{}, Histogram{Bounds: bounds, Counts: []uint64{4, 4, 4, 4}, Count: 4})
	require.True(t, ok, "no previous reading counts from zero")
	require.InDelta(t, 0.0005, got, 1e-9)
	_, ok = quantile(0.5, Histogram{Bounds: bounds[:2], Counts: []uint64{1, 1}, Count: 1}, cur)
	require.False(t, ok, "buckets differ")
}

func TestDerive(t *testing.T) {
	hist := func(n uint64) Histogram {
		return Histogram{Bounds: []float64{0.01, 0.1}, Counts: []uint64{n, n}, Count: n}
	}
	prev := Counters{
		Calls:   map[string]map[string]uint64{"acct": {"ok": 10, "CODE_NOT_HERE": 1}},
		Served:  map[string]map[string]uint64{"acct": {"ok": 5}},
		Latency: map[string]Histogram{"acct": hist(11)},
		Saves:   10, Writes: 40, Fenced: 1, Handoffs: 2, Retries: 3,
	}
	cur := Counters{
		Calls:   map[string]map[string]uint64{"acct": {"ok": 30, "CODE_NOT_HERE": 1}, "xfer": {"CODE_FENCED": 2}},
		Served:  map[string]map[string]uint64{"acct": {"ok": 5}},
		Latency: map[string]Histogram{"acct": hist(31), "xfer": hist(2)},
		Saves:   14, Writes: 80, Fenced: 4, Handoffs: 2, Failovers: 1, Retries: 7, Active: 9,
	}
	s := derive(prev, cur, 2*time.Second)
	require.Equal(t, map[string]map[string]float64{"acct": {"ok": 10}, "xfer": {"CODE_FENCED": 1}}, s.Calls)
	require.Nil(t, s.Served, "no change")
	require.Equal(t, map[string]float64{"acct": 5, "xfer": 5}, s.P50)
	require.Equal(t, 2.0, s.Retries)
	require.Equal(t, 2.0, s.Saves)
	require.Equal(t, 20.0, s.Writes)
	require.Equal(t, 10.0, s.WritesPerSave)
	require.Equal(t, uint64(3), s.Fenced)
	require.Equal(t, uint64(0), s.Handoffs)
	require.Equal(t, uint64(1), s.Failovers)
	require.Equal(t, 9, s.Active)

	// A restarted node's counters count from zero.
	s = derive(cur, Counters{Saves: 1, Writes: 3}, time.Second)
	require.Equal(t, 1.0, s.Saves)
	require.Equal(t, 3.0, s.WritesPerSave)

	tot := totals(cur)
	require.Equal(t, Totals{Calls: 33, CallErrors: 3, Served: 5, Retries: 7, Saves: 14, Writes: 80, Fenced: 4,
		Handoffs: 2, Failovers: 1}, tot)
}

func TestRing(t *testing.T) {
	r := newRing[int](3)
	require.Empty(t, r.since(0))
	for i := 1; i <= 5; i++ {
		require.Equal(t, uint64(i), r.add(i*10))
	}
	require.Equal(t, []int{30, 40, 50}, r.since(0))
	require.Equal(t, []int{50}, r.since(4))
	require.Empty(t, r.since(5))
	require.Equal(t, uint64(5), r.last())
	r.reset()
	require.Empty(t, r.since(0))
	require.Equal(t, uint64(1), r.add(7))
}

func TestObserverEvents(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	o := newObserver("n1")
	view := View{
		Nodes:  []Registration{{ID: "n1", Lease: 1}, {ID: "n2", Lease: 2}},
		Gossip: []GossipMember{{ID: "n1", State: GossipAlive}, {ID: "n2", State: GossipAlive}},
		Owners: map[uint32]Owner{0: {"n1", 10}, 1: {"n2", 11}, 2: {"n2", 12}},
	}
	require.Empty(t, o.view(view, at(0)), "the first view is the baseline")

	types := func(evs []Event) []string {
		var out []string
		for _, e := range evs {
			out = append(out, e.Type+" "+e.Subject+": "+e.Text)
		}
		return out
	}
	// n2 is suspected, then dies; its shards free, and are taken one at a
	// time by n1 and n3 (which joins).
	view.Gossip[1].State = GossipSuspect
	require.Equal(t, []string{"suspect n2: n2 is suspected by gossip"}, types(o.view(view, at(100))))
	view.Gossip[1].State = GossipDead
	view.Gossip = append(view.Gossip, GossipMember{ID: "n3", State: GossipAlive})
	view.Nodes = []Registration{{ID: "n1", Lease: 1}, {ID: "n3", Lease: 3}}
	view.Owners = map[uint32]Owner{0: {"n1", 10}}
	require.ElementsMatch(t, []string{
		"dead n2: n2 declared dead by gossip, or left",
		"join n3: n3 joined gossip",
		"register n3: n3 registered in etcd under lease 3",
		"unregister n2: n2's registration ended with lease 2 (expired, revoked or released)",
	}, types(o.view(view, at(200))))
	view.Owners = map[uint32]Owner{0: {"n1", 10}, 1: {"n1", 20}}
	require.Empty(t, o.view(view, at(300)), "moves wait until they stop coming")
	view.Owners = map[uint32]Owner{0: {"n1", 10}, 1: {"n1", 20}, 2: {"n3", 21}}
	require.Empty(t, o.view(view, at(600)))
	evs := o.view(view, at(1100))
	require.Equal(t, []string{
		"moves n1: shard 1 n2 (epoch 11) → n1 (epoch 20)",
		"moves n3: shard 2 n2 (epoch 12) → n3 (epoch 21)",
	}, types(evs))
	require.Equal(t, at(300).UnixMilli(), evs[0].T, "moves are dated when they began")
	require.Equal(t, []Move{{Shard: 2, From: "n2", FromEpoch: 12, To: "n3", ToEpoch: 21}}, evs[1].Moves)

	// Many moves at once make one event; a lease that changes is a re-registration.
	owners := map[uint32]Owner{}
	for s := uint32(0); s < 6; s++ {
		owners[s] = Owner{"n3", int64(30 + s)}
	}
	view.Owners = owners
	view.Nodes = []Registration{{ID: "n1", Lease: 1}, {ID: "n3", Lease: 4}}
	require.Equal(t, []string{"reregister n3: n3 registered again under lease 4: lease 3 ended"}, types(o.view(view, at(2000))))
	require.Equal(t, []string{
		"moves n3: 3 free shards → n3 (epochs 33–35)",
		"moves n3: 2 shards n1 → n3 (epochs 30–31)",
		"moves n3: shard 2 n3 (epoch 21) → n3 (epoch 32)",
	}, types(o.view(view, at(2600))))

	// The observer's own lease and counters.
	require.Empty(t, o.local(Local{Up: true, Lease: 1, LeaseValid: true}, at(0)))
	require.Equal(t, []string{"lease-lost n1: n1's lease is not valid: it stops serving every shard"},
		types(o.local(Local{Up: true, Lease: 1}, at(100))))
	evs = o.local(Local{Up: true, Lease: 5, LeaseValid: true}, at(200))
	require.Equal(t, []string{
		"new-lease n1: n1 opened a new session under lease 5 (lease 1 was lost)",
		"lease-valid n1: n1's lease is valid again",
	}, types(evs))
	require.True(t, evs[0].Local)
	require.Empty(t, o.counters(Counters{Fenced: 1}, at(0)))
	require.Equal(t, []string{
		"fenced n1: storage rejected 2 of n1's writes: their epoch was stale (fenced)",
		"handoff n1: n1 handed off 1 shard",
		"revoke n1: n1 revoked the lease of 1 dead node (accelerated failover)",
	}, types(o.counters(Counters{Fenced: 3, Handoffs: 1, Failovers: 1}, at(1000))))
}

func TestMemberState(t *testing.T) {
	up := Local{Up: true, LeaseValid: true}
	f, tr := false, true
	neg, pos := -1.0, 1.0
	for _, c := range []struct {
		m     Member
		local Local
		want  string
	}{
		{Member{Self: true}, Local{}, StateStarting},
		{Member{Self: true}, Local{Up: true}, StateLeaseInvalid},
		{Member{Self: true}, up, StateAlive},
		{Member{Registered: true, Gossip: GossipAlive, LeaseTTL: &pos, LeaseValid: &tr}, up, StateAlive},
		{Member{Registered: true, Gossip: GossipSuspect}, up, StateSuspect},
		{Member{Registered: true, Gossip: GossipDead}, up, StateDead},
		{Member{Gossip: GossipDead}, up, StateDown},
		{Member{}, up, StateDown},
		{Member{Gossip: GossipAlive}, up, StateLeaseInvalid},
		{Member{Registered: true, Gossip: GossipAlive, LeaseTTL: &neg}, up, StateLeaseInvalid},
		{Member{Registered: true, Gossip: GossipAlive, LeaseValid: &f}, up, StateLeaseInvalid},
		{Member{Registered: true}, up, StateUnknown},
	} {
		require.Equal(t, c.want, memberState(c.m, c.local), fmt.Sprintf("%+v", c.m))
	}
}

func TestConfigErrorsWrapErrInvalidConfig(t *testing.T) {
	c := DefaultConfig()
	require.NoError(t, c.Validate())
	c.History = 1
	err := c.Validate()
	require.ErrorIs(t, err, ErrInvalidConfig)
	require.Equal(t, "dashboard: History must be at least 2", err.Error())
}
