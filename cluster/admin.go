package cluster

import (
	"crypto/subtle"
	"crypto/tls"
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
	"github.com/ordo-actors/ordo/ordotls"
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
	Transport  TransportStats    `json:"transport"`
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
		Host: n.host.Stats(), Transport: n.tr.stats(),
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
//   - /status: the node's Status as JSON (a stable format);
//   - /: the live web dashboard (package dashboard), with its data under
//     /dashboard/, and the entity inspector, /entities/{kind}/{id} (JSON);
//   - /healthz: 200 "ok" while the node is up (Healthy), 503 once it
//     stopped: a liveness check;
//   - /readyz: 200 "ok" when the node is ready (see Readiness), else 503
//     with the reason on one line ("not ready: lease not valid"): a
//     readiness check;
//   - /metrics: Prometheus metrics;
//   - /debug/pprof/, when Config.Pprof is set.
//
// With Config.AdminToken set, every path but /healthz and /readyz
// requires it as a bearer token (401 otherwise). The handler may be
// mounted on a server of the caller's (Config.AdminAddr "") and serves
// before Start returns (then /readyz answers 503 "starting").
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
	mux.HandleFunc("/status", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(n.Status())
	})
	mux.Handle("/", n.dashboard().Handler())
	mux.Handle("/metrics", promhttp.HandlerFor(n.metrics.reg, promhttp.HandlerOpts{}))
	if n.cfg.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return requireToken(mux, n.cfg.AdminToken)
}

// minAdminToken is the length, in bytes, of the shortest AdminToken.
const minAdminToken = 16

// probe reports whether path is open to anyone: the liveness and
// readiness checks, which probes call without credentials.
func probe(path string) bool { return path == "/healthz" || path == "/readyz" }

// requireToken lets through probes, and other requests only with
// "Authorization: Bearer <token>"; with no token, everything.
func requireToken(h http.Handler, token string) http.Handler {
	if token == "" {
		return h
	}
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !probe(r.URL.Path) && subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="ordo admin"`)
			plain(w, http.StatusUnauthorized, "unauthorized")
			return
		}
		h.ServeHTTP(w, r)
	})
}

// requireClientCert lets through probes, and other requests only with a
// client certificate that verified.
func requireClientCert(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !probe(r.URL.Path) && (r.TLS == nil || len(r.TLS.VerifiedChains) == 0) {
			plain(w, http.StatusUnauthorized, "unauthorized: a client certificate is required")
			return
		}
		h.ServeHTTP(w, r)
	})
}

// adminTLSConfig is src's listener configuration with client certificates
// verified when given rather than required, so that probes need none.
func adminTLSConfig(src ordotls.Source) *tls.Config {
	base := src.ServerConfig()
	c := base.Clone()
	c.ClientAuth = tls.VerifyClientCertIfGiven
	if get := base.GetConfigForClient; get != nil {
		c.GetConfigForClient = func(hi *tls.ClientHelloInfo) (*tls.Config, error) {
			cc, err := get(hi)
			if err != nil || cc == nil {
				return cc, err
			}
			cc = cc.Clone()
			cc.ClientAuth = tls.VerifyClientCertIfGiven
			return cc, nil
		}
	}
	return c
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

// startAdmin serves Handler on AdminAddr. Bound to loopback, it needs no
// protection. Bound to any other address, it is served over TLS
// (AdminTLS, else the node's TLS) and, without AdminToken, to holders of
// a verified client certificate only; with neither TLS nor a token, or
// with Pprof and no token, it is refused.
func (n *Node) startAdmin() error {
	ln, err := net.Listen("tcp", n.cfg.AdminAddr)
	if err != nil {
		return fmt.Errorf("cluster: admin endpoint %q: %w", n.cfg.AdminAddr, err)
	}
	addr, _ := ln.Addr().(*net.TCPAddr)
	loopback := addr != nil && addr.IP.IsLoopback()
	src, token := n.cfg.AdminTLS, n.cfg.AdminToken
	if src == nil && !loopback {
		src = n.cfg.TLS
	}
	h := n.Handler()
	switch {
	case loopback:
	case src == nil && token == "":
		ln.Close()
		return fmt.Errorf("cluster: admin endpoint %s is not on loopback: set AdminTLS, TLS or AdminToken to protect it", ln.Addr())
	case n.cfg.Pprof && token == "":
		ln.Close()
		return fmt.Errorf("cluster: admin endpoint %s is not on loopback: Pprof needs AdminToken there", ln.Addr())
	case src == nil:
		n.log.Warn("admin endpoint not on loopback and without TLS: its bearer token travels in plaintext",
			"addr", ln.Addr().String())
	case token == "":
		h = requireClientCert(h)
	}
	if src != nil {
		ln = tls.NewListener(ln, adminTLSConfig(src))
	}
	n.adminLn = ln
	n.admin = &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		if err := n.admin.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			n.log.Error("admin endpoint stopped", "err", err)
		}
	}()
	return nil
}
