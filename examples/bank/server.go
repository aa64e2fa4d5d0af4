package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/ordo-actors/ordo/cluster"
	"github.com/ordo-actors/ordo/examples/bank/ledger"
	"github.com/ordo-actors/ordo/persistence"
	etcdstore "github.com/ordo-actors/ordo/persistence/etcdstore"
	pgstore "github.com/ordo-actors/ordo/persistence/pgstore"
	"github.com/ordo-actors/ordo/placement"
	"github.com/spf13/cobra"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
)

func parseURLs(flag string, list []string) ([]url.URL, error) {
	if len(list) == 0 {
		return nil, usagef("--%s is required", flag)
	}
	var out []url.URL
	for _, s := range list {
		u, err := url.Parse(s)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, usagef("--%s %q: want a URL like http://127.0.0.1:2379", flag, s)
		}
		out = append(out, *u)
	}
	return out, nil
}

func newEtcdCmd() *cobra.Command {
	var (
		name, dir, state, token  string
		listenClient, listenPeer []string
		advClient, advPeer       []string
		initialCluster           string
		maxTxnOps                uint
		logLevel                 string
		tlsCA, tlsCert, tlsKey   string
		compactEvery             time.Duration
		quota                    int64
		snapshotCount            uint64
	)
	cmd := &cobra.Command{
		Use:   "etcd --name N --data-dir D --listen-client URL --listen-peer URL --initial-cluster LIST [--tls-ca F --tls-cert F --tls-key F]",
		Short: "Run one etcd member (etcd's own server code) until SIGTERM/SIGINT",
		Long: `etcd runs a real etcd member through go.etcd.io/etcd/server/v3/embed, for
multi-process clusters on machines without an installed etcd. The advertised
URLs default to the listen URLs. --initial-cluster is etcd's own list,
e.g. e1=http://127.0.0.1:2380,e2=http://127.0.0.1:2382,e3=http://127.0.0.1:2384.

With --tls-ca, --tls-cert and --tls-key the member serves its clients and
its peers over TLS only (every URL https://) with its certificate (valid
for server and client authentication), and requires of every client and
peer a certificate issued by --tls-ca: bank certs --etcd e1,e2,e3 writes
them all into DIR/etcd/, under a CA of their own. Without them the member
speaks plaintext (every URL http://): anyone who reaches its ports can read
and write placement and, with the etcd store, entity state.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if name == "" {
				return usagef("--name is required")
			}
			if dir == "" {
				return usagef("--data-dir is required")
			}
			lc, err := parseURLs("listen-client", listenClient)
			if err != nil {
				return err
			}
			lp, err := parseURLs("listen-peer", listenPeer)
			if err != nil {
				return err
			}
			ac, ap := lc, lp
			if len(advClient) > 0 {
				if ac, err = parseURLs("advertise-client", advClient); err != nil {
					return err
				}
			}
			if len(advPeer) > 0 {
				if ap, err = parseURLs("advertise-peer", advPeer); err != nil {
					return err
				}
			}
			if state != "new" && state != "existing" {
				return usagef("--initial-cluster-state %q: want new or existing", state)
			}
			tlsOn := tlsCA != "" || tlsCert != "" || tlsKey != ""
			if tlsOn && (tlsCA == "" || tlsCert == "" || tlsKey == "") {
				return usagef("--tls-ca, --tls-cert and --tls-key go together")
			}
			want := "http"
			if tlsOn {
				want = "https"
			}
			for _, f := range []struct {
				flag string
				urls []url.URL
			}{{"listen-client", lc}, {"listen-peer", lp}, {"advertise-client", ac}, {"advertise-peer", ap}} {
				for _, u := range f.urls {
					if u.Scheme != want {
						if tlsOn {
							return usagef("--%s %s: with --tls-* every URL is https://", f.flag, u.String())
						}
						return usagef("--%s %s: https:// needs --tls-ca, --tls-cert and --tls-key", f.flag, u.String())
					}
				}
			}
			cfg := embed.NewConfig()
			cfg.Name = name
			cfg.Dir = dir
			cfg.ListenClientUrls, cfg.AdvertiseClientUrls = lc, ac
			cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = lp, ap
			if initialCluster == "" {
				initialCluster = cfg.InitialClusterFromName(name)
			}
			cfg.InitialCluster = initialCluster
			cfg.ClusterState = state
			cfg.InitialClusterToken = token
			cfg.MaxTxnOps = maxTxnOps
			cfg.LogLevel = logLevel
			cfg.ListenMetricsUrls = nil
			if tlsOn {
				// Clients and peers alike present a certificate of the CA.
				info := transport.TLSInfo{CertFile: tlsCert, KeyFile: tlsKey, TrustedCAFile: tlsCA, ClientCertAuth: true}
				cfg.ClientTLSInfo, cfg.PeerTLSInfo = info, info
			}
			if compactEvery < 0 {
				return usagef("--auto-compaction-retention %v is negative", compactEvery)
			}
			if compactEvery > 0 {
				cfg.AutoCompactionMode = embed.CompactorModePeriodic
				cfg.AutoCompactionRetention = compactEvery.String()
			}
			if quota < 0 {
				return usagef("--quota-backend-bytes %d is negative", quota)
			}
			cfg.QuotaBackendBytes = quota
			if snapshotCount > 0 {
				cfg.SnapshotCount = snapshotCount
			}
			if err := cfg.Validate(); err != nil {
				return usagef("etcd configuration: %v", err)
			}
			e, err := embed.StartEtcd(cfg)
			if err != nil {
				return fmt.Errorf("starting etcd member %s: %w", name, err)
			}
			defer e.Close()
			ctx := cmd.Context()
			select {
			case <-e.Server.ReadyNotify():
				// The bound addresses: a port 0 is chosen at listen time.
				var bound []string
				for _, l := range e.Clients {
					bound = append(bound, want+"://"+l.Addr().String())
				}
				fmt.Fprintf(cmd.OutOrStdout(), "etcd member %s ready: clients at %s\n", name, strings.Join(bound, ","))
			case err := <-e.Err():
				return fmt.Errorf("etcd member %s: %w", name, err)
			case <-ctx.Done():
				return nil
			}
			select {
			case err := <-e.Err():
				return fmt.Errorf("etcd member %s: %w", name, err)
			case <-ctx.Done():
				fmt.Fprintf(cmd.OutOrStdout(), "etcd member %s stopping\n", name)
				return nil
			}
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&name, "name", "", "member name (required)")
	fs.StringVar(&dir, "data-dir", "", "data directory (required)")
	fs.StringSliceVar(&listenClient, "listen-client", nil, "client URLs to listen on (required)")
	fs.StringSliceVar(&listenPeer, "listen-peer", nil, "peer URLs to listen on (required)")
	fs.StringSliceVar(&advClient, "advertise-client", nil, "client URLs to advertise (default: --listen-client)")
	fs.StringSliceVar(&advPeer, "advertise-peer", nil, "peer URLs to advertise (default: --listen-peer)")
	fs.StringVar(&initialCluster, "initial-cluster", "", "name=peerURL,... of every initial member (default: this member alone)")
	fs.StringVar(&state, "initial-cluster-state", "new", "new or existing")
	fs.StringVar(&token, "initial-cluster-token", "ordo-bank", "initial cluster token")
	fs.UintVar(&maxTxnOps, "max-txn-ops", 1024, "maximum operations per transaction (the etcd store batches up to this)")
	fs.StringVar(&logLevel, "log-level", "warn", "etcd log level: debug, info, warn, error")
	fs.StringVar(&tlsCA, "tls-ca", "", "CA bundle (PEM) every client's and peer's certificate must verify against (client certificate authentication; see bank certs --etcd)")
	fs.StringVar(&tlsCert, "tls-cert", "", "the member's certificate (PEM) for its https:// client and peer URLs")
	fs.StringVar(&tlsKey, "tls-key", "", "the member's certificate's private key (PEM)")
	fs.DurationVar(&compactEvery, "auto-compaction-retention", 0,
		"compact the key history older than this, periodically (etcd's periodic mode); 0 keeps every revision")
	fs.Int64Var(&quota, "quota-backend-bytes", 0,
		"the member's space quota in bytes, beyond which etcd refuses writes until compacted and defragmented; 0 is etcd's default (2 GiB)")
	fs.Uint64Var(&snapshotCount, "snapshot-count", 0,
		"applied entries between two snapshots of the member's state; the raft log since the last one is kept in memory, so large writes call for fewer; 0 is etcd's default (100,000)")
	return cmd
}

func newNodeCmd() *cobra.Command {
	var (
		id, remote, gossip, admin string
		advRemote, advGossip      string
		etcd, join                []string
		store, pg, prefix         string
		leaseTTL                  time.Duration
		shards                    uint32
		maxTxnOps                 int
		drain, startTimeout       time.Duration
		quiet                     bool
		sec                       secFlags
		adminTokenFile            string
		gossipKey                 string
		otlp                      otlpFlags
		pprof                     bool
		idleTimeout               time.Duration
	)
	cmd := &cobra.Command{
		Use:   "node --id ID --etcd ENDPOINTS --remote HOST:PORT --gossip HOST:PORT (--tls-ca F --tls-cert F --tls-key F | --insecure) --gossip-key FILE [--join HOST:PORT,...]",
		Short: "Run one ordo node hosting the bank's entities until SIGTERM/SIGINT (graceful drain)",
		Long: `node runs one ordo node hosting the bank's entities until SIGTERM/SIGINT,
then drains it gracefully.

Gossip is encrypted with the keys in the --gossip-key file: base64, one key
of 16, 24 or 32 bytes per line, the first used to encrypt, every one
accepted (e.g. head -c 32 /dev/urandom | base64 > gossip.key; chmod 600).
Every node needs the same primary key among its keys. On SIGHUP the node
reads the file again and applies it, so keys rotate without a restart:
add the new key as a second line on every node (SIGHUP each), move it to
the first line everywhere (SIGHUP), then drop the old line (SIGHUP).
Without --gossip-key gossip is plaintext (a warning is logged).`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg := cluster.DefaultConfig()
			cfg.NodeID = id
			cfg.EtcdEndpoints = etcd
			cfg.RemoteAddr = remote
			cfg.GossipAddr = gossip
			cfg.AdvertiseRemoteAddr = advRemote
			cfg.AdvertiseGossipAddr = advGossip
			cfg.Join = join
			cfg.AdminAddr = admin
			cfg.Pprof = pprof
			cfg.Placement.Prefix = prefix
			if shards != 0 {
				cfg.Placement.Shards = shards
			}
			cfg.Placement.LeaseTTL = leaseTTL
			if m := cfg.Placement.ValidityMargin; m >= leaseTTL/2 {
				cfg.Placement.ValidityMargin = leaseTTL / 4
			}
			cfg.Logger = logger(!quiet, cmd.ErrOrStderr())
			if id == "" {
				return usagef("--id is required")
			}
			if len(etcd) == 0 {
				return usagef("--etcd is required")
			}
			if store != "etcd" && store != "postgres" {
				return usagef("--store %q: want etcd or postgres", store)
			}
			if pg == "" {
				pg = os.Getenv("ORDO_PG_URL")
			}
			if store == "postgres" && pg == "" {
				return usagef("--store postgres needs --pg URL (or ORDO_PG_URL)")
			}
			var err error
			if cfg.TLS, cfg.Insecure, err = sec.transportTLS(); err != nil {
				return err
			}
			if cfg.EtcdTLS, cfg.EtcdUsername, cfg.EtcdPassword, err = sec.etcdSecurity(); err != nil {
				return err
			}
			if adminTokenFile != "" {
				if cfg.AdminToken, err = readSecretFile("admin-token-file", adminTokenFile); err != nil {
					return err
				}
			}
			if idleTimeout != 0 {
				cfg.Host.IdleTimeout = idleTimeout
			}
			if drain <= 0 {
				return usagef("--drain-timeout %v must be positive", drain)
			}
			if leaseTTL < time.Second || leaseTTL%time.Second != 0 {
				return usagef("--lease-ttl %v: want a whole number of seconds >= 1s", leaseTTL)
			}
			if err := otlp.validate(); err != nil {
				return err
			}
			if gossipKey != "" {
				keys, err := cluster.ReadGossipKeys(gossipKey)
				if err != nil {
					return usagef("--gossip-key: %v", err)
				}
				cfg.GossipKeys = keys
			}
			ctx := cmd.Context()
			tp, err := otlp.provider(ctx, id)
			if err != nil {
				return err
			}
			if tp != nil {
				cfg.TracerProvider = tp
				defer func() {
					// Send the spans still buffered; a collector that is
					// gone costs at most this long.
					sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
					defer cancel()
					if err := tp.Shutdown(sctx); err != nil {
						fmt.Fprintf(cmd.ErrOrStderr(), "node %s: flushing spans: %v\n", id, err)
					}
				}()
			}
			var st persistence.Store
			switch store {
			case "etcd":
				ec, err := sec.etcdClient(etcd)
				if err != nil {
					return err
				}
				cli, err := clientv3.New(ec)
				if err != nil {
					return fmt.Errorf("etcd store: %w", err)
				}
				defer cli.Close()
				sc := etcdstore.DefaultConfig()
				sc.Prefix = prefix + "/store/"
				sc.MaxTxnOps = maxTxnOps
				if st, err = etcdstore.New(cli, sc); err != nil {
					return err
				}
			case "postgres":
				sc := pgstore.DefaultConfig()
				sc.URL = pg
				var err error
				if st, err = pgstore.Open(ctx, sc); err != nil {
					return err
				}
			}
			defer st.Close()
			cfg.Store = st

			sctx, cancel := context.WithTimeout(ctx, startTimeout)
			n, err := startNode(sctx, cfg, cmd.ErrOrStderr())
			cancel()
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "node %s up: remote %s, gossip %s", id, n.RemoteAddr(), n.GossipAddr())
			if a := n.AdminAddr(); a != "" {
				// Off loopback the node serves it over its TLS.
				scheme := "http"
				if h, _, _ := net.SplitHostPort(a); cfg.TLS != nil && !net.ParseIP(h).IsLoopback() {
					scheme = "https"
				}
				fmt.Fprintf(cmd.OutOrStdout(), ", admin %s://%s/", scheme, a)
			}
			fmt.Fprintln(cmd.OutOrStdout())
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
		wait:
			for {
				select {
				case <-ctx.Done():
					break wait
				case <-hup:
					if gossipKey == "" {
						fmt.Fprintf(cmd.ErrOrStderr(), "node %s: SIGHUP ignored: no --gossip-key\n", id)
						continue
					}
					if err := reloadGossipKeys(n, gossipKey); err != nil {
						fmt.Fprintf(cmd.ErrOrStderr(), "node %s: gossip keys not changed: %v\n", id, err)
						continue
					}
					fmt.Fprintf(cmd.OutOrStdout(), "node %s: gossip keys reloaded from %s\n", id, gossipKey)
				}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "node %s draining\n", id)
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), drain)
			defer cancel()
			if err := n.Shutdown(dctx); err != nil {
				return fmt.Errorf("node %s shutdown: %w", id, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "node %s stopped\n", id)
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&id, "id", "", "node ID, unique in the cluster (required)")
	fs.StringSliceVar(&etcd, "etcd", nil, "etcd client endpoints, comma-separated (required)")
	fs.StringVar(&remote, "remote", "127.0.0.1:0", "host:port for calls from other nodes and clients")
	fs.StringVar(&gossip, "gossip", "127.0.0.1:0", "host:port of the gossip agent (TCP and UDP)")
	fs.StringVar(&advRemote, "advertise-remote", "", "host:port other nodes and clients call instead of --remote (a proxy or NAT in front of it)")
	fs.StringVar(&advGossip, "advertise-gossip", "", "IP:port other nodes gossip with instead of --gossip (TCP and UDP)")
	fs.StringSliceVar(&join, "join", nil, "gossip addresses of nodes to join, comma-separated")
	fs.StringVar(&store, "store", "etcd", "where entity state is kept: etcd or postgres")
	fs.StringVar(&pg, "pg", "", "PostgreSQL URL for --store postgres (default $ORDO_PG_URL, which keeps its password off the command line); sslmode and sslrootcert are honoured")
	fs.StringVar(&admin, "admin", "", "host:port of the admin HTTP endpoint (status JSON, /metrics); empty disables it; off loopback it needs TLS or --admin-token-file")
	fs.BoolVar(&pprof, "pprof", false, "serve net/http/pprof under /debug/pprof/ on the admin endpoint (loopback, or with --admin-token-file)")
	fs.DurationVar(&idleTimeout, "idle-timeout", 0, "passivate an entity idle this long (0: the runtime's default, "+
		cluster.DefaultConfig().Host.IdleTimeout.String()+")")
	fs.StringVar(&adminTokenFile, "admin-token-file", "", "file holding the bearer token the admin endpoint requires (all but /healthz and /readyz)")
	sec.register(fs)
	fs.DurationVar(&leaseTTL, "lease-ttl", cluster.DefaultConfig().Placement.LeaseTTL, "etcd lease TTL, whole seconds")
	fs.StringVar(&prefix, "prefix", cluster.DefaultConfig().Placement.Prefix, "the cluster's etcd key prefix")
	fs.Uint32Var(&shards, "shards", 0, "shard count (0: the default; must match the cluster's)")
	fs.IntVar(&maxTxnOps, "max-txn-ops", 128, "operations per etcd transaction of the etcd store: at most the server's --max-txn-ops")
	fs.DurationVar(&startTimeout, "start-timeout", time.Minute, "bound on starting, including waiting for a crashed predecessor's lease to expire")
	fs.DurationVar(&drain, "drain-timeout", 30*time.Second, "bound on the graceful drain at SIGTERM/SIGINT")
	fs.BoolVarP(&quiet, "quiet", "q", false, "do not log to stderr")
	fs.StringVar(&gossipKey, "gossip-key", "", "file of gossip encryption keys: base64, one per line, the first used to encrypt; reread on SIGHUP (empty: plaintext gossip)")
	otlp.register(fs)
	return cmd
}

// reloadGossipKeys applies the keys of path to n.
func reloadGossipKeys(n *cluster.Node, path string) error {
	keys, err := cluster.ReadGossipKeys(path)
	if err != nil {
		return err
	}
	return n.SetGossipKeys(keys)
}

// startNode starts a node for cfg. A node restarted right after a crash
// finds its ID still registered under the crashed process's lease until
// that lease expires or a peer revokes it; Start waits for that (placement
// logs it), until ctx ends.
func startNode(ctx context.Context, cfg cluster.Config, log io.Writer) (*cluster.Node, error) {
	n, err := cluster.New(cfg, ledger.Account, ledger.Transfer)
	if err != nil {
		return nil, usageError{err}
	}
	if err := n.Start(ctx); err != nil {
		if errors.Is(err, placement.ErrNodeIDInUse) {
			fmt.Fprintf(log, "node %s: gave up waiting for the previous session's lease to end: %v\n", cfg.NodeID, err)
		}
		return nil, err
	}
	return n, nil
}
