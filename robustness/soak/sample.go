package soak

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/ordo-actors/ordo/examples/bank/ledger"
	pgstore "github.com/ordo-actors/ordo/persistence/pgstore"
	"github.com/ordo-actors/ordo/robustness/chaos"
	"github.com/ordo-actors/ordo/robustness/history"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The series a soak samples.
const (
	// Per process (nodes and etcd members), from /proc.
	seriesRSS = "rss_bytes"
	seriesFDs = "open_fds"
	// Per node, from its admin endpoint.
	seriesGoroutines = "goroutines"
	// The Go runtime's live heap (go_gc_heap_live_bytes on /metrics):
	// what the last garbage collection found in use, without the memory
	// the runtime keeps, which RSS also counts.
	seriesHeapLive = "heap_live_bytes"
	seriesActive   = "active_entities"
	seriesDedup    = "dedup_entries"
	// Per etcd member: the size of its database file (DbSize, what etcd's
	// space quota limits).
	seriesEtcdDB = "etcd_db_bytes"
	// Of the cluster: the transfer IDs accounts hold (Forgets not yet
	// applied), the keys under the cluster's etcd prefix other than
	// transfer records and the accounts' journals, and the transfer
	// records in the store.
	seriesPending   = "pending_forgets"
	seriesEtcdKeys  = "etcd_keys"
	seriesTransfers = "transfer_records"
)

// clusterWide names the process of the cluster's series.
const clusterWide = "cluster"

type seriesKey struct{ name, process string }

// sampler is the soak's chaos.Observer: it reads every series every
// interval from the start of the load until the check has run, then waits
// for the pending Forgets to drain. Its methods are safe for concurrent
// use.
type sampler struct {
	every    time.Duration
	drain    time.Duration
	procRoot string // /proc
	http     *http.Client
	logf     func(format string, args ...any)

	mu      sync.Mutex
	start   time.Time
	points  map[seriesKey][]Point
	starts  map[string]map[int]float64 // process -> incarnation -> start, s since the load started
	members map[string]bool            // the etcd members among the processes
	loadEnd float64                    // s since the load started; 0 until the load exited
	drained *Drain
}

// Drain is what became of the pending Forgets after the check.
type Drain struct {
	// Pending is the number of transfer IDs accounts still held at the
	// end of the drain (-1 when they could not be read).
	Pending int `json:"pending"`
	// AtS is when that was read, in seconds since the load started.
	AtS float64 `json:"at_s"`
	// Leftover lists up to 20 of them ("debit ID", "credit ID" or "hold ID").
	Leftover []string `json:"leftover,omitempty"`
}

func newSampler(every, drain time.Duration, logf func(string, ...any)) *sampler {
	return &sampler{every: every, drain: drain, procRoot: "/proc", logf: logf,
		http:   &http.Client{Transport: &http.Transport{DisableKeepAlives: true}},
		points: map[seriesKey][]Point{}, starts: map[string]map[int]float64{}, members: map[string]bool{}}
}

var _ chaos.Observer = (*sampler)(nil)

// Observe implements chaos.Observer.
func (s *sampler) Observe(ctx context.Context, c *chaos.Cluster, checked <-chan struct{}) {
	s.mu.Lock()
	s.start = c.LoadStart()
	s.mu.Unlock()
	t := time.NewTicker(s.every)
	defer t.Stop()
	loadDone := c.LoadDone()
	for {
		s.sample(ctx, c)
		select {
		case <-ctx.Done():
			return
		case <-checked:
			s.finish(ctx, c)
			return
		case <-loadDone:
			s.mu.Lock()
			s.loadEnd = s.since(time.Now())
			s.mu.Unlock()
			loadDone = nil // sample now, then on the ticker
		case <-t.C:
		}
	}
}

// since is t in seconds since the load started.
func (s *sampler) since(t time.Time) float64 { return t.Sub(s.start).Seconds() }

func (s *sampler) record(name, process string, at, v float64, inc int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := seriesKey{name, process}
	s.points[k] = append(s.points[k], Point{At: at, V: v, Inc: inc})
}

// sample reads every series once, each read bounded so that a stopped or
// cut process delays the round by seconds at most.
func (s *sampler) sample(ctx context.Context, c *chaos.Cluster) {
	ctx, cancel := context.WithTimeout(ctx, max(s.every, 10*time.Second))
	defer cancel()
	now := time.Now()
	s.mu.Lock()
	at := s.since(now)
	s.mu.Unlock()
	procs := c.Processes()
	var wg sync.WaitGroup
	for _, p := range procs {
		if p.PID == 0 {
			continue
		}
		s.mu.Lock()
		if s.starts[p.Name] == nil {
			s.starts[p.Name] = map[int]float64{}
		}
		s.starts[p.Name][p.Incarnation] = s.since(p.Started)
		s.members[p.Name] = !p.Node
		s.mu.Unlock()
		wg.Go(func() { s.sampleProcess(ctx, c, p, at) })
	}
	wg.Go(func() { s.sampleKeys(ctx, c, at) })
	wg.Go(func() {
		if n, _, err := s.pending(ctx, procs, c.Accounts()); err == nil {
			s.record(seriesPending, clusterWide, at, float64(n), 0)
		} else {
			s.logf("%6.1fs pending forgets not read: %v", at, err)
		}
	})
	wg.Wait()
	s.logf("%6.1fs sample: %s", at, s.line(at))
}

// line summarises the sample taken at at.
func (s *sampler) line(at float64) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var parts []string
	for _, name := range []string{seriesRSS, seriesHeapLive, seriesGoroutines, seriesActive, seriesDedup, seriesPending, seriesEtcdKeys, seriesTransfers} {
		var vs []string
		var procs []string
		for k := range s.points {
			if k.name == name {
				procs = append(procs, k.process)
			}
		}
		sort.Strings(procs)
		for _, p := range procs {
			pts := s.points[seriesKey{name, p}]
			if last := pts[len(pts)-1]; last.At == at {
				v := num(last.V)
				if name == seriesRSS || name == seriesHeapLive {
					v = fmt.Sprintf("%.0fM", last.V/(1<<20))
				}
				vs = append(vs, v)
			}
		}
		if len(vs) > 0 {
			parts = append(parts, fmt.Sprintf("%s %s", strings.TrimSuffix(name, "_bytes"), strings.Join(vs, "/")))
		}
	}
	return strings.Join(parts, ", ")
}

// sampleProcess reads a process's RSS and descriptors and, for a node
// that is not stopped, its status and goroutines; for an etcd member, its
// database size.
func (s *sampler) sampleProcess(ctx context.Context, c *chaos.Cluster, p chaos.Process, at float64) {
	if rss, err := readRSS(s.procRoot, p.PID); err == nil {
		s.record(seriesRSS, p.Name, at, float64(rss), p.Incarnation)
	}
	if n, err := countFDs(s.procRoot, p.PID); err == nil {
		s.record(seriesFDs, p.Name, at, float64(n), p.Incarnation)
	}
	if p.Stopped {
		return
	}
	if !p.Node {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if st, err := c.Etcd().Status(sctx, p.ClientURL); err == nil {
			s.record(seriesEtcdDB, p.Name, at, float64(st.DbSize), p.Incarnation)
		}
		return
	}
	if body, err := s.get(ctx, p.Admin, "/status"); err == nil {
		if active, dedup, err := parseStatus(strings.NewReader(body)); err == nil {
			s.record(seriesActive, p.Name, at, float64(active), p.Incarnation)
			s.record(seriesDedup, p.Name, at, float64(dedup), p.Incarnation)
		} else {
			s.logf("%6.1fs %s: %v", at, p.Name, err)
		}
	}
	if body, err := s.get(ctx, p.Admin, "/metrics"); err == nil {
		if v, err := parseMetric(strings.NewReader(body), "go_gc_heap_live_bytes"); err == nil {
			s.record(seriesHeapLive, p.Name, at, v, p.Incarnation)
		}
	}
	if body, err := s.get(ctx, p.Admin, "/debug/pprof/goroutine?debug=1"); err == nil {
		if n, err := parseGoroutines(strings.NewReader(body)); err == nil {
			s.record(seriesGoroutines, p.Name, at, float64(n), p.Incarnation)
		}
	}
}

// get reads path from a node's admin endpoint, in at most 2 seconds.
func (s *sampler) get(ctx context.Context, admin, path string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+admin+path, nil)
	if err != nil {
		return "", err
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("soak: %s%s: %s", admin, path, resp.Status)
	}
	return string(b), nil
}

// sampleKeys counts the keys under the cluster's etcd prefix and the
// transfer records (in etcd, or in PostgreSQL with the postgres store).
// With the etcd store, the keys of the accounts' journals (their events,
// which the bank keeps: its statements) are not counted either.
func (s *sampler) sampleKeys(ctx context.Context, c *chaos.Cluster, at float64) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	all, err := c.Etcd().Get(ctx, c.Prefix()+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		s.logf("%6.1fs etcd keys not counted: %v", at, err)
		return
	}
	transfers, journal := int64(-1), int64(0)
	switch c.Store() {
	case "etcd":
		// The etcd store's layout: P/store/entities/<kind, path-escaped>/<id>.
		tr, err := c.Etcd().Get(ctx, c.Prefix()+"/store/entities/"+url.PathEscape(ledger.Transfer.Name())+"/",
			clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			s.logf("%6.1fs transfer records not counted: %v", at, err)
			return
		}
		transfers = tr.Count
		// P/store/journal/<kind>/<id>\x00<seq>: the events of every account.
		j, err := c.Etcd().Get(ctx, c.Prefix()+"/store/journal/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			s.logf("%6.1fs journal keys not counted: %v", at, err)
			return
		}
		journal = j.Count
	case "postgres":
		if n, err := countPGTransfers(ctx, c.PGURL()); err == nil {
			transfers = n
		}
	}
	if c.Store() == "etcd" {
		s.record(seriesEtcdKeys, clusterWide, at, float64(all.Count-transfers-journal), 0)
	} else {
		s.record(seriesEtcdKeys, clusterWide, at, float64(all.Count), 0)
	}
	if transfers >= 0 {
		s.record(seriesTransfers, clusterWide, at, float64(transfers), 0)
	}
}

// countPGTransfers counts the transfer records in the postgres store.
func countPGTransfers(ctx context.Context, pgURL string) (int64, error) {
	conn, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	var n int64
	q := "SELECT count(*) FROM " + pgx.Identifier{pgstore.DefaultSchema, "entities"}.Sanitize() + " WHERE kind = $1"
	err = conn.QueryRow(ctx, q, ledger.Transfer.Name()).Scan(&n)
	return n, err
}

// pending reads every account's durable record through the entity
// inspector of the nodes that answer (any node reads any record) and
// returns the number of transfer IDs they hold, and up to 20 of them. It
// fails when some account could not be read.
func (s *sampler) pending(ctx context.Context, procs []chaos.Process, accounts int) (int, []string, error) {
	var admins []string
	for _, p := range procs {
		if p.Node && p.PID != 0 && !p.Stopped {
			admins = append(admins, p.Admin)
		}
	}
	if len(admins) == 0 {
		return 0, nil, fmt.Errorf("soak: no node to ask")
	}
	kind := url.PathEscape(ledger.Account.Name())
	var (
		mu     sync.Mutex
		total  int
		ids    []string
		failed error
	)
	work := make(chan int)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range work {
				acct := history.AccountName(i)
				var err error
				for try := range len(admins) {
					var body string
					if body, err = s.get(ctx, admins[(i+try)%len(admins)], "/entities/"+kind+"/"+url.PathEscape(acct)); err != nil {
						continue
					}
					var held []string
					if held, err = pendingForgets(strings.NewReader(body)); err == nil {
						mu.Lock()
						total += len(held)
						for _, id := range held {
							if len(ids) < 20 {
								ids = append(ids, acct+": "+id)
							}
						}
						mu.Unlock()
						break
					}
				}
				if err != nil {
					mu.Lock()
					failed = fmt.Errorf("soak: %s: %w", acct, err)
					mu.Unlock()
				}
			}
		})
	}
	for i := range accounts {
		select {
		case work <- i:
		case <-ctx.Done():
		}
	}
	close(work)
	wg.Wait()
	if failed == nil && ctx.Err() != nil {
		failed = ctx.Err()
	}
	sort.Strings(ids)
	return total, ids, failed
}

// finish waits, after the check, for the accounts to forget every
// transfer (reading them every second for up to drain), then samples
// once more.
func (s *sampler) finish(ctx context.Context, c *chaos.Cluster) {
	deadline := time.Now().Add(s.drain)
	d := Drain{Pending: -1}
	for {
		n, ids, err := s.pending(ctx, c.Processes(), c.Accounts())
		s.mu.Lock()
		at := s.since(time.Now())
		s.mu.Unlock()
		if err == nil {
			s.record(seriesPending, clusterWide, at, float64(n), 0)
			d = Drain{Pending: n, AtS: at, Leftover: ids}
			if n == 0 {
				break
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		t := time.NewTimer(time.Second)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	s.logf("%6.1fs after the check: %d pending forgets", d.AtS, d.Pending)
	s.mu.Lock()
	s.drained = &d
	s.mu.Unlock()
	s.sample(ctx, c)
}
