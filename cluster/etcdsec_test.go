package cluster_test

import (
	"context"
	"crypto/tls"
	"path/filepath"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/cluster"
	"github.com/ordo-actors/ordo/etcdembed"
	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/ordo-actors/ordo/ordotls"
	"github.com/ordo-actors/ordo/persistence/memory"
	"github.com/ordo-actors/ordo/proto/testpb"
	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.uber.org/zap"
)

// An etcd that requires client certificates and a login serves a node and
// a Dial client that bring both, and refuses them without either.
func TestEtcdTLSAndAuth(t *testing.T) {
	dir := t.TempDir()
	ca, err := ordotls.NewCA("etcd-test-ca")
	require.NoError(t, err)
	require.NoError(t, ca.WriteCA(dir))
	server, err := ca.WriteNode(dir, "etcd")
	require.NoError(t, err)
	clientFiles, err := ca.WriteClient(dir, "ordo")
	require.NoError(t, err)
	other, err := ordotls.NewCA("other-ca")
	require.NoError(t, err)
	odir := filepath.Join(dir, "other")
	require.NoError(t, other.WriteCA(odir))
	outsider, err := other.WriteClient(odir, "ordo")
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const password = "s3cret-root-pw"
	srv, err := etcdembed.Start(ctx, etcdembed.Config{Dir: filepath.Join(dir, "etcd"), UnsafeNoFsync: true, Logger: zap.NewNop(),
		ClientTLS:    &etcdembed.TLSFiles{CA: server.CA, Cert: server.Cert, Key: server.Key},
		RootPassword: password})
	require.NoError(t, err)
	defer srv.Close()
	eps := srv.Endpoints()
	require.Regexp(t, `^https://127\.0\.0\.1:\d+$`, eps[0])

	etcdTLS := func(f ordotls.Files) *tls.Config {
		tc, err := transport.TLSInfo{TrustedCAFile: f.CA, CertFile: f.Cert, KeyFile: f.Key}.ClientConfig()
		require.NoError(t, err)
		return tc
	}
	good := etcdTLS(clientFiles)
	cfg := cluster.DefaultLocalConfig()
	cfg.NodeID, cfg.EtcdEndpoints, cfg.Store = "n1", eps, memory.New()
	cfg.Placement.Prefix, cfg.Placement.Shards = "/ordo/etcdsec", 8
	cfg.Logger, cfg.TLS = testutil.Logger(), nodeTLS("n1")
	cfg.EtcdDialTimeout = 20 * time.Second // a TLS handshake and a login (bcrypt) under -race on a busy machine
	cfg.EtcdTLS, cfg.EtcdUsername, cfg.EtcdPassword = good, "root", password

	ccfg := cluster.DefaultClientConfig()
	ccfg.Prefix, ccfg.Logger, ccfg.TLS = cfg.Placement.Prefix, cfg.Logger, clientTLS("client")
	ccfg.EtcdDialTimeout = cfg.EtcdDialTimeout
	ccfg.EtcdTLS, ccfg.EtcdUsername, ccfg.EtcdPassword = good, "root", password

	refused := map[string]func(c *cluster.Config, cc *cluster.ClientConfig){
		"no TLS": func(c *cluster.Config, cc *cluster.ClientConfig) { c.EtcdTLS, cc.EtcdTLS = nil, nil },
		"a certificate of another CA": func(c *cluster.Config, cc *cluster.ClientConfig) {
			o := etcdTLS(outsider)
			o.RootCAs = good.RootCAs
			c.EtcdTLS, cc.EtcdTLS = o, o
		},
		"no login": func(c *cluster.Config, cc *cluster.ClientConfig) {
			c.EtcdUsername, c.EtcdPassword, cc.EtcdUsername, cc.EtcdPassword = "", "", "", ""
		},
		"a wrong password": func(c *cluster.Config, cc *cluster.ClientConfig) {
			c.EtcdPassword, cc.EtcdPassword = "wrong", "wrong"
		},
	}
	for name, change := range refused {
		t.Run("refused/"+name, func(t *testing.T) {
			c, cc := cfg, ccfg
			c.EtcdDialTimeout, cc.EtcdDialTimeout = time.Second, time.Second
			change(&c, &cc)
			n, err := cluster.New(c, counterKind)
			require.NoError(t, err)
			require.Error(t, n.Start(ctx), "the node started")
			_, err = cluster.Dial(ctx, eps, cc)
			require.Error(t, err, "the client dialed")
		})
	}

	n, err := cluster.New(cfg, counterKind)
	require.NoError(t, err)
	require.NoError(t, n.Start(ctx))
	defer n.Shutdown(context.WithoutCancel(ctx))
	require.NoError(t, n.WaitReady(ctx))
	client, err := cluster.Dial(ctx, eps, ccfg)
	require.NoError(t, err)
	defer client.Close()
	v, err := cluster.Call[*testpb.Value](ctx, client, counter("a"), &testpb.Add{Delta: 2})
	require.NoError(t, err)
	require.EqualValues(t, 2, v.Value)
}

// TLS for etcd with an http:// endpoint would be dropped by the etcd
// client: the config is refused. A username goes with a password.
func TestEtcdSecurityValidated(t *testing.T) {
	cfg := cluster.DefaultLocalConfig()
	cfg.NodeID, cfg.Store, cfg.Insecure = "n1", memory.New(), true
	cfg.EtcdEndpoints = []string{"https://127.0.0.1:2379", "http://127.0.0.1:2381"}
	cfg.EtcdTLS = &tls.Config{}
	require.ErrorContains(t, cfg.Validate(), `"http://127.0.0.1:2381" is plaintext but EtcdTLS is set`)
	cfg.EtcdTLS = nil
	require.NoError(t, cfg.Validate())
	cfg.EtcdUsername = "root"
	require.ErrorContains(t, cfg.Validate(), "EtcdUsername and EtcdPassword go together")

	cc := cluster.DefaultClientConfig()
	cc.Insecure, cc.EtcdTLS = true, &tls.Config{}
	_, err := cluster.Dial(context.Background(), []string{"http://127.0.0.1:1"}, cc)
	require.ErrorContains(t, err, "plaintext but EtcdTLS is set")
}
