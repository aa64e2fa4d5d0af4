package cluster_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/cluster"
	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/ordo-actors/ordo/ordotls"
	"github.com/ordo-actors/ordo/proto/testpb"
	"github.com/stretchr/testify/require"
)

// addWithin adds 1 to counter id through inv, giving up after timeout.
func addWithin(inv actors.Invoker, id string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	_, err := cluster.Call[*testpb.Value](ctx, inv, counter(id), &testpb.Add{Delta: 1})
	return err
}

// probe opens a new connection to a node's transport port with cfg and
// starts HTTP/2 on it, as a gRPC client would. It returns the certificate
// the node presented, or why the connection failed; a client certificate
// the node refuses shows as an error on the first read (TLS 1.3 reports it
// after the client's side of the handshake).
func probe(addr string, cfg *tls.Config) (*x509.Certificate, error) {
	cfg = cfg.Clone()
	cfg.NextProtos = []string{"h2"} // gRPC servers require ALPN
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")); err != nil {
		return nil, err
	}
	if _, err := c.Read(make([]byte, 1)); err != nil { // the node's SETTINGS
		return nil, err
	}
	return c.ConnectionState().PeerCertificates[0], nil
}

// Processes that are not members of the cluster's PKI reach no entity: a
// plaintext client, a client without a certificate, one whose certificate
// another CA issued, and a client that reaches a node by an address its
// certificate does not name (the client refuses the node).
func TestTLSOutsidersRefused(t *testing.T) {
	e := newEnv(t, nil, 8)
	n1 := e.start(e.config("n1"))
	e.settled(n1)
	require.NoError(t, addWithin(e.dial(), "a", 10*time.Second), "a client of the cluster's CA")

	// Through the cluster client: plaintext, or a certificate of another CA.
	other, err := ordotls.NewCA("other-ca")
	require.NoError(t, err)
	cert, key, err := other.IssueClient("client")
	require.NoError(t, err)
	foreign, err := ordotls.NewMaterial(testCA().CAPEM(), cert, key) // trusts the nodes, is not trusted
	require.NoError(t, err)
	for name, set := range map[string]func(*cluster.ClientConfig){
		"plaintext":                       func(c *cluster.ClientConfig) { c.TLS, c.Insecure = nil, true },
		"a certificate from another CA":   func(c *cluster.ClientConfig) { c.TLS = foreign },
		"a client of another CA entirely": func(c *cluster.ClientConfig) { c.TLS = must(other.Client("client")) },
	} {
		cfg := e.clientConfig()
		set(&cfg)
		c, err := cluster.Dial(context.Background(), e.cl.Endpoints(), cfg)
		require.NoError(t, err)
		err = addWithin(c, "a", time.Second)
		require.ErrorIs(t, err, context.DeadlineExceeded, "%s", name)
		c.Close()
	}

	// At the connection: the node refuses each, and accepts the cluster's.
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(testCA().CAPEM())
	_, err = probe(n1.RemoteAddr(), &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: pool, ServerName: "127.0.0.1"})
	require.ErrorContains(t, err, "certificate required", "a client without a certificate")
	_, err = probe(n1.RemoteAddr(), foreign.ClientConfig("127.0.0.1"))
	require.ErrorContains(t, err, "unknown certificate authority", "a client certificate from another CA")
	conn, err := net.DialTimeout("tcp", n1.RemoteAddr(), 5*time.Second)
	require.NoError(t, err)
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	_, _ = conn.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"))
	_, err = conn.Read(make([]byte, 64))
	conn.Close()
	require.Error(t, err, "a plaintext HTTP/2 client was answered")
	got, err := probe(n1.RemoteAddr(), clientTLS("client").ClientConfig("127.0.0.1"))
	require.NoError(t, err)
	require.Equal(t, "n1", got.Subject.CommonName)
	require.NoError(t, addWithin(e.dial(), "a", 10*time.Second), "after the outsiders")
}

// A node reached by an address its certificate does not name is refused
// by its callers, clients and nodes alike; with the address in its
// certificate, the same setup serves.
func TestTLSWrongHostRefused(t *testing.T) {
	if ln, err := net.Listen("tcp", "127.0.0.2:0"); err != nil {
		t.Skipf("no second loopback address: %v", err)
	} else {
		ln.Close()
	}
	for _, c := range []struct {
		name  string
		hosts []string
		serve bool
	}{
		{"certificate without the address", nil, false},
		{"certificate with the address", []string{"127.0.0.2"}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, nil, 8)
			n1 := e.start(e.config("n1"))
			e.settled(n1)
			cfg := e.config("n2")
			cfg.RemoteAddr = "127.0.0.2:0" // advertised as is: peers dial 127.0.0.2
			m, err := testCA().Node("n2", c.hosts...)
			require.NoError(t, err)
			cfg.TLS = m
			n2 := e.start(cfg)
			e.converged(n1, n2)
			require.True(t, strings.HasPrefix(n2.RemoteAddr(), "127.0.0.2:"))
			var on2 string
			for i := 0; on2 == ""; i++ {
				id := fmt.Sprintf("c%d", i)
				if _, ok := n2.Owned()[uint32(actors.ShardOf(counter(id), e.shards))]; ok {
					on2 = id
				}
			}
			client := e.dial()
			for _, inv := range []actors.Invoker{client, n1} {
				// A refused handshake is retried until the deadline: one
				// second shows it never succeeds; a served call gets time
				// for a loaded machine.
				within := time.Second
				if c.serve {
					within = 15 * time.Second
				}
				err := addWithin(inv, on2, within)
				if c.serve {
					require.NoError(t, err)
				} else {
					require.ErrorIs(t, err, context.DeadlineExceeded)
				}
			}
			_, err = probe(n2.RemoteAddr(), clientTLS("client").ClientConfig("127.0.0.2"))
			if c.serve {
				require.NoError(t, err)
			} else {
				require.ErrorContains(t, err, "not 127.0.0.2")
			}
		})
	}
}

// writeFile replaces path with the concatenation of data, as a
// certificate rotation would (write aside, rename over).
func writeFile(t *testing.T, path string, data ...[]byte) {
	t.Helper()
	var all []byte
	for _, d := range data {
		all = append(all, d...)
	}
	require.NoError(t, os.WriteFile(path+".new", all, 0o600))
	require.NoError(t, os.Rename(path+".new", path))
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// A node and a client that load their material from files pick up new
// files without a restart, on new connections: a new certificate from
// the same CA, then a CA rotation in three steps (bundle of the old and
// new CA; certificates from the new CA; the new CA alone). Calls keep
// working throughout, and at the end the old CA's certificates are refused.
func TestTLSFilesReload(t *testing.T) {
	e := newEnv(t, nil, 8)
	ca1 := testCA()
	ca2, err := ordotls.NewCA("cluster-test-ca-2")
	require.NoError(t, err)
	ndir, cdir := t.TempDir(), t.TempDir()
	require.NoError(t, ca1.WriteCA(ndir))
	require.NoError(t, ca1.WriteCA(cdir))
	nf, err := ca1.WriteNode(ndir, "n1")
	require.NoError(t, err)
	cf, err := ca1.WriteClient(cdir, "client")
	require.NoError(t, err)
	nf.Logger, cf.Logger = testutil.Logger(), testutil.Logger()
	nodeFiles, err := ordotls.Load(nf)
	require.NoError(t, err)
	clientFiles, err := ordotls.Load(cf)
	require.NoError(t, err)

	cfg := e.config("n1")
	cfg.TLS = nodeFiles
	n1 := e.start(cfg)
	e.settled(n1)
	ccfg := e.clientConfig()
	ccfg.TLS = clientFiles
	dial := func() *cluster.Client {
		c, err := cluster.Dial(context.Background(), e.cl.Endpoints(), ccfg)
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		return c
	}
	longLived := dial()
	require.NoError(t, addWithin(longLived, "a", 10*time.Second))

	// presents waits until new connections see the node present a
	// certificate with serial (the node looks at its files at most once
	// a second), then checks that new and existing clients call through.
	presents := func(step string, serial *big.Int) {
		t.Helper()
		testutil.Eventually(t, 10*time.Second, 50*time.Millisecond, func() error {
			got, err := probe(n1.RemoteAddr(), clientFiles.ClientConfig("127.0.0.1"))
			if err != nil {
				return err
			}
			if got.SerialNumber.Cmp(serial) != 0 {
				return fmt.Errorf("%s: the node presents serial %x, want %x", step, got.SerialNumber, serial)
			}
			return nil
		})
		require.NoError(t, addWithin(dial(), "a", 10*time.Second), "a new client after %s", step)
		require.NoError(t, addWithin(longLived, "a", 10*time.Second), "the first client after %s", step)
	}
	// accepts waits until new connections of a client holding m are
	// accepted (want) or refused by the node.
	accepts := func(step string, m *ordotls.Material, want bool) {
		t.Helper()
		testutil.Eventually(t, 10*time.Second, 50*time.Millisecond, func() error {
			_, err := probe(n1.RemoteAddr(), m.ClientConfig("127.0.0.1"))
			if want && err != nil {
				return fmt.Errorf("%s: refused: %w", step, err)
			}
			if !want && err == nil {
				return fmt.Errorf("%s: accepted", step)
			}
			return nil
		})
	}
	serial := func(f ordotls.Files) *big.Int {
		m, err := ordotls.NewMaterial(must(os.ReadFile(f.CA)), must(os.ReadFile(f.Cert)), must(os.ReadFile(f.Key)))
		require.NoError(t, err)
		return m.Leaf().SerialNumber
	}

	// A new certificate from the same CA.
	first := serial(nf)
	_, err = ca1.WriteNode(ndir, "n1")
	require.NoError(t, err)
	require.NotEqual(t, first, serial(nf))
	presents("a new certificate", serial(nf))

	// CA rotation, step 1: both trust both CAs.
	bundle := append(ca1.CAPEM(), ca2.CAPEM()...)
	writeFile(t, nf.CA, bundle)
	writeFile(t, cf.CA, bundle)
	ca2Client := func(trust []byte) *ordotls.Material {
		cert, key, err := ca2.IssueClient("client")
		require.NoError(t, err)
		return must(ordotls.NewMaterial(trust, cert, key))
	}
	accepts("the node trusts the new CA too", ca2Client(bundle), true)
	presents("both CAs trusted", serial(nf))

	// Step 2: certificates from the new CA.
	_, err = ca2.WriteNode(ndir, "n1")
	require.NoError(t, err)
	presents("the node's certificate from the new CA", serial(nf))
	_, err = ca2.WriteClient(cdir, "client")
	require.NoError(t, err)
	presents("the client's certificate from the new CA", serial(nf))

	// Step 3: the new CA alone.
	writeFile(t, nf.CA, ca2.CAPEM())
	writeFile(t, cf.CA, ca2.CAPEM())
	accepts("the node trusts the new CA alone", must(ca1.Client("client")), false)
	presents("the new CA alone", serial(nf))
	accepts("a client of the new CA", ca2Client(ca2.CAPEM()), true)
	_, err = probe(n1.RemoteAddr(), must(ca1.Client("client")).ClientConfig("127.0.0.1"))
	require.Error(t, err, "a client that trusts the old CA alone accepts the node")
}

// A cluster can run in plaintext, with Insecure set: nodes and clients
// call each other, and each logs the warning once, at start. A config
// that sets neither TLS nor Insecure is refused.
func TestInsecureCluster(t *testing.T) {
	e := newEnv(t, nil, 8)
	e.insecure = true
	rec := testutil.NewRecorder()
	cfg := e.config("n1")
	cfg.Logger = slog.New(rec)
	n1 := e.start(cfg)
	cfg = e.config("n2")
	cfg.Insecure = false // neither
	_, err := cluster.New(cfg, counterKind)
	require.ErrorContains(t, err, "set TLS (mutual TLS, see package ordotls) or Insecure")
	cfg.Insecure = true
	cfg.Logger = slog.New(rec)
	n2 := e.start(cfg)
	e.converged(n1, n2)
	ccfg := e.clientConfig()
	ccfg.Insecure = false
	_, err = cluster.Dial(context.Background(), e.cl.Endpoints(), ccfg)
	require.ErrorContains(t, err, "set TLS (mutual TLS, see package ordotls) or Insecure")
	ccfg.Insecure = true
	ccfg.Logger = slog.New(rec)
	client, err := cluster.Dial(context.Background(), e.cl.Endpoints(), ccfg)
	require.NoError(t, err)
	defer client.Close()
	for i := 0; i < 20; i++ {
		for _, inv := range []actors.Invoker{client, n1, n2} {
			require.NoError(t, addWithin(inv, fmt.Sprintf("c%d", i), 10*time.Second))
		}
	}
	var warnings []string
	for _, r := range rec.Records() {
		if r.Level == slog.LevelWarn && strings.Contains(r.Message, "without TLS") {
			warnings = append(warnings, testutil.Format(r))
		}
	}
	require.Len(t, warnings, 3, "one warning per node and client: %q", warnings)
	require.Contains(t, warnings[0], "anyone who can reach the port can call any entity")

	// A TLS client is refused by plaintext nodes.
	tcfg := ccfg
	tcfg.Insecure, tcfg.TLS = false, clientTLS("client")
	tc, err := cluster.Dial(context.Background(), e.cl.Endpoints(), tcfg)
	require.NoError(t, err)
	defer tc.Close()
	require.ErrorIs(t, addWithin(tc, "c0", time.Second), context.DeadlineExceeded)
}

// TLS and Insecure exclude each other.
func TestTLSAndInsecure(t *testing.T) {
	e := newEnv(t, nil, 8)
	cfg := e.config("n1")
	cfg.Insecure = true
	require.ErrorContains(t, cfg.Validate(), "both")
	ccfg := e.clientConfig()
	ccfg.Insecure = true
	_, err := cluster.Dial(context.Background(), e.cl.Endpoints(), ccfg)
	require.True(t, err != nil && strings.Contains(err.Error(), "both"), "Dial: %v", err)
}
