package soak

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// parseVmRSS returns the resident set size in a /proc/<pid>/status file,
// in bytes (the VmRSS line, which the kernel gives in kB).
func parseVmRSS(r io.Reader) (int64, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("soak: bad VmRSS line %q", sc.Text())
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || kb < 0 {
			return 0, fmt.Errorf("soak: bad VmRSS line %q", sc.Text())
		}
		return kb << 10, nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("soak: no VmRSS line (a zombie?)")
}

// readRSS reads the resident set size of process pid under procRoot
// (/proc).
func readRSS(procRoot string, pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("%s/%d/status", procRoot, pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return parseVmRSS(f)
}

// countFDs counts the open file descriptors of process pid under procRoot:
// the entries of /proc/<pid>/fd.
func countFDs(procRoot string, pid int) (int, error) {
	d, err := os.Open(fmt.Sprintf("%s/%d/fd", procRoot, pid))
	if err != nil {
		return 0, err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	return len(names), err
}

// parseGoroutines reads the goroutine count from the first line of a
// /debug/pprof/goroutine?debug=1 answer: "goroutine profile: total N".
func parseGoroutines(r io.Reader) (int, error) {
	line, err := bufio.NewReader(io.LimitReader(r, 4096)).ReadString('\n')
	if err != nil && line == "" {
		return 0, fmt.Errorf("soak: empty goroutine profile: %w", err)
	}
	rest, ok := strings.CutPrefix(strings.TrimSpace(line), "goroutine profile: total ")
	n, err := strconv.Atoi(rest)
	if !ok || err != nil || n < 0 {
		return 0, fmt.Errorf("soak: bad goroutine profile header %q", strings.TrimSpace(line))
	}
	return n, nil
}

// parseMetric reads the value of the unlabelled metric name from a
// Prometheus text exposition (a node's /metrics).
func parseMetric(r io.Reader, name string) (float64, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), name+" ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
		if err != nil {
			return 0, fmt.Errorf("soak: metric %s: bad value %q", name, rest)
		}
		return v, nil
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("soak: reading metrics: %w", err)
	}
	return 0, fmt.Errorf("soak: no metric %s", name)
}

// nodeStatus is the part of a node's /status (cluster.Status) the soak
// reads.
type nodeStatus struct {
	Active int `json:"active_entities"`
	Host   struct {
		DedupEntries *int64 // actors.HostStats, which has no JSON tags
	} `json:"host"`
}

// parseStatus reads the active entities and dedup entries of a /status
// answer.
func parseStatus(r io.Reader) (active, dedup int64, err error) {
	var st nodeStatus
	if err := json.NewDecoder(r).Decode(&st); err != nil {
		return 0, 0, fmt.Errorf("soak: status: %w", err)
	}
	if st.Host.DedupEntries == nil {
		return 0, 0, fmt.Errorf("soak: status has no host.DedupEntries (a bank binary older than the soak?)")
	}
	return int64(st.Active), *st.Host.DedupEntries, nil
}

// pendingForgets reads an account from the entity inspector's answer
// (/entities/{kind}/{id}) and returns the IDs of the transfers it still
// holds in its debits, credits and held credits: those the saga has not
// yet told it to forget (or to cancel).
func pendingForgets(r io.Reader) ([]string, error) {
	var e struct {
		Record struct {
			Found bool `json:"found"`
			State struct {
				Debits  map[string]json.RawMessage `json:"debits"`
				Credits map[string]json.RawMessage `json:"credits"`
				Held    map[string]json.RawMessage `json:"held"`
			} `json:"state"`
		} `json:"record"`
	}
	if err := json.NewDecoder(r).Decode(&e); err != nil {
		return nil, fmt.Errorf("soak: entity inspector: %w", err)
	}
	var ids []string
	for id := range e.Record.State.Debits {
		ids = append(ids, "debit "+id)
	}
	for id := range e.Record.State.Credits {
		ids = append(ids, "credit "+id)
	}
	for id := range e.Record.State.Held {
		ids = append(ids, "hold "+id)
	}
	return ids, nil
}
