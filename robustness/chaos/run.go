package chaos

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ordo-actors/ordo/cluster"
	"github.com/ordo-actors/ordo/etcdembed"
	"github.com/ordo-actors/ordo/internal/netproxy"
	"github.com/ordo-actors/ordo/internal/ports"
	"github.com/ordo-actors/ordo/internal/redact"
	"github.com/ordo-actors/ordo/ordotls"
	"github.com/ordo-actors/ordo/placement"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// member is one `bank etcd` process.
type member struct {
	name      string
	clientURL string
	peerURL   string
	proc      *proc
}

// cutter is a proxy a fault can stall and heal.
type cutter interface {
	Partition()
	Heal()
}

// node is one `bank node` process and the proxies around it.
type node struct {
	name   string
	remote string // bound
	gossip string // bound
	admin  string
	// proxies are between the node and etcd: one per etcd member, in
	// member order.
	proxies []*etcdembed.Proxy
	// storeProxy is in front of PostgreSQL (postgres store only; with the
	// etcd store the store traffic goes through proxies).
	storeProxy *netproxy.Proxy
	// remoteProxy and gossipProxy are in front of the node's own remote
	// (TCP) and gossip (TCP and UDP) ports; the node advertises them, so
	// every other node and client reaches it through them.
	remoteProxy, gossipProxy *netproxy.Proxy
	proc                     *proc
}

// peerProxies are the proxies that carry the traffic of other nodes and
// clients to the node.
func (n *node) peerProxies() []cutter {
	return []cutter{n.remoteProxy, n.gossipProxy}
}

// storeProxies are the proxies that carry the node's store traffic.
func (n *node) storeProxies() []cutter {
	if n.storeProxy != nil {
		return []cutter{n.storeProxy}
	}
	out := make([]cutter, len(n.proxies))
	for i, p := range n.proxies {
		out[i] = p
	}
	return out
}

// allProxies are every proxy of the node.
func (n *node) allProxies() []cutter {
	out := make([]cutter, 0, len(n.proxies)+3)
	for _, p := range n.proxies {
		out = append(out, p)
	}
	if n.storeProxy != nil {
		out = append(out, n.storeProxy)
	}
	for _, p := range []*netproxy.Proxy{n.remoteProxy, n.gossipProxy} {
		if p != nil {
			out = append(out, p)
		}
	}
	return out
}

// runner is one chaos run. Its methods are called from Run's goroutine
// unless noted.
type runner struct {
	cfg     Config
	dir     string
	out     io.Writer
	members []*member
	nodes   []*node
	admin   *adminClient
	tally   *fencedTally
	etcd    *clientv3.Client // direct (unproxied) client for orchestration
	certs   string           // directory of the cluster's TLS files (bank certs)
	shards  uint32
	start   time.Time // when the load started
	// gossipKey is the file of the gossip key every node encrypts with.
	gossipKey string

	outMu sync.Mutex
}

func (r *runner) logf(format string, args ...any) {
	r.outMu.Lock()
	defer r.outMu.Unlock()
	fmt.Fprintf(r.out, "chaos: "+format+"\n", args...)
}

// freePort returns a port for a child process (internal/ports: below the
// ephemeral range, so nothing takes it before the child binds it).
func freePort() (int, error) {
	p, err := ports.Free(1)
	if err != nil {
		return 0, fmt.Errorf("chaos: %w", err)
	}
	return p[0], nil
}

func freeAddr() (string, error) {
	p, err := freePort()
	return "127.0.0.1:" + strconv.Itoa(p), err
}

// directEndpoints are the etcd members' client URLs.
func (r *runner) directEndpoints() []string {
	eps := make([]string, len(r.members))
	for i, m := range r.members {
		eps[i] = m.clientURL
	}
	return eps
}

// startEtcd starts the members and waits until they have a leader.
func (r *runner) startEtcd(ctx context.Context) error {
	var initial []string
	for i := 0; i < r.cfg.EtcdMembers; i++ {
		cp, err := freeAddr()
		if err != nil {
			return err
		}
		pp, err := freeAddr()
		if err != nil {
			return err
		}
		m := &member{name: memberName(i), clientURL: "https://" + cp, peerURL: "https://" + pp}
		r.members = append(r.members, m)
		initial = append(initial, m.name+"="+m.peerURL)
	}
	for _, m := range r.members {
		args := []string{"etcd", "--name", m.name, "--data-dir", filepath.Join(r.dir, "etcd-"+m.name),
			"--listen-client", m.clientURL, "--listen-peer", m.peerURL, "--initial-cluster", strings.Join(initial, ",")}
		f := r.etcdFiles(m.name)
		args = append(args, "--tls-ca", f.CA, "--tls-cert", f.Cert, "--tls-key", f.Key)
		args = append(args, r.cfg.EtcdArgs...)
		m.proc = newProc(m.name, r.cfg.Bank, filepath.Join(r.dir, m.name+".log"), args)
		if err := m.proc.start(); err != nil {
			return err
		}
	}
	tc, err := r.etcdTLS(clientCert)
	if err != nil {
		return err
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: r.directEndpoints(), DialTimeout: 5 * time.Second,
		TLS: tc, Logger: nopZap()})
	if err != nil {
		return fmt.Errorf("chaos: etcd client: %w", err)
	}
	r.etcd = cli
	return poll(ctx, 60*time.Second, 100*time.Millisecond, func() error {
		for _, m := range r.members {
			if !m.proc.running() {
				return fmt.Errorf("chaos: %s exited: %v (log %s)", m.name, m.proc.exitError(), m.proc.logPath)
			}
		}
		_, err := r.leader(ctx)
		return err
	})
}

// leader returns the index of the etcd member that leads.
func (r *runner) leader(ctx context.Context) (int, error) {
	for i, m := range r.members {
		if !m.proc.running() {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := r.etcd.Status(sctx, m.clientURL)
		cancel()
		if err != nil {
			continue
		}
		if st.Leader != 0 && st.Header.GetMemberId() == st.Leader {
			return i, nil
		}
	}
	return -1, errors.New("chaos: no etcd leader")
}

// startNodes puts proxies in front of etcd for each node and starts the
// nodes one after the other, each joining those before it.
func (r *runner) startNodes(ctx context.Context) error {
	key, err := cluster.GenerateGossipKey()
	if err != nil {
		return err
	}
	r.gossipKey = filepath.Join(r.dir, "gossip.key")
	if err := cluster.WriteGossipKeys(r.gossipKey, [][]byte{key}); err != nil {
		return err
	}
	for i := 0; i < r.cfg.Nodes; i++ {
		n := &node{name: fmt.Sprintf("n%d", i+1)}
		var err error
		for _, a := range []*string{&n.remote, &n.gossip, &n.admin} {
			if *a, err = freeAddr(); err != nil {
				return err
			}
		}
		for _, m := range r.members {
			p, err := etcdembed.StartProxy(m.clientURL)
			if err != nil {
				return err
			}
			n.proxies = append(n.proxies, p)
		}
		if r.cfg.Store == "postgres" {
			u, err := url.Parse(r.cfg.PGURL)
			if err != nil {
				return fmt.Errorf("chaos: --pg %s: not a URL", redact.Redact(r.cfg.PGURL))
			}
			if n.storeProxy, err = netproxy.Listen(u.Host, netproxy.Options{}); err != nil {
				return err
			}
		}
		if n.remoteProxy, err = netproxy.Listen(n.remote, netproxy.Options{}); err != nil {
			return err
		}
		if n.gossipProxy, err = netproxy.Listen(n.gossip, netproxy.Options{UDP: true}); err != nil {
			return err
		}
		n.proc = newProc(n.name, r.cfg.Bank, filepath.Join(r.dir, n.name+".log"), nil)
		r.nodes = append(r.nodes, n)
	}
	for i, n := range r.nodes {
		if err := r.startNode(ctx, i, r.nodes[:i]); err != nil {
			return err
		}
		if err := r.waitNodeReady(ctx, n, 60*time.Second); err != nil {
			return err
		}
	}
	return nil
}

// nodeArgs is the `bank node` command line of node i joining peers.
func (r *runner) nodeArgs(i int, peers []*node) []string {
	n := r.nodes[i]
	eps := make([]string, len(n.proxies))
	for j, p := range n.proxies {
		eps[j] = p.Endpoint()
	}
	args := []string{"node", "--id", n.name, "--etcd", strings.Join(eps, ","),
		"--remote", n.remote, "--advertise-remote", n.remoteProxy.Addr(),
		"--gossip", n.gossip, "--advertise-gossip", n.gossipProxy.Addr(),
		"--admin", n.admin, "--store", r.cfg.Store, "--lease-ttl", r.cfg.LeaseTTL.String(),
		"--gossip-key", r.gossipKey,
		// The admin endpoint is on loopback: the diagnosis of entities
		// that do not answer reads the nodes' goroutines.
		"--pprof"}
	args = append(args, r.tlsArgs(n.name)...)
	var join []string
	for _, p := range peers {
		if p != n {
			join = append(join, p.gossipProxy.Addr())
		}
	}
	if len(join) > 0 {
		args = append(args, "--join", strings.Join(join, ","))
	}
	if r.cfg.Store == "postgres" {
		args = append(args, "--pg", proxiedURL(r.cfg.PGURL, n.storeProxy))
	}
	return append(args, r.cfg.NodeArgs...)
}

// writeCerts writes the cluster's CA and the certificates of its nodes and
// clients into the run directory, with `bank certs`.
func (r *runner) writeCerts(ctx context.Context) error {
	r.certs = filepath.Join(r.dir, "certs")
	nodes := make([]string, r.cfg.Nodes)
	for i := range nodes {
		nodes[i] = fmt.Sprintf("n%d", i+1)
	}
	members := make([]string, r.cfg.EtcdMembers)
	for i := range members {
		members[i] = memberName(i)
	}
	return r.runCmd(ctx, "certs", "certs", "--dir", r.certs, "--nodes", strings.Join(nodes, ","),
		"--etcd", strings.Join(members, ","))
}

// memberName is the name of etcd member i.
func memberName(i int) string { return fmt.Sprintf("e%d", i+1) }

// etcdFiles are the files of the etcd TLS of the process named name (an
// etcd member, a node ID, or "client"), under etcd's own CA.
func (r *runner) etcdFiles(name string) ordotls.Files {
	dir := filepath.Join(r.certs, "etcd")
	return ordotls.Files{CA: filepath.Join(dir, ordotls.CAFile), Cert: filepath.Join(dir, name+".pem"),
		Key: filepath.Join(dir, name+"-key.pem")}
}

// etcdTLS is the TLS configuration of an etcd client named name.
func (r *runner) etcdTLS(name string) (*tls.Config, error) {
	f := r.etcdFiles(name)
	info := transport.TLSInfo{TrustedCAFile: f.CA, CertFile: f.Cert, KeyFile: f.Key, Logger: nopZap()}
	tc, err := info.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("chaos: etcd TLS of %s: %w", name, err)
	}
	return tc, nil
}

// tlsFiles are the TLS files of the process named name (a node ID, or
// "client").
func (r *runner) tlsFiles(name string) ordotls.Files {
	return ordotls.Files{CA: filepath.Join(r.certs, ordotls.CAFile), Cert: filepath.Join(r.certs, name+".pem"),
		Key: filepath.Join(r.certs, name+"-key.pem")}
}

// tlsArgs are the TLS flags of the process named name: the cluster's
// mutual TLS and its certificate for etcd.
func (r *runner) tlsArgs(name string) []string {
	f, e := r.tlsFiles(name), r.etcdFiles(name)
	return []string{"--tls-ca", f.CA, "--tls-cert", f.Cert, "--tls-key", f.Key,
		"--etcd-ca", e.CA, "--etcd-cert", e.Cert, "--etcd-key", e.Key}
}

// startNode starts node i (again), joining peers.
func (r *runner) startNode(_ context.Context, i int, peers []*node) error {
	n := r.nodes[i]
	n.proc.setArgs(r.nodeArgs(i, peers))
	return n.proc.start()
}

// waitNodeReady waits until the node's admin endpoint reports a valid lease.
func (r *runner) waitNodeReady(ctx context.Context, n *node, timeout time.Duration) error {
	return poll(ctx, timeout, 100*time.Millisecond, func() error {
		if !n.proc.running() {
			return fmt.Errorf("chaos: %s exited: %v (log %s)", n.name, n.proc.exitError(), n.proc.logPath)
		}
		st, err := r.admin.status(ctx, n.admin)
		if err != nil {
			return err
		}
		if !st.LeaseValid {
			return fmt.Errorf("chaos: %s has no valid lease yet", n.name)
		}
		return nil
	})
}

// ownership reads every reachable node's owned shards.
func (r *runner) ownership(ctx context.Context) map[string]map[uint32]bool {
	out := map[string]map[uint32]bool{}
	for _, n := range r.nodes {
		if !n.proc.running() || n.proc.isStopped() {
			continue
		}
		st, err := r.admin.status(ctx, n.admin)
		if err != nil || !st.LeaseValid {
			continue
		}
		m := map[uint32]bool{}
		for _, s := range st.Shards {
			m[s.Shard] = true
		}
		out[n.name] = m
	}
	return out
}

// waitSettled waits until every shard is owned and every node owns some.
func (r *runner) waitSettled(ctx context.Context, timeout time.Duration) error {
	return poll(ctx, timeout, 200*time.Millisecond, func() error {
		own := r.ownership(ctx)
		seen := map[uint32]bool{}
		for _, n := range r.nodes {
			if len(own[n.name]) == 0 {
				return fmt.Errorf("chaos: %s owns no shard", n.name)
			}
			for s := range own[n.name] {
				seen[s] = true
			}
		}
		if uint32(len(seen)) != r.shards {
			return fmt.Errorf("chaos: %d of %d shards owned", len(seen), r.shards)
		}
		return nil
	})
}

// readShards reads the cluster's shard count from etcd (P/config of the
// default prefix, as `bank node` uses it).
func (r *runner) readShards(ctx context.Context) error {
	return poll(ctx, 30*time.Second, 100*time.Millisecond, func() error {
		keys, err := placement.NewKeys(placement.DefaultConfig().Prefix)
		if err != nil {
			return err
		}
		gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		resp, err := r.etcd.Get(gctx, keys.Config())
		if err != nil {
			return err
		}
		if len(resp.Kvs) == 0 {
			return fmt.Errorf("chaos: %s not written yet", keys.Config())
		}
		var c struct {
			Shards uint32 `json:"shards"`
		}
		if err := json.Unmarshal(resp.Kvs[0].Value, &c); err != nil || c.Shards == 0 {
			return fmt.Errorf("chaos: %s holds %q", keys.Config(), resp.Kvs[0].Value)
		}
		r.shards = c.Shards
		return nil
	})
}

// scrape reads every running, unstopped node's fenced-writes counter into
// the tally. Safe for concurrent use.
func (r *runner) scrape(ctx context.Context) {
	for _, n := range r.nodes {
		r.scrapeNode(ctx, n)
	}
}

func (r *runner) scrapeNode(ctx context.Context, n *node) {
	if !n.proc.running() || n.proc.isStopped() {
		return
	}
	_, inc := n.proc.exited()
	v, err := r.admin.fenced(ctx, n.admin)
	if err != nil {
		return
	}
	if _, now := n.proc.exited(); now == inc {
		r.tally.observe(n.name, inc, v)
	}
}

// healAll ends every fault: proxies healed, stopped nodes resumed, dead
// nodes and members restarted.
func (r *runner) healAll(ctx context.Context) {
	for _, n := range r.nodes {
		for _, p := range n.allProxies() {
			p.Heal()
		}
		if n.proc.isStopped() {
			_ = n.proc.signal(syscall.SIGCONT)
		}
	}
	for _, m := range r.members {
		if !m.proc.running() {
			if err := m.proc.start(); err != nil {
				r.logf("restarting %s: %v", m.name, err)
			}
		}
	}
	for i, n := range r.nodes {
		if !n.proc.running() {
			if err := r.startNode(ctx, i, r.nodes); err != nil {
				r.logf("restarting %s: %v", n.name, err)
			}
		}
	}
}

// teardown stops every process (nodes gracefully, then etcd) and closes
// the proxies and clients. It is safe to call on a partial start.
func (r *runner) teardown() {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, n := range r.nodes {
		for _, p := range n.allProxies() {
			p.Heal()
		}
		wg.Add(1)
		go func() { defer wg.Done(); n.proc.stop(ctx, 5*time.Second) }()
	}
	wg.Wait()
	for _, m := range r.members {
		wg.Add(1)
		go func() { defer wg.Done(); m.proc.stop(ctx, 5*time.Second) }()
	}
	wg.Wait()
	if r.etcd != nil {
		_ = r.etcd.Close()
	}
	// A proxy's Close waits for its connections to be closed by their
	// ends, which are gone now; do not let a stuck one hold the run.
	done := make(chan struct{})
	go func() {
		for _, n := range r.nodes {
			for _, p := range n.proxies {
				_ = p.Close()
			}
			for _, p := range []*netproxy.Proxy{n.storeProxy, n.remoteProxy, n.gossipProxy} {
				if p != nil {
					_ = p.Close()
				}
			}
		}
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		r.logf("proxies did not close")
	}
}

// runCmd runs the bank binary once with args, output to a log file.
func (r *runner) runCmd(ctx context.Context, name string, args ...string) error {
	p := newProc(name, r.cfg.Bank, filepath.Join(r.dir, name+".log"), args)
	return p.run(ctx)
}

// runExternal runs an arbitrary command (the PostgreSQL restart), output
// appended to a log file.
func (r *runner) runExternal(ctx context.Context, name string, argv []string) error {
	logf, err := os.OpenFile(filepath.Join(r.dir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("chaos: %s: %w", strings.Join(argv, " "), err)
	}
	return nil
}

// poll calls f every interval until it returns nil, ctx ends or timeout
// passes; it returns f's last error on timeout.
func poll(ctx context.Context, timeout, interval time.Duration, f func() error) error {
	deadline := time.Now().Add(timeout)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		err := f()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// holders names, for each shard, the nodes whose admin status says they
// hold it.
func (r *runner) holders(ctx context.Context, shards []uint32) map[uint32][]string {
	out := map[uint32][]string{}
	own := r.ownership(ctx)
	for _, s := range shards {
		for _, n := range r.nodes {
			if own[n.name][s] {
				out[s] = append(out[s], n.name)
			}
		}
	}
	return out
}

// describeShards says, for each of shards, who holds its lock in etcd
// and which nodes' placement claims it (holders): a lock that no node
// claims is one whose holder never learned it had it.
func (r *runner) describeShards(ctx context.Context, shards []uint32) []string {
	keys, err := placement.NewKeys(placement.DefaultConfig().Prefix)
	if err != nil {
		return []string{err.Error()}
	}
	return describeLocks(ctx, r.etcd, keys, shards, r.holders(ctx, shards))
}

// describeLocks is describeShards over kv and keys, given the nodes that
// claim each shard: one line per shard, "shard 213: locked by n3 at epoch
// 1234 under lease 18c6..., claimed by [n3]", or "no lock".
func describeLocks(ctx context.Context, kv clientv3.KV, keys placement.Keys, shards []uint32, claims map[uint32][]string) []string {
	out := make([]string, 0, len(shards))
	for _, s := range shards {
		gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, err := kv.Get(gctx, keys.Shard(s))
		cancel()
		lock := "no lock"
		switch {
		case err != nil:
			lock = fmt.Sprintf("lock unreadable (%v)", err)
		case len(resp.Kvs) > 0:
			k := resp.Kvs[0]
			lock = fmt.Sprintf("locked by %s at epoch %d under lease %x", k.Value, k.CreateRevision, k.Lease)
		}
		out = append(out, fmt.Sprintf("shard %d: %s, claimed by %v", s, lock, claims[s]))
	}
	return out
}

// proxiedURL is pgURL with its host:port replaced by the proxy's.
func proxiedURL(pgURL string, p *netproxy.Proxy) string {
	u, err := url.Parse(pgURL)
	if err != nil || p == nil {
		return pgURL
	}
	u.Host = p.Addr()
	return u.String()
}
