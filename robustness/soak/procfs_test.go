package soak

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const procStatus = `Name:	bank
Umask:	0022
State:	S (sleeping)
VmPeak:	 2045616 kB
VmSize:	 2045616 kB
VmHWM:	   91236 kB
VmRSS:	   81920 kB
RssAnon:	   40960 kB
Threads:	12
`

func TestParseVmRSS(t *testing.T) {
	got, err := parseVmRSS(strings.NewReader(procStatus))
	if err != nil || got != 81920<<10 {
		t.Fatalf("parseVmRSS = %d, %v; want %d", got, err, 81920<<10)
	}
	for _, bad := range []string{"Name:\tbank\n", "VmRSS:\t 12 MB\n", "VmRSS:\tlots kB\n", "VmRSS:\n"} {
		if _, err := parseVmRSS(strings.NewReader(bad)); err == nil {
			t.Errorf("parseVmRSS(%q) did not fail", bad)
		}
	}
}

// readRSS and countFDs read a /proc laid out like Linux's.
func TestReadProc(t *testing.T) {
	root := t.TempDir()
	fd := filepath.Join(root, "42", "fd")
	if err := os.MkdirAll(fd, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "42", "status"), []byte(procStatus), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"0", "1", "2", "7"} {
		if err := os.Symlink("/dev/null", filepath.Join(fd, n)); err != nil {
			t.Fatal(err)
		}
	}
	if rss, err := readRSS(root, 42); err != nil || rss != 81920<<10 {
		t.Fatalf("readRSS = %d, %v", rss, err)
	}
	if n, err := countFDs(root, 42); err != nil || n != 4 {
		t.Fatalf("countFDs = %d, %v; want 4", n, err)
	}
	if _, err := readRSS(root, 43); err == nil {
		t.Fatal("readRSS of a missing process did not fail")
	}
	// This process, through the real /proc.
	if rss, err := readRSS("/proc", os.Getpid()); err != nil || rss <= 0 {
		t.Fatalf("own RSS = %d, %v", rss, err)
	}
	if n, err := countFDs("/proc", os.Getpid()); err != nil || n < 3 {
		t.Fatalf("own descriptors = %d, %v", n, err)
	}
}

func TestParseGoroutines(t *testing.T) {
	n, err := parseGoroutines(strings.NewReader("goroutine profile: total 231\n12 @ 0x43e0ce 0x40b2c5\n#\t0x4\n"))
	if err != nil || n != 231 {
		t.Fatalf("parseGoroutines = %d, %v", n, err)
	}
	for _, bad := range []string{"", "404 page not found\n", "goroutine profile: total many\n"} {
		if _, err := parseGoroutines(strings.NewReader(bad)); err == nil {
			t.Errorf("parseGoroutines(%q) did not fail", bad)
		}
	}
}

func TestParseMetric(t *testing.T) {
	const exposition = `# HELP go_gc_heap_live_bytes Heap memory occupied by live objects.
# TYPE go_gc_heap_live_bytes gauge
go_gc_heap_live_bytes 2.4117248e+07
go_gc_heap_live_bytes_total{kind="x"} 5
go_goroutines 231
`
	v, err := parseMetric(strings.NewReader(exposition), "go_gc_heap_live_bytes")
	if err != nil || v != 24117248 {
		t.Fatalf("parseMetric = %v, %v; want 24117248", v, err)
	}
	if v, err := parseMetric(strings.NewReader(exposition), "go_goroutines"); err != nil || v != 231 {
		t.Fatalf("parseMetric(go_goroutines) = %v, %v; want 231", v, err)
	}
	for _, bad := range []string{"", "404 page not found\n", "go_gc_heap_live_bytes many\n", "go_gc_heap_live_bytes_total 3\n"} {
		if _, err := parseMetric(strings.NewReader(bad), "go_gc_heap_live_bytes"); err == nil {
			t.Errorf("parseMetric(%q) did not fail", bad)
		}
	}
}

func TestParseStatus(t *testing.T) {
	active, dedup, err := parseStatus(strings.NewReader(`{"node":"n1","active_entities":120,
		"host":{"Active":120,"DedupEntries":3456,"Batch":{"Saves":9}}}`))
	if err != nil || active != 120 || dedup != 3456 {
		t.Fatalf("parseStatus = %d, %d, %v", active, dedup, err)
	}
	// A node too old to count its dedup entries is an error, not zero.
	if _, _, err := parseStatus(strings.NewReader(`{"active_entities":1,"host":{"Active":1}}`)); err == nil {
		t.Fatal("a status without DedupEntries passed")
	}
}

func TestPendingForgets(t *testing.T) {
	ids, err := pendingForgets(strings.NewReader(`{"kind":"account","id":"acct-000001","record":{"found":true,
		"state":{"opened":true,"balance":"950","debits":{"t-1":"50","t-2":"5"},"credits":{"t-9":"1"},
		"held":{"t-7":{"amount":"3","source":"acct-000002","activation":"12"}}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(ids)
	if want := []string{"credit t-9", "debit t-1", "debit t-2", "hold t-7"}; !slices.Equal(ids, want) {
		t.Fatalf("pending %v, want %v", ids, want)
	}
	ids, err = pendingForgets(strings.NewReader(`{"record":{"found":true,"state":{"debits":{},"credits":{}}}}`))
	if err != nil || len(ids) != 0 {
		t.Fatalf("empty maps: %v, %v", ids, err)
	}
	if _, err := pendingForgets(strings.NewReader(`not json`)); err == nil {
		t.Fatal("garbage passed")
	}
}
