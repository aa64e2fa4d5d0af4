package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"sort"
	"strings"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Status is the admin endpoint's JSON view of a node.
type Status struct {
	Node       string            `json:"node"`
	RemoteAddr string            `json:"remote_addr"`
	GossipAddr string            `json:"gossip_addr"`
	Lease      int64             `json:"lease"`
	LeaseValid bool              `json:"lease_valid"`
	Ready      bool              `json:"ready"`
	NotReady   string            `json:"not_ready,omitempty"` // why not, when not Ready
	Members    []Member          `json:"members"`
	Shards     []OwnedShard      `json:"shards"`
	Entities   int               `json:"active_entities"`
	Host       actors.HostStats  `json:"host"`
	Time       time.Time         `json:"time"`
	Extra      map[string]string `json:"extra,omitempty"`
}

// Member is one node as gossip and etcd see it: a registered node, or a
// gossip member alive but not registered. A registered node counts as
// live only through the gossip member that matches its registration (same
// node ID, lease, remote and gossip addresses).
type Member struct {
	ID         string `json:"id"`
	RemoteAddr string `json:"remote_addr"`
	// Alive: for a registered node, gossip shows its matching member alive
	// (the node counts as live); for one that is not, gossip shows it alive.
	Alive bool `json:"alive"`
	// Dead: gossip declared the registered node's matching member dead or
	// gone (its lease is a candidate for revocation).
	Dead       bool `json:"dead,omitempty"`
	Registered bool `json:"registered"`
	// Mismatch says why gossip does not vouch for the node ("not in
	// gossip", or how the gossip member and the registration differ).
	Mismatch string `json:"mismatch,omitempty"`
}

// OwnedShard is one shard held by the node.
type OwnedShard struct {
	Shard uint32 `json:"shard"`
	Epoch int64  `json:"epoch"`
}

// Status returns the node's current status. Before Start has returned,
// only Node, Time and NotReady are set.
func (n *Node) Status() Status {
	if !n.up.Load() {
		return Status{Node: n.cfg.NodeID, Time: time.Now().UTC(), NotReady: reason(n.Readiness())}
	}
	st := Status{
		Node: n.cfg.NodeID, RemoteAddr: n.tr.addr, GossipAddr: n.members.addr(),
		Lease: int64(n.place.Lease()), LeaseValid: n.place.Valid(), Time: time.Now().UTC(),
		Host: n.host.Stats(),
	}
	st.Entities = st.Host.Active
	if err := n.Readiness(); err != nil {
		st.NotReady = reason(err)
	} else {
		st.Ready = true
	}
	st.Members = n.members.describe(n.cfg.NodeID, n.place.Table().Nodes())
	for s, e := range n.place.Owned() {
		st.Shards = append(st.Shards, OwnedShard{Shard: s, Epoch: e})
	}
	sort.Slice(st.Shards, func(i, j int) bool { return st.Shards[i].Shard < st.Shards[j].Shard })
	return st
}

// Handler returns the admin HTTP handler:
//
//   - / and /status: the node's Status as JSON;
//   - /healthz: 200 "ok" while the node is up (Healthy), 503 once it
//     stopped: a liveness check;
//   - /readyz: 200 "ok" when the node is ready (see Readiness), else 503
//     with the reason on one line ("not ready: lease not valid"): a
//     readiness check;
//   - /metrics: Prometheus metrics;
//   - /debug/pprof/, when Config.Pprof is set.
//
// It may be mounted on a server of the caller's (Config.AdminAddr "")
// and serves before Start returns (then /readyz answers 503 "starting").
func (n *Node) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if !n.Healthy() {
			plain(w, http.StatusServiceUnavailable, "stopped")
			return
		}
		plain(w, http.StatusOK, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := n.Readiness(); err != nil {
			plain(w, http.StatusServiceUnavailable, "not ready: "+reason(err))
			return
		}
		plain(w, http.StatusOK, "ok")
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" && r.URL.Path != "/status" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(n.Status())
	})
	mux.Handle("/metrics", promhttp.HandlerFor(n.metrics.reg, promhttp.HandlerOpts{}))
	if n.cfg.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// plain writes a one-line text answer.
func plain(w http.ResponseWriter, code int, line string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = io.WriteString(w, line+"\n")
}

// reason returns a Readiness error without its "cluster: node not ready: "
// prefix.
func reason(err error) string {
	return strings.TrimPrefix(err.Error(), ErrNotReady.Error()+": ")
}

func (n *Node) startAdmin() error {
	ln, err := net.Listen("tcp", n.cfg.AdminAddr)
	if err != nil {
		return fmt.Errorf("cluster: admin endpoint %q: %w", n.cfg.AdminAddr, err)
	}
	n.adminLn = ln
	n.admin = &http.Server{Handler: n.Handler(), ReadHeaderTimeout: 5 * time.Second}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		if err := n.admin.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			n.log.Error("admin endpoint stopped", "err", err)
		}
	}()
	return nil
}
