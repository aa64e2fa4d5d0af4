package soak

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/examples/bank/ledger"
	"github.com/ordo-actors/ordo/robustness/chaos"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeNode serves the admin paths the sampler reads: every account holds
// the transfers held(account) returns.
func fakeNode(t *testing.T, held func(account string) []string) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `{"node":"n1","active_entities":12,"host":{"Active":12,"DedupEntries":340}}`)
	})
	mux.HandleFunc("GET /debug/pprof/goroutine", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("debug") != "1" {
			http.Error(w, "want debug=1", http.StatusBadRequest)
			return
		}
		fmt.Fprint(w, "goroutine profile: total 77\n1 @ 0x1\n")
	})
	mux.HandleFunc("GET /entities/{kind}/{id}", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("kind") != ledger.Account.Name() {
			http.Error(w, "unknown kind", http.StatusNotFound)
			return
		}
		var debits []string
		for _, id := range held(r.PathValue("id")) {
			debits = append(debits, fmt.Sprintf("%q:\"5\"", id))
		}
		fmt.Fprintf(w, `{"record":{"found":true,"state":{"debits":{%s},"credits":{}}}}`, strings.Join(debits, ","))
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func addr(srv *httptest.Server) string { return strings.TrimPrefix(srv.URL, "http://") }

func testSampler() *sampler {
	s := newSampler(time.Second, time.Second, func(string, ...any) {})
	s.start = time.Now()
	return s
}

// A node's sample: RSS and descriptors from /proc, active entities and
// dedup entries from /status, goroutines from pprof.
func TestSampleNode(t *testing.T) {
	srv := fakeNode(t, func(string) []string { return nil })
	s := testSampler()
	p := chaos.Process{Name: "n1", Node: true, PID: os.Getpid(), Incarnation: 2, Admin: addr(srv)}
	s.sampleProcess(context.Background(), nil, p, 30)
	want := map[string]float64{seriesActive: 12, seriesDedup: 340, seriesGoroutines: 77}
	for name, v := range want {
		pts := s.points[seriesKey{name, "n1"}]
		if len(pts) != 1 || pts[0] != (Point{At: 30, V: v, Inc: 2}) {
			t.Errorf("%s: %+v, want %v at 30 s of incarnation 2", name, pts, v)
		}
	}
	for _, name := range []string{seriesRSS, seriesFDs} {
		if pts := s.points[seriesKey{name, "n1"}]; len(pts) != 1 || pts[0].V <= 0 {
			t.Errorf("%s: %+v", name, pts)
		}
	}

	// A stopped node is read from /proc only.
	s = testSampler()
	p.Stopped = true
	s.sampleProcess(context.Background(), nil, p, 40)
	if len(s.points) != 2 {
		t.Fatalf("stopped node: %d series, want RSS and descriptors only", len(s.points))
	}
}

// The pending Forgets are summed over every account, each read from
// another node when the first fails; a read that fails everywhere fails
// the sample rather than undercount.
func TestPendingSumsAccountsAcrossNodes(t *testing.T) {
	held := func(acct string) []string {
		if acct == "acct-000003" {
			return []string{"t-1", "t-2"}
		}
		if acct == "acct-000007" {
			return []string{"t-9"}
		}
		return nil
	}
	good := fakeNode(t, held)
	var refused atomic.Int64
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		refused.Add(1)
		http.Error(w, "node not running", http.StatusServiceUnavailable)
	}))
	defer bad.Close()
	procs := []chaos.Process{
		{Name: "n1", Node: true, PID: 1, Admin: addr(bad)},
		{Name: "n2", Node: true, PID: 2, Admin: addr(good)},
		{Name: "n3", Node: true, PID: 0, Admin: "127.0.0.1:1"}, // not running: never asked
		{Name: "e1", PID: 3},
	}
	s := testSampler()
	n, ids, err := s.pending(context.Background(), procs, 10)
	if err != nil {
		t.Fatal(err)
	}
	if n != 3 || len(ids) != 3 || ids[0] != "acct-000003: debit t-1" {
		t.Fatalf("pending %d %v, want 3", n, ids)
	}
	if refused.Load() == 0 {
		t.Fatal("the failing node was never asked")
	}

	procs[1].Stopped = true
	if _, _, err := s.pending(context.Background(), procs, 10); err == nil {
		t.Fatal("no node answered, yet the sample passed")
	}
}
