package chaos

import (
	"slices"
	"testing"
)

// The observer's view lists the nodes, then the members, as they are: a
// killed node has no process ID, a restarted one a new incarnation; the
// nodes get the extra arguments.
func TestClusterProcesses(t *testing.T) {
	r, _ := fakeCluster(t, 2)
	r.cfg.NodeArgs = []string{"--idle-timeout", "15s"}
	c := &Cluster{r: r}
	ps := c.Processes()
	if len(ps) != 3 || ps[0].Name != "n1" || !ps[0].Node || ps[2].Name != "e1" || ps[2].Node {
		t.Fatalf("processes %+v", ps)
	}
	if ps[0].PID == 0 || ps[0].Incarnation != 1 || ps[0].Admin != r.nodes[0].admin || ps[2].PID != 0 {
		t.Fatalf("n1 %+v, e1 %+v", ps[0], ps[2])
	}
	if ps[2].ClientURL != r.members[0].clientURL {
		t.Fatalf("e1 client URL %q", ps[2].ClientURL)
	}

	r.nodes[0].proc.kill()
	if ps := c.Processes(); ps[0].PID != 0 || ps[0].Incarnation != 1 {
		t.Fatalf("killed n1: %+v", ps[0])
	}
	if err := r.startNode(t.Context(), 0, r.nodes); err != nil {
		t.Fatal(err)
	}
	ps = c.Processes()
	if ps[0].PID == 0 || ps[0].Incarnation != 2 || ps[0].Started.Before(ps[1].Started) {
		t.Fatalf("restarted n1: %+v", ps[0])
	}
	if args := r.nodeArgs(0, r.nodes); !slices.Equal(args[len(args)-2:], r.cfg.NodeArgs) {
		t.Fatalf("node args %q do not end with %q", args, r.cfg.NodeArgs)
	}
}
