package chaos

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func testPlanConfig() PlanConfig {
	c := DefaultConfig()
	c.Kinds = []Kind{KindKill, KindPause, KindPartition, KindEtcd}
	return c.planConfig()
}

func TestPlanIsDeterministic(t *testing.T) {
	pc := testPlanConfig()
	for seed := uint64(0); seed < 50; seed++ {
		a, b := Plan(seed, pc), Plan(seed, pc)
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("seed %d: two plans differ:\n%v\n%v", seed, a, b)
		}
	}
	if reflect.DeepEqual(Plan(1, pc), Plan(2, pc)) {
		t.Fatal("seeds 1 and 2 give the same plan")
	}
}

func TestPlanShape(t *testing.T) {
	pc := testPlanConfig()
	cuts := map[string]int{}
	for seed := uint64(0); seed < 200; seed++ {
		faults := Plan(seed, pc)
		if len(faults) < len(pc.Kinds) {
			t.Fatalf("seed %d: %d faults in %v, want at least one of each of %d kinds", seed, len(faults), pc.Duration, len(pc.Kinds))
		}
		seen := map[Kind]bool{}
		var prevEnd time.Duration
		for i, f := range faults {
			seen[f.Kind] = true
			if f.Index != i {
				t.Fatalf("seed %d: fault %d has index %d", seed, i, f.Index)
			}
			if f.At < pc.Warmup || f.At+f.Hold > pc.Duration-pc.Cooldown {
				t.Fatalf("seed %d: %v outside [%v, %v]", seed, f, pc.Warmup, pc.Duration-pc.Cooldown)
			}
			if f.At < prevEnd {
				t.Fatalf("seed %d: %v overlaps the previous fault (ends %v)", seed, f, prevEnd)
			}
			prevEnd = f.At + f.Hold
			switch f.Kind {
			case KindKill, KindPause, KindPartition:
				if f.Node < 0 || f.Node >= pc.Nodes || f.Member != -2 {
					t.Fatalf("seed %d: bad target in %v", seed, f)
				}
			case KindEtcd:
				if f.Node != -1 || f.Member < -1 || f.Member >= pc.EtcdMembers {
					t.Fatalf("seed %d: bad target in %v", seed, f)
				}
			}
			if f.Kind == KindPause && f.Hold <= pc.LeaseTTL+2*time.Second {
				t.Fatalf("seed %d: pause %v does not outlast the lease TTL %v by 2s", seed, f.Hold, pc.LeaseTTL)
			}
			if f.Kind == KindPartition && f.Hold <= pc.LeaseTTL {
				t.Fatalf("seed %d: partition %v does not outlast the lease TTL", seed, f.Hold)
			}
			if f.Kind == KindPartition {
				cuts[f.Cut]++
			}
			if (f.Kind == KindPartition) != (f.Cut == CutEtcd || f.Cut == CutNodes) {
				t.Fatalf("seed %d: %v cuts %q", seed, f, f.Cut)
			}
		}
		// The first len(Kinds) faults are a permutation of the kinds.
		for _, k := range pc.Kinds {
			if !seen[k] {
				t.Fatalf("seed %d: no %s fault in %v", seed, k, faults)
			}
		}
	}
	// Partitions cut from etcd and from the nodes, about as often.
	if cuts[CutEtcd] < 50 || cuts[CutNodes] < 50 {
		t.Fatalf("partitions over 200 seeds: %v", cuts)
	}
}

// Even with five kinds and room for four faults, every run has a pause.
func TestPlanAlwaysPauses(t *testing.T) {
	c := DefaultConfig()
	c.Kinds = AllKinds
	pc := c.planConfig()
	for seed := uint64(0); seed < 300; seed++ {
		faults := Plan(seed, pc)
		if !slices.ContainsFunc(faults, func(f Fault) bool { return f.Kind == KindPause }) {
			t.Fatalf("seed %d: no pause in %v", seed, faults)
		}
	}
}

func TestPlanEdges(t *testing.T) {
	pc := testPlanConfig()
	pc.Kinds = nil
	if f := Plan(1, pc); f != nil {
		t.Fatalf("no kinds: %v", f)
	}
	pc = testPlanConfig()
	pc.Duration = 5 * time.Second
	if f := Plan(1, pc); len(f) != 0 {
		t.Fatalf("5s leaves no room after warmup and cooldown: %v", f)
	}
	pc = testPlanConfig()
	pc.Kinds = []Kind{KindPostgres}
	for _, f := range Plan(3, pc) {
		if f.Hold != 0 || f.Node != -1 || f.Member != -2 {
			t.Fatalf("postgres fault %v", f)
		}
	}
}

func TestParseKinds(t *testing.T) {
	ks, err := ParseKinds("", "etcd")
	if err != nil || !reflect.DeepEqual(ks, []Kind{KindKill, KindPause, KindPartition, KindEtcd}) {
		t.Fatalf("default for etcd: %v %v", ks, err)
	}
	ks, err = ParseKinds("all", "postgres")
	if err != nil || len(ks) != 5 {
		t.Fatalf("all for postgres: %v %v", ks, err)
	}
	ks, err = ParseKinds("pause, kill,pause", "etcd")
	if err != nil || !reflect.DeepEqual(ks, []Kind{KindPause, KindKill}) {
		t.Fatalf("list: %v %v", ks, err)
	}
	if _, err := ParseKinds("kill,nap", "etcd"); err == nil || !strings.Contains(err.Error(), `"nap"`) {
		t.Fatalf("unknown kind: %v", err)
	}
	if _, err := ParseKinds("postgres", "etcd"); err == nil {
		t.Fatal("postgres fault accepted with the etcd store")
	}
}

func TestParseFlags(t *testing.T) {
	var sb strings.Builder
	c, err := ParseFlags([]string{"--seed", "42", "--duration", "30s", "--nodes", "4", "--etcd-members", "1",
		"--store", "postgres", "--faults", "all", "--report", "r.json"}, &sb, "postgres://x")
	if err != nil {
		t.Fatal(err)
	}
	if c.Seed != 42 || c.Duration != 30*time.Second || c.Nodes != 4 || c.EtcdMembers != 1 || c.Store != "postgres" ||
		c.PGURL != "postgres://x" || c.ReportPath != "r.json" {
		t.Fatalf("parsed %+v", c)
	}
	// One etcd member cannot lose one: "all" leaves the etcd fault out.
	if !reflect.DeepEqual(c.Kinds, []Kind{KindKill, KindPause, KindPartition, KindPostgres}) {
		t.Fatalf("kinds %v", c.Kinds)
	}
	c.Bank = "/bin/true"
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"--seed", "x"},
		{"--faults", "nap"},
		{"extra"},
		{"--nodes"},
	} {
		if _, err := ParseFlags(args, &sb, ""); err == nil {
			t.Errorf("%q accepted", args)
		}
	}
	for _, mut := range []func(*Config){
		func(c *Config) { c.Nodes = 1 },
		func(c *Config) { c.Store = "redis" },
		func(c *Config) { c.Store, c.PGURL = "postgres", "" },
		func(c *Config) { c.Kinds = []Kind{KindEtcd}; c.EtcdMembers = 1 },
		func(c *Config) { c.Kinds = []Kind{KindPostgres} },
		func(c *Config) { c.Bank = "" },
		func(c *Config) { c.Duration = 0 },
	} {
		c := DefaultConfig()
		c.Bank = "/bin/true"
		mut(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("invalid config accepted: %+v", c)
		}
	}
}

func TestMainUsage(t *testing.T) {
	var sb strings.Builder
	if err := Main(context.Background(), []string{"--help"}, &sb, "/bin/true"); err != nil {
		t.Fatalf("--help: %v", err)
	}
	if !strings.Contains(sb.String(), "-faults") {
		t.Fatalf("usage: %s", sb.String())
	}
	for _, args := range [][]string{{"--nodes", "x"}, {"--store", "redis"}, {"--faults", "postgres"}} {
		err := Main(context.Background(), args, &sb, "/bin/true")
		if !errors.Is(err, ErrUsage) {
			t.Errorf("%q: %v", args, err)
		}
	}
}
