package chaos

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// Kind is a fault the orchestrator can inject.
type Kind string

// The fault kinds, as named in --faults.
const (
	// KindKill sends SIGKILL to a node, then restarts it after Hold.
	KindKill Kind = "kill"
	// KindPause sends SIGSTOP to a node and SIGCONT after Hold, which is
	// longer than the lease TTL.
	KindPause Kind = "pause"
	// KindPartition cuts a node, for Hold, either from etcd (every
	// proxied connection between the node and the etcd members stalls) or
	// from the other nodes and the clients (the proxies in front of its
	// remote and gossip ports stall TCP and drop UDP), as Fault.Cut says.
	KindPartition Kind = "partition"
	// KindEtcd kills an etcd member (the leader, or one chosen by the seed)
	// and restarts it after Hold.
	KindEtcd Kind = "etcd"
	// KindPostgres restarts the PostgreSQL server (--store postgres only).
	KindPostgres Kind = "postgres"
)

// AllKinds lists every fault kind in a fixed order.
var AllKinds = []Kind{KindKill, KindPause, KindPartition, KindEtcd, KindPostgres}

// ParseKinds parses a comma-separated --faults list. An empty list, or
// "all", selects every kind the store supports (postgres only with the
// postgres store).
func ParseKinds(list, store string) ([]Kind, error) {
	list = strings.TrimSpace(list)
	if list == "" || list == "all" {
		var ks []Kind
		for _, k := range AllKinds {
			if k != KindPostgres || store == "postgres" {
				ks = append(ks, k)
			}
		}
		return ks, nil
	}
	seen := map[Kind]bool{}
	var ks []Kind
	for _, f := range strings.Split(list, ",") {
		k := Kind(strings.TrimSpace(f))
		valid := false
		for _, a := range AllKinds {
			valid = valid || a == k
		}
		if !valid {
			return nil, fmt.Errorf("chaos: unknown fault %q (want a list of %v)", k, AllKinds)
		}
		if k == KindPostgres && store != "postgres" {
			return nil, fmt.Errorf("chaos: fault %q needs --store postgres", k)
		}
		if !seen[k] {
			seen[k] = true
			ks = append(ks, k)
		}
	}
	return ks, nil
}

// Fault is one scheduled fault. Offsets are from the start of the load.
type Fault struct {
	// Index is the fault's position in the schedule, from 0.
	Index int `json:"index"`
	// Kind is what is injected.
	Kind Kind `json:"kind"`
	// Node is the target node's index (kill, pause, partition), or -1.
	Node int `json:"node"`
	// Member is the target etcd member's index (etcd), -1 for whichever
	// member leads when the fault starts, or -2 when not applicable.
	Member int `json:"member"`
	// Cut is what a partition cuts the node from: CutEtcd or CutNodes.
	// Empty for other kinds.
	Cut string `json:"cut,omitempty"`
	// At is when the fault starts.
	At time.Duration `json:"at_ns"`
	// Hold is how long the fault lasts before it is healed (the node
	// restarted or resumed, the partition healed, the member restarted).
	// For postgres it is 0: the restart command itself is the fault.
	Hold time.Duration `json:"hold_ns"`
}

// What a partition cuts a node from.
const (
	// CutEtcd stalls the node's connections to every etcd member (and,
	// with the etcd store, its store traffic). It keeps its peers.
	CutEtcd = "etcd"
	// CutNodes cuts the node from every other node and client, in both
	// directions (replies and gossip acks go to the advertised, cut,
	// address). It keeps etcd and its store, so its lease renews.
	CutNodes = "nodes"
)

// Target names the fault's target for reports.
func (f Fault) Target(nodeName func(int) string, memberName func(int) string) string {
	switch {
	case f.Node >= 0:
		return nodeName(f.Node)
	case f.Member == -1:
		return "etcd leader"
	case f.Member >= 0:
		return memberName(f.Member)
	default:
		return "postgres"
	}
}

func (f Fault) String() string {
	who := ""
	switch {
	case f.Cut != "":
		who = fmt.Sprintf(" node %d from %s", f.Node, f.Cut)
	case f.Node >= 0:
		who = fmt.Sprintf(" node %d", f.Node)
	case f.Member == -1:
		who = " leader"
	case f.Member >= 0:
		who = fmt.Sprintf(" member %d", f.Member)
	}
	return fmt.Sprintf("#%d %s%s at %v for %v", f.Index, f.Kind, who, f.At, f.Hold)
}

// PlanConfig is what a schedule depends on besides the seed.
type PlanConfig struct {
	// Duration is how long the load runs.
	Duration time.Duration
	// Kinds are the fault kinds to draw from; each appears at least once
	// when the duration leaves room for that many faults.
	Kinds []Kind
	// Nodes and EtcdMembers are the cluster's sizes.
	Nodes, EtcdMembers int
	// LeaseTTL is the nodes' lease TTL; pauses and partitions outlast it.
	LeaseTTL time.Duration
	// Interval is the time between the starts of two faults.
	Interval time.Duration
	// Warmup is the time before the first fault; Cooldown the time
	// between the end of the last fault and the end of the load.
	Warmup, Cooldown time.Duration
}

// Plan draws a schedule from seed: faults one at a time (never
// overlapping, so each one's recovery is measured on its own), starting
// every Interval with up to a second of jitter. Kinds follow a seeded
// shuffle of Kinds, repeated, so every kind appears once before any
// repeats, with a pause among the first three faults; targets and hold times are drawn from the seed. The same seed
// and config give the same schedule.
func Plan(seed uint64, pc PlanConfig) []Fault {
	if len(pc.Kinds) == 0 || pc.Interval <= 0 {
		return nil
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	dur := func(lo, hi time.Duration) time.Duration {
		if hi <= lo {
			return lo
		}
		// Whole milliseconds keep reports readable.
		return lo + time.Duration(rng.Int64N(int64((hi-lo)/time.Millisecond)+1))*time.Millisecond
	}
	var faults []Fault
	var order []Kind
	end := pc.Duration - pc.Cooldown
	for slot := 0; ; slot++ {
		at := pc.Warmup + time.Duration(slot)*pc.Interval + dur(0, time.Second)
		if len(order) == 0 {
			order = append([]Kind(nil), pc.Kinds...)
			rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
			// A pause is among the first three faults, so that even a
			// short run with every kind has one.
			if slot == 0 {
				if i := slices.Index(order, KindPause); i >= 3 {
					j := rng.IntN(3)
					order[i], order[j] = order[j], order[i]
				}
			}
		}
		k := order[0]
		order = order[1:]
		f := Fault{Index: len(faults), Kind: k, Node: -1, Member: -2, At: at}
		switch k {
		case KindKill:
			f.Node = rng.IntN(pc.Nodes)
			f.Hold = dur(time.Second, 2500*time.Millisecond)
		case KindPause:
			f.Node = rng.IntN(pc.Nodes)
			f.Hold = pc.LeaseTTL + dur(2500*time.Millisecond, 4*time.Second)
		case KindPartition:
			f.Node = rng.IntN(pc.Nodes)
			f.Cut = CutEtcd
			if rng.IntN(2) == 0 {
				f.Cut = CutNodes
			}
			f.Hold = pc.LeaseTTL + dur(time.Second, 3*time.Second)
		case KindEtcd:
			// Half the etcd faults hit the leader, whoever it is then.
			if rng.IntN(2) == 0 {
				f.Member = -1
			} else {
				f.Member = rng.IntN(pc.EtcdMembers)
			}
			f.Hold = dur(2*time.Second, 4*time.Second)
		case KindPostgres:
		}
		// The heal must come before the next fault and the cooldown.
		if at+f.Hold > end || f.Hold > pc.Interval-time.Second {
			break
		}
		faults = append(faults, f)
	}
	return faults
}
