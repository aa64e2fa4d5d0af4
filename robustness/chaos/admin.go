package chaos

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The node counters of records rejected by storage fencing: as the node's
// Save learned it, and (etcd store) after the Save had already given the
// write up as unknown, its process having been stopped past the store's
// request timeout, say.
const (
	fencedMetric     = "ordo_fenced_writes_total"
	lateFencedMetric = "ordo_store_late_fenced_writes_total"
)

// parseCounter sums every sample of metric name in a Prometheus text
// exposition (all label sets). found is false when no sample is present.
func parseCounter(r io.Reader, name string) (sum float64, found bool, err error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		switch {
		case strings.HasPrefix(rest, "{"):
			end := strings.LastIndexByte(rest, '}')
			if end < 0 {
				return 0, false, fmt.Errorf("chaos: bad metric line %q", line)
			}
			rest = rest[end+1:]
		case strings.HasPrefix(rest, " "), strings.HasPrefix(rest, "\t"):
		default:
			continue // a longer metric name sharing the prefix
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			return 0, false, fmt.Errorf("chaos: bad metric line %q", line)
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil || math.IsNaN(v) {
			return 0, false, fmt.Errorf("chaos: bad metric value in %q", line)
		}
		sum += v
		found = true
	}
	return sum, found, sc.Err()
}

// adminClient reads nodes' admin endpoints.
type adminClient struct {
	http *http.Client
}

func newAdminClient() *adminClient {
	return &adminClient{http: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}}
}

func (a *adminClient) get(ctx context.Context, addr, path string, timeout time.Duration) (*http.Response, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		cancel()
		return nil, err
	}
	resp, err := a.http.Do(req)
	if err != nil {
		cancel()
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		cancel()
		return nil, fmt.Errorf("chaos: %s%s: %s", addr, path, resp.Status)
	}
	resp.Body = readCloser{resp.Body, cancel}
	return resp, nil
}

type readCloser struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (r readCloser) Close() error { err := r.ReadCloser.Close(); r.cancel(); return err }

// fenced reads the records rejected by fencing from a node's /metrics:
// ordo_fenced_writes_total plus, when the node has it,
// ordo_store_late_fenced_writes_total.
func (a *adminClient) fenced(ctx context.Context, addr string) (int64, error) {
	resp, err := a.get(ctx, addr, "/metrics", time.Second)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return 0, fmt.Errorf("chaos: %s/metrics: %w", addr, err)
	}
	v, found, err := parseCounter(bytes.NewReader(body), fencedMetric)
	if err != nil {
		return 0, err
	}
	if !found {
		return 0, fmt.Errorf("chaos: %s: no %s in /metrics", addr, fencedMetric)
	}
	late, _, err := parseCounter(bytes.NewReader(body), lateFencedMetric)
	if err != nil {
		return 0, err
	}
	return int64(v + late), nil
}

// nodeStatus is the part of a node's admin status JSON the orchestrator
// reads (cluster.Status).
type nodeStatus struct {
	Node       string `json:"node"`
	LeaseValid bool   `json:"lease_valid"`
	Shards     []struct {
		Shard uint32 `json:"shard"`
		Epoch int64  `json:"epoch"`
	} `json:"shards"`
}

// status reads a node's admin status.
func (a *adminClient) status(ctx context.Context, addr string) (nodeStatus, error) {
	var st nodeStatus
	resp, err := a.get(ctx, addr, "/status", time.Second)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return st, fmt.Errorf("chaos: %s/status: %w", addr, err)
	}
	return st, nil
}

// fencedTally keeps the last fenced-writes count seen from each
// incarnation of each node: a restarted node starts from zero again, so the
// total is the sum over incarnations. Safe for concurrent use.
type fencedTally struct {
	mu   sync.Mutex
	last map[string]map[int]int64 // node -> incarnation -> count
}

func newFencedTally() *fencedTally { return &fencedTally{last: map[string]map[int]int64{}} }

// observe records count for a node's incarnation; counters only grow, so a
// smaller value (a late answer) is ignored.
func (t *fencedTally) observe(node string, incarnation int, count int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.last[node]
	if m == nil {
		m = map[int]int64{}
		t.last[node] = m
	}
	if prev, ok := m[incarnation]; !ok || count > prev {
		m[incarnation] = count
	}
}

// byNode returns each node's total over its incarnations, and the sum.
func (t *fencedTally) byNode() (map[string]int64, int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[string]int64{}
	var sum int64
	for node, m := range t.last {
		for _, v := range m {
			out[node] += v
			sum += v
		}
	}
	return out, sum
}
