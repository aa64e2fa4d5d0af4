package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/examples/bank/history"
	"github.com/ordo-actors/ordo/examples/bank/inproc"
	"github.com/ordo-actors/ordo/internal/testutil"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// grpc's and protoactor's process-wide background goroutines.
		goleak.IgnoreTopFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
		goleak.IgnoreAnyFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"),
		// A client that called a node while that node was paused or killed
		// leaves gRPC connections reconnecting after Close (the remote
		// transport's, not ours); reported, ignored until fixed.
		goleak.IgnoreTopFunction("google.golang.org/grpc.(*addrConn).resetTransportAndUnlock"),
	)
}

// runCLI runs the bank command line and returns its exit code, stdout and
// stderr.
func runCLI(t *testing.T, ctx context.Context, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(ctx, args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestUsageErrors(t *testing.T) {
	t.Setenv("ORDO_PG_URL", "")
	cases := []struct {
		args []string
		want string // in stderr
	}{
		{nil, "a command is required"},
		{[]string{"nope"}, "unknown command"},
		{[]string{"demo", "--bogus"}, "unknown flag: --bogus"},
		{[]string{"demo", "extra"}, "unexpected arguments"},
		{[]string{"demo", "--nodes", "1"}, "--nodes 1"},
		{[]string{"demo", "--nodes", "x"}, "invalid argument"},
		{[]string{"demo", "--store", "redis"}, `--store "redis"`},
		{[]string{"demo", "--store", "postgres"}, "needs --pg"},
		{[]string{"demo", "--duration", "0s"}, "duration"},
		{[]string{"demo", "--zipf", "-1"}, "zipf"},
		{[]string{"demo", "--read-ratio", "2"}, "read ratio"},
		{[]string{"demo", "--kill-at", "1.5"}, "--kill-at"},
		{[]string{"etcd", "--data-dir", "/tmp/x", "--listen-client", "http://127.0.0.1:0", "--listen-peer", "http://127.0.0.1:0"}, "--name is required"},
		{[]string{"etcd", "--name", "e1", "--data-dir", "/tmp/x", "--listen-client", "127.0.0.1:2379", "--listen-peer", "http://127.0.0.1:0"}, "--listen-client"},
		{[]string{"node", "--etcd", "http://127.0.0.1:1"}, "--id is required"},
		{[]string{"node", "--id", "n1"}, "--etcd is required"},
		{[]string{"node", "--id", "n1", "--etcd", "http://127.0.0.1:1", "--lease-ttl", "1500ms"}, "--lease-ttl"},
		{[]string{"node", "--id", "n1", "--etcd", "http://127.0.0.1:1", "--store", "postgres"}, "needs --pg"},
		{[]string{"node", "--id", "n1", "--etcd", "http://127.0.0.1:1", "--advertise-gossip", "localhost:7000"}, "AdvertiseGossipAddr"},
		{[]string{"node", "--id", "n1", "--etcd", "http://127.0.0.1:1", "--advertise-remote", "127.0.0.1:0"}, "AdvertiseRemoteAddr"},
		{[]string{"node", "--id", "n1", "--etcd", "http://127.0.0.1:1", "--gossip-key", "/nonexistent/gossip.key"}, "--gossip-key"},
		{[]string{"open", "--accounts", "10"}, "--etcd is required"},
		{[]string{"open", "--etcd", "http://127.0.0.1:1", "--accounts", "0"}, "--accounts 0"},
		{[]string{"open", "--etcd", "http://127.0.0.1:1", "--accounts", "10", "--balance", "-5"}, "--balance -5"},
		{[]string{"transfer", "--etcd", "e", "--from", "acct-000001", "--to", "acct-000002", "--amount", "5"}, "--id is required"},
		{[]string{"transfer", "--etcd", "e", "--id", "t1", "--from", "alice", "--to", "acct-000002", "--amount", "5"}, `--from "alice"`},
		{[]string{"transfer", "--etcd", "e", "--id", "t1", "--from", "acct-000001", "--to", "acct-000001", "--amount", "5"}, "are both"},
		{[]string{"transfer", "--etcd", "e", "--id", "t1", "--from", "acct-000001", "--to", "acct-000002", "--amount", "0"}, "--amount 0"},
		{[]string{"balance", "--etcd", "e"}, "--account"},
		{[]string{"transfer-status", "--etcd", "e"}, "--id is required"},
		{[]string{"transfer-status", "--etcd", "e", "--id", "x"}, "--from"},
		{[]string{"load", "--etcd", "e", "--accounts", "10"}, "--history is required"},
		{[]string{"load", "--etcd", "e", "--history", "h", "--concurrency", "0"}, "concurrency"},
		{[]string{"check", "--etcd", "e", "--accounts", "10"}, "--history is required"},
		{[]string{"bench", "--bogus"}, "flag provided but not defined"},
		{[]string{"bench", "--approaches", "nope"}, "unknown approach"},
		{[]string{"bench", "--concurrency", "0"}, "concurrency must be at least 1"},
		{[]string{"bench", "--concurrency", "abc"}, `"abc" is not a number`},
		{[]string{"bench", "--concurrency", "32,"}, "empty entry"},
		{[]string{"bench", "--duration", "0s"}, "duration must be positive"},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			code, _, stderr := runCLI(t, context.Background(), c.args...)
			if code != exitUsage {
				t.Fatalf("exit code %d, want %d; stderr:\n%s", code, exitUsage, stderr)
			}
			if !strings.Contains(stderr, c.want) {
				t.Fatalf("stderr does not mention %q:\n%s", c.want, stderr)
			}
		})
	}
}

func TestHelpExitsZero(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"demo", "--help"}, {"load", "-h"}} {
		if code, out, stderr := runCLI(t, context.Background(), args...); code != exitOK || out == "" {
			t.Fatalf("%v: exit %d, stdout %q, stderr %q", args, code, out, stderr)
		}
	}
}

func TestCheckOfMissingHistoryFails(t *testing.T) {
	code, _, stderr := runCLI(t, context.Background(), "check", "--etcd", "http://127.0.0.1:1", "--accounts", "10",
		"--history", filepath.Join(t.TempDir(), "none.jsonl"))
	if code != exitFailure || !strings.Contains(stderr, "reading the history") {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
}

// A short end-to-end run through the command line against an in-process
// cluster: open, load while a node crashes and restarts, then check.
func TestEndToEndLoadCrashCheck(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := inproc.Start(ctx, inproc.Config{Nodes: 3, Dir: t.TempDir(), UnsafeNoFsync: true, Shards: 32})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := cl.Close(ctx); err != nil {
			t.Error(err)
		}
	}()
	ep := strings.Join(cl.Endpoints(), ",")
	common := []string{"--etcd", ep, "--prefix", cl.Prefix()}

	code, out, stderr := runCLI(t, ctx, append([]string{"open", "--accounts", "50", "--balance", "100"}, common...)...)
	if code != exitOK {
		t.Fatalf("open: exit %d\n%s%s", code, out, stderr)
	}

	dir := t.TempDir()
	hist := filepath.Join(dir, "history.jsonl")
	type result struct {
		code        int
		out, stderr string
	}
	done := make(chan result, 1)
	go func() {
		code, out, stderr := runCLI(t, ctx, append([]string{"load", "--accounts", "50", "--duration", "4s",
			"--concurrency", "8", "--max-amount", "30", "--read-ratio", "0.2", "--seed", "42", "--op-timeout", "3s",
			"--history", hist, "-q"}, common...)...)
		done <- result{code, out, stderr}
	}()
	// Crash n3 once the load has made it write.
	testutil.Eventually(t, 30*time.Second, 10*time.Millisecond, func() error {
		if w := cl.Node(2).Host().Stats().Batch.Writes; w < 20 {
			return fmt.Errorf("the load made %d writes on n3, want 20", w)
		}
		return nil
	})
	cl.Kill(2)
	if err := cl.Restart(ctx, 2); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.code != exitOK {
		t.Fatalf("load: exit %d\n%s%s", r.code, r.out, r.stderr)
	}

	ops, err := history.ReadFile(hist)
	if err != nil {
		t.Fatalf("load wrote an invalid history: %v", err)
	}
	var transfers, reads, rejectedInsufficient int
	ids := map[string]bool{}
	for _, op := range ops {
		switch op.Op {
		case history.OpTransfer:
			transfers++
			if ids[op.ID] {
				t.Fatalf("transfer ID %s recorded twice", op.ID)
			}
			ids[op.ID] = true
			if op.Outcome == history.Rejected && history.IsInsufficientFunds(op.Error) {
				rejectedInsufficient++
			}
		case history.OpBalance:
			reads++
		}
	}
	if transfers == 0 || reads == 0 {
		t.Fatalf("history has %d transfers and %d reads", transfers, reads)
	}
	t.Logf("%d transfers (%d rejected for insufficient funds), %d reads", transfers, rejectedInsufficient, reads)

	report := filepath.Join(dir, "report.json")
	code, out, stderr = runCLI(t, ctx, append([]string{"check", "--accounts", "50", "--balance", "100",
		"--history", hist, "--report", report}, common...)...)
	if code != exitOK {
		t.Fatalf("check: exit %d\n%s%s", code, out, stderr)
	}
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		OK bool `json:"ok"`
	}
	if err := json.Unmarshal(b, &rep); err != nil || !rep.OK {
		t.Fatalf("report not ok (%v):\n%s", err, b)
	}

	// The single-call commands print JSON.
	code, out, stderr = runCLI(t, ctx, append([]string{"transfer", "--id", "manual-1", "--from", "acct-000001",
		"--to", "acct-000002", "--amount", "100000"}, common...)...)
	if code != exitOK || !strings.Contains(out, `"status": "rejected"`) || !strings.Contains(out, history.InsufficientFunds) {
		t.Fatalf("transfer: exit %d\n%s%s", code, out, stderr)
	}
	code, out, stderr = runCLI(t, ctx, append([]string{"transfer-status", "--id", "manual-1", "--from", "acct-000001"}, common...)...)
	if code != exitOK || !strings.Contains(out, `"status": "rejected"`) {
		t.Fatalf("transfer-status: exit %d\n%s%s", code, out, stderr)
	}
	code, out, stderr = runCLI(t, ctx, append([]string{"balance", "--account", "acct-000003"}, common...)...)
	if code != exitOK || !strings.Contains(out, `"balance"`) {
		t.Fatalf("balance: exit %d\n%s%s", code, out, stderr)
	}

	// A tampered history is caught: exit 1.
	bad := filepath.Join(dir, "bad.jsonl")
	w, err := history.Create(bad)
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range ops {
		if op.Op == history.OpTransfer && op.Outcome == history.OK {
			op.Outcome, op.Error = history.Rejected, "made up" // an applied transfer claimed to have no effect
		}
		if err := w.Append(op); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	code, out, stderr = runCLI(t, ctx, append([]string{"check", "--accounts", "50", "--balance", "100",
		"--history", bad}, common...)...)
	if code != exitFailure || !strings.Contains(out, `"ok": false`) {
		t.Fatalf("check of a tampered history: exit %d\n%s%s", code, out, stderr)
	}
}
