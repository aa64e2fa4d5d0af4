package main

import (
	"context"
	"crypto/tls"
	"errors"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

var etcdReady = regexp.MustCompile(`etcd member e1 ready: clients at (https?://\S+)`)

// bank etcd with --tls-* serves only TLS and only to holders of a
// certificate of its CA: the files bank certs --etcd writes. A client
// with an etcd client certificate reads and writes; one without a
// certificate, one with a certificate of the cluster's other CA, and one
// in plaintext are refused.
func TestEtcdServesTLS(t *testing.T) {
	certs := t.TempDir()
	code, out, stderr := runCLI(t, context.Background(), "certs", "--dir", certs, "--nodes", "n1", "--etcd", "e1")
	require.Equal(t, exitOK, code, "%s%s", out, stderr)
	etcdDir := filepath.Join(certs, etcdCertDir)

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var outb, errb syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"etcd", "--name", "e1", "--data-dir", t.TempDir(),
			"--listen-client", "https://127.0.0.1:0", "--listen-peer", "https://127.0.0.1:0",
			"--tls-ca", filepath.Join(etcdDir, "ca.pem"), "--tls-cert", filepath.Join(etcdDir, "e1.pem"),
			"--tls-key", filepath.Join(etcdDir, "e1-key.pem"), "--log-level", "error"}, &outb, &errb)
	}()
	var endpoint string
	testutil.Eventually(t, 60*time.Second, 20*time.Millisecond, func() error {
		select {
		case code := <-done:
			t.Fatalf("bank etcd exited %d:\n%s%s", code, outb.String(), errb.String())
		default:
		}
		m := etcdReady.FindStringSubmatch(outb.String())
		if m == nil {
			return errors.New("not ready yet")
		}
		endpoint = m[1]
		return nil
	})
	defer func() {
		stop()
		require.Equal(t, exitOK, <-done, "%s%s", outb.String(), errb.String())
	}()
	require.Regexp(t, `^https://127\.0\.0\.1:[1-9]`, endpoint)

	// put writes a key through a client of tc and endpoint.
	put := func(endpoint string, tc *tls.Config) error {
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, TLS: tc, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return err
		}
		defer c.Close()
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err = c.Put(pctx, "/tls-test", "x")
		return err
	}
	tlsOf := func(ca, cert, key string) *tls.Config {
		info := transport.TLSInfo{TrustedCAFile: ca, CertFile: cert, KeyFile: key, Logger: zap.NewNop()}
		tc, err := info.ClientConfig()
		require.NoError(t, err)
		return tc
	}
	etcdCA := filepath.Join(etcdDir, "ca.pem")

	for _, name := range []string{"client", "n1"} {
		require.NoError(t, put(endpoint, tlsOf(etcdCA, filepath.Join(etcdDir, name+".pem"), filepath.Join(etcdDir, name+"-key.pem"))),
			"the etcd client certificate %s.pem", name)
	}
	require.Error(t, put(endpoint, tlsOf(etcdCA, "", "")), "a client without a certificate")
	require.Error(t, put(endpoint, tlsOf(etcdCA, filepath.Join(certs, "client.pem"), filepath.Join(certs, "client-key.pem"))),
		"a client with a certificate of the cluster's CA, not etcd's")
	plain := "http://" + endpoint[len("https://"):]
	require.Error(t, put(plain, nil), "a plaintext client")
}
