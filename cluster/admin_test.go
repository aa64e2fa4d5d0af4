package cluster_test

import (
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/ordo-actors/ordo/cluster"
	"github.com/ordo-actors/ordo/persistence/memory"
	"github.com/stretchr/testify/require"
)

const adminToken = "0123456789abcdef-admin"

// adminGet GETs path from the admin endpoint at addr (reached on
// 127.0.0.1 whatever address it is bound to) with client, and the bearer
// token if not "". It returns the status code.
func adminGet(t *testing.T, client *http.Client, scheme, addr, path, token string) int {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodGet, scheme+"://127.0.0.1:"+port+path, nil)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// An admin endpoint off loopback must be protected: a node with neither
// TLS nor a token there, or with pprof but no token, does not start.
func TestAdminOffLoopbackUnprotectedRefused(t *testing.T) {
	e := newEnv(t, memory.New(), 8)
	e.insecure = true
	for _, c := range []struct {
		id, want string
		pprof    bool
		plain    bool
	}{
		{"n1", "set AdminTLS, TLS or AdminToken", false, true},
		{"n2", "Pprof needs AdminToken", true, false},
	} {
		cfg := e.config(c.id)
		cfg.AdminAddr, cfg.Pprof = "0.0.0.0:0", c.pprof
		if !c.plain {
			cfg.Insecure, cfg.TLS = false, nodeTLS(c.id)
		}
		n, err := cluster.New(cfg, counterKind)
		require.NoError(t, err)
		err = n.Start(testCtx(t))
		require.ErrorContains(t, err, c.want)
		require.ErrorContains(t, err, "is not on loopback")
	}
	cfg := e.config("n3")
	cfg.AdminToken = "short"
	require.ErrorContains(t, cfg.Validate(), "AdminToken is 5 bytes")
}

// With a token, every admin path but the probes requires it, pprof too,
// on loopback and off it.
func TestAdminToken(t *testing.T) {
	e := newEnv(t, memory.New(), 8)
	e.insecure = true
	for _, addr := range []string{"127.0.0.1:0", "0.0.0.0:0"} {
		cfg := e.config("n-" + strings.Split(addr, ":")[0])
		cfg.AdminAddr, cfg.AdminToken, cfg.Pprof = addr, adminToken, true
		n := e.start(cfg)
		a := n.AdminAddr()
		for _, path := range []string{"/status", "/metrics", "/debug/pprof/"} {
			require.Equal(t, http.StatusUnauthorized, adminGet(t, http.DefaultClient, "http", a, path, ""), "%s %s without a token", addr, path)
			require.Equal(t, http.StatusUnauthorized, adminGet(t, http.DefaultClient, "http", a, path, "wrong-"+adminToken), "%s %s with a wrong token", addr, path)
			require.Equal(t, http.StatusOK, adminGet(t, http.DefaultClient, "http", a, path, adminToken), "%s %s with the token", addr, path)
		}
		require.Equal(t, http.StatusOK, adminGet(t, http.DefaultClient, "http", a, "/healthz", ""), "%s probe", addr)
		require.NotEqual(t, http.StatusUnauthorized, adminGet(t, http.DefaultClient, "http", a, "/readyz", ""), "%s probe", addr)
	}
}

// Off loopback with the node's TLS and no token, the admin endpoint is
// HTTPS: the probes are open, everything else requires a client
// certificate of the cluster's CA. Pprof stays off without a token on
// loopback too unless enabled.
func TestAdminTLSOffLoopback(t *testing.T) {
	e := newEnv(t, memory.New(), 8)
	cfg := e.config("n1")
	cfg.AdminAddr = "0.0.0.0:0"
	n := e.start(cfg)
	a := n.AdminAddr()
	with := &http.Client{Transport: &http.Transport{TLSClientConfig: clientTLS("ops").ClientConfig("127.0.0.1")}}
	without := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: nodeTLS("x").ClientConfig("127.0.0.1").RootCAs,
		InsecureSkipVerify: true}}}
	defer with.CloseIdleConnections()
	defer without.CloseIdleConnections()
	require.Equal(t, http.StatusOK, adminGet(t, with, "https", a, "/status", ""))
	require.Equal(t, http.StatusUnauthorized, adminGet(t, without, "https", a, "/status", ""))
	require.Equal(t, http.StatusOK, adminGet(t, without, "https", a, "/healthz", ""))
	require.Equal(t, http.StatusBadRequest, adminGet(t, http.DefaultClient, "http", a, "/status", ""), "plain HTTP to the TLS endpoint")

	cfg = e.config("n2")
	cfg.AdminAddr = "127.0.0.1:0"
	n2 := e.start(cfg)
	require.Equal(t, http.StatusOK, adminGet(t, http.DefaultClient, "http", n2.AdminAddr(), "/status", ""))
	require.Equal(t, http.StatusNotFound, adminGet(t, http.DefaultClient, "http", n2.AdminAddr(), "/debug/pprof/", ""))
}
