package chaos

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseCounter(t *testing.T) {
	text := `# HELP ordo_fenced_writes_total Records rejected by storage fencing.
# TYPE ordo_fenced_writes_total counter
ordo_fenced_writes_total 3
ordo_fenced_writes_total{shard="1"} 4 1700000000000
ordo_fenced_writes_total_extra 100
ordo_fenced_writesX 100
other 7
`
	v, found, err := parseCounter(strings.NewReader(text), fencedMetric)
	if err != nil || !found || v != 7 {
		t.Fatalf("got %v %v %v, want 7", v, found, err)
	}
	_, found, err = parseCounter(strings.NewReader("other 1\n"), fencedMetric)
	if err != nil || found {
		t.Fatalf("missing metric: %v %v", found, err)
	}
	for _, bad := range []string{"ordo_fenced_writes_total x\n", "ordo_fenced_writes_total{a=\"b\" 1\n", "ordo_fenced_writes_total NaN\n"} {
		if _, _, err := parseCounter(strings.NewReader(bad), fencedMetric); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestFencedTally(t *testing.T) {
	ft := newFencedTally()
	ft.observe("n1", 1, 2)
	ft.observe("n1", 1, 5)
	ft.observe("n1", 1, 4) // a late, smaller answer
	ft.observe("n1", 2, 1) // restarted: counting from 0 again
	ft.observe("n2", 1, 0)
	by, sum := ft.byNode()
	if sum != 6 || by["n1"] != 6 || by["n2"] != 0 || len(by) != 2 {
		t.Fatalf("by node %v, sum %d", by, sum)
	}
}

// A fake node's counters are scraped per incarnation: a kill loses
// nothing already scraped.
func TestScrapeAcrossRestarts(t *testing.T) {
	t.Setenv("CHAOS_HELPER", "node")
	t.Setenv("CHAOS_FENCED", "3")
	ctx := context.Background()
	r := testRunner(t, 1)
	addr, err := freeAddr()
	if err != nil {
		t.Fatal(err)
	}
	n := &node{name: "n1", admin: addr}
	n.proc = newProc(n.name, os.Args[0], filepath.Join(r.dir, "n1.log"), []string{"node", "--id", "n1", "--admin", addr})
	r.nodes = []*node{n}
	defer r.teardown()
	for range 2 {
		if err := n.proc.start(); err != nil {
			t.Fatal(err)
		}
		if err := r.waitNodeReady(ctx, n, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		r.scrape(ctx)
		n.proc.kill()
		r.scrape(ctx) // not running: nothing read
	}
	by, sum := r.tally.byNode()
	// 3 fenced and 1 late-fenced per incarnation.
	if sum != 8 || by["n1"] != 8 {
		t.Fatalf("tally %v %d, want 8 over two incarnations", by, sum)
	}
	if _, err := r.admin.fenced(ctx, addr); err == nil {
		t.Fatal("scraped a dead node")
	}
}

// testRunner is a runner without processes, writing its log to t.
func testRunner(t *testing.T, nodes int) *runner {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Bank = os.Args[0]
	cfg.Nodes = nodes
	cfg.Accounts = 50
	return &runner{cfg: cfg, dir: t.TempDir(), out: tWriter{t}, admin: newAdminClient(), tally: newFencedTally()}
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}
