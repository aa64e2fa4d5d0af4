package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/cluster/dashboard"
	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/ordo-actors/ordo/robustness/check"
	"github.com/ordo-actors/ordo/robustness/workload"
	"github.com/stretchr/testify/require"
)

// syncBuffer is a bytes.Buffer safe for one writer and concurrent readers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var dashboardURL = regexp.MustCompile(`dashboard of (n\d+): (http://\S+/)`)

// demo --dashboard prints every node's dashboard URL, keeps the cluster up
// after the run, serves the dashboards from every node (the restarted one
// included), and stops on Ctrl-C (its context).
func TestDemoDashboard(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"demo", "--dashboard", "--duration", "2s", "--accounts", "40", "--concurrency", "4",
			"--unsafe-no-fsync", "-q", "--seed", "7"}, &out, &errb)
	}()
	testutil.Eventually(t, 90*time.Second, 50*time.Millisecond, func() error {
		select {
		case code := <-done:
			t.Fatalf("demo exited %d before Ctrl-C:\n%s%s", code, out.String(), errb.String())
		default:
		}
		if !bytes.Contains([]byte(out.String()), []byte("stays up for the dashboard")) {
			return fmt.Errorf("not held yet")
		}
		return nil
	})
	// The URLs printed once the run is over: n3 is up if its restart
	// finished before the run ended.
	held := out.String()[bytes.Index([]byte(out.String()), []byte("stays up for the dashboard")):]
	urls := map[string]string{}
	for _, m := range dashboardURL.FindAllStringSubmatch(held, -1) {
		urls[m[1]] = m[2]
	}
	if urls["n1"] == "" || urls["n2"] == "" {
		t.Fatalf("dashboard URLs %v in:\n%s", urls, out.String())
	}
	for id, u := range urls {
		testutil.Eventually(t, 20*time.Second, 50*time.Millisecond, func() error {
			resp, err := http.Get(u + "dashboard/api/state")
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			var f dashboard.Frame
			if err := json.NewDecoder(resp.Body).Decode(&f); err != nil {
				return err
			}
			if f.Self != id || len(f.Members) != 3 {
				return fmt.Errorf("%s: self %s, members %+v", u, f.Self, f.Members)
			}
			for _, m := range f.Members {
				if up := urls[m.ID] != ""; up != (m.State == dashboard.StateAlive) {
					return fmt.Errorf("%s: %s is %s", u, m.ID, m.State)
				}
			}
			return nil
		})
	}
	cancel()
	select {
	case code := <-done:
		if code != exitOK {
			t.Fatalf("demo exited %d:\n%s%s", code, out.String(), errb.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("demo did not stop after Ctrl-C")
	}
}

// A linearizability search that ran out of time is reported as unknown,
// the demo fails, and the summary says which flag gives it more time.
func TestDemoSummaryOfLinearizabilityTimeout(t *testing.T) {
	rep := check.Report{Invariants: []check.Invariant{
		{Name: check.InvHistory, Status: check.StatusPass},
		{Name: check.InvLinearizable, Status: check.StatusUnknown},
	}}
	var out bytes.Buffer
	printSummary(&out, demoOptions{noKill: true}, workload.Stats{}, failover{}, rep, time.Second)
	require.Regexp(t, `linearizable\s+\? unknown \(the search ran out of time: raise --lin-timeout\)`, out.String())
	require.Contains(t, out.String(), "FAIL: an invariant does not hold")
}
