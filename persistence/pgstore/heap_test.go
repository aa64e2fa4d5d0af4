package pgstore_test

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	pgstore "github.com/ordo-actors/ordo/persistence/pgstore"
	"github.com/ordo-actors/ordo/persistence/pgstore/pgtest"
)

// serverStat returns the fields of /proc/<pid>/stat after the command,
// and false when pid is not a PostgreSQL server process on this machine
// (a server elsewhere, or in another PID namespace).
func serverStat(tb testing.TB, pid int) ([]string, bool) {
	tb.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, false
	}
	// pid (comm) state ppid ...: the command may hold spaces.
	s := string(b)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open || !strings.HasPrefix(s[open+1:end], "postgres") {
		return nil, false
	}
	f := strings.Fields(s[end+1:])
	require.Greater(tb, len(f), 12, "short /proc/%d/stat: %q", pid, s)
	return f, true
}

// statField parses field i of serverStat's fields.
func statField(tb testing.TB, f []string, i int) uint64 {
	tb.Helper()
	n, err := strconv.ParseUint(f[i], 10, 64)
	require.NoError(tb, err, "field %d of /proc/<pid>/stat: %q", i, f)
	return n
}

// minorFaults returns the minor page faults of server process pid so
// far, and false when serverStat cannot read it.
func minorFaults(t *testing.T, pid int) (uint64, bool) {
	f, ok := serverStat(t, pid)
	if !ok {
		return 0, false
	}
	return statField(t, f, 7), true // minflt: the 10th field
}

// sorts is a statement whose executor memory is like a Save's: many
// blocks under glibc's mmap threshold (128 KiB), about a megabyte in all,
// held until the statement ends (each sort's state: 40 of them).
func sorts() string {
	var b strings.Builder
	b.WriteString("SELECT 0")
	for i := range 40 {
		fmt.Fprintf(&b, ", (SELECT max(g) FROM (SELECT g FROM generate_series(1, %d) g ORDER BY g DESC LIMIT 1000) s%d)", 200+i, i)
	}
	return b.String()
}

// A server process frees a statement's executor memory when the
// statement ends; glibc gives it back to the kernel past its trim
// threshold (128 KiB at first), and the next statement faults it in
// again, page by page. The store's connections are warmed
// (Config.BackendHeap) so that their server processes keep it. The test
// counts the page faults of the server process behind a one-connection
// store over 20 runs of a statement that needs about a megabyte: first
// with the warm-up skipped, to show the faults it prevents, then with
// the default.
func TestConnectionsKeepTheirServerProcessHeap(t *testing.T) {
	url, schema := pgtest.URL(t), pgtest.Schema(t)
	setup := open(t, schema) // the schema, on a connection of its own
	setup.Close()
	const runs = 20
	sql := sorts()
	faults := func(heap int) (uint64, bool) {
		cfg := pgstore.DefaultConfig()
		cfg.URL, cfg.Schema, cfg.MaxConns, cfg.BackendHeap = url, schema, 1, heap
		s, err := pgstore.Open(t.Context(), cfg)
		require.NoError(t, err)
		defer s.Close()
		ctx := t.Context()
		require.NoError(t, pgstore.Exec(ctx, s, sql)) // plans it, fills the caches
		pid, err := pgstore.BackendPID(ctx, s)
		require.NoError(t, err)
		before, ok := minorFaults(t, pid)
		if !ok {
			return 0, false
		}
		for range runs {
			require.NoError(t, pgstore.Exec(ctx, s, sql))
		}
		after, _ := minorFaults(t, pid)
		return after - before, true
	}
	cold, ok := faults(-1)
	if !ok {
		t.Skip("the server's processes are not visible on this machine")
	}
	t.Logf("page faults of the server process over %d statements: %d without the warm-up", runs, cold)
	if cold < 50*runs {
		t.Skip("without the warm-up, the server process kept its heap here (another C library, or tuned)")
	}
	warm, _ := faults(0)
	t.Logf("... and %d with it", warm)
	require.Less(t, 4*warm, cold, "a warmed server process faults its heap in again on every statement")
}
