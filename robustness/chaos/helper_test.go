package chaos

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// The test binary doubles as the child processes of the tests: with
// CHAOS_HELPER set it runs a small stand-in instead of the tests.
func TestMain(m *testing.M) {
	switch os.Getenv("CHAOS_HELPER") {
	case "":
		goleak.VerifyTestMain(m,
			// grpc's and protoactor's process-wide background goroutines
			// (the etcd and cluster clients of a real run).
			goleak.IgnoreTopFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
			goleak.IgnoreAnyFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"),
		)
	case "node":
		os.Exit(fakeNode(os.Args[1:]))
	case "tree":
		os.Exit(tree(os.Args[1:]))
	default:
		fmt.Fprintln(os.Stderr, "unknown CHAOS_HELPER")
		os.Exit(3)
	}
}

// flagValue returns the value following name in args.
func flagValue(args []string, name string) string {
	for i, a := range args {
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// fakeNode stands in for `bank node`: it serves an admin endpoint whose
// status always holds shards 0-3 with a valid lease and whose /metrics
// report CHAOS_FENCED fenced writes and one late-fenced one, until
// SIGTERM. Its --remote port
// serves the same.
func fakeNode(args []string) int {
	id, admin := flagValue(args, "--id"), flagValue(args, "--admin")
	remote := flagValue(args, "--remote")
	fenced := os.Getenv("CHAOS_FENCED")
	fmt.Printf("fake node %s args %q\n", id, args)
	mux := http.NewServeMux()
	mux.HandleFunc("/status", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"node":%q,"lease_valid":true,"shards":[{"shard":0,"epoch":1},{"shard":1,"epoch":1},{"shard":2,"epoch":1},{"shard":3,"epoch":1}]}`, id)
	})
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "# HELP ordo_fenced_writes_total Records rejected by storage fencing.\n# TYPE ordo_fenced_writes_total counter\nordo_fenced_writes_total %s\nordo_fenced_writes_total_other 99\nordo_store_late_fenced_writes_total 1\n", fenced)
	})
	srv := &http.Server{Addr: admin, Handler: mux, ReadHeaderTimeout: time.Second}
	go func() {
		rs := &http.Server{Addr: remote, Handler: mux, ReadHeaderTimeout: time.Second}
		if err := rs.ListenAndServe(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	go func() {
		<-sig
		fmt.Println("fake node: SIGTERM, exiting")
		os.Exit(0)
	}()
	if err := srv.ListenAndServe(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// tree starts a grandchild (sleep), writes its PID to the file args[0] and
// sleeps: killing its process group must take the grandchild too.
func tree(args []string) int {
	c := exec.Command("sleep", "60")
	if err := c.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := os.WriteFile(args[0], []byte(strconv.Itoa(c.Process.Pid)), 0o644); err != nil {
		return 1
	}
	fmt.Println("tree: started grandchild")
	_ = c.Wait()
	return 0
}

// alive reports whether pid is a live (not zombie) process.
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// procState returns the state letter of pid from /proc ("" if gone).
func procState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return ""
	}
	return s[i+2 : i+3]
}
