package ordotls

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/internal/testutil"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func testCA(t *testing.T, name string) *CA {
	t.Helper()
	ca, err := NewCA(name)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func must[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

// outcome is what one connection attempt showed on each side.
type outcome struct {
	serverErr, clientErr error
	client, server       *x509.Certificate // the verified peer certificates
}

func (o outcome) err() error { return errors.Join(o.serverErr, o.clientErr) }

// connect runs one TLS connection over a real loopback socket between a
// listener using server and a caller using client: the server answers a
// byte once its handshake succeeded, so a client refused by the server
// (TLS 1.3 tells it after its own handshake) fails reading it.
func connect(t *testing.T, server, client *tls.Config) outcome {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", server)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var o outcome
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			o.serverErr = err
			return
		}
		defer c.Close()
		tc := c.(*tls.Conn)
		_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
		if o.serverErr = tc.Handshake(); o.serverErr != nil {
			return
		}
		if st := tc.ConnectionState(); len(st.VerifiedChains) > 0 {
			o.client = st.VerifiedChains[0][0]
		}
		_, _ = tc.Write([]byte{1})
		_, _ = io.Copy(io.Discard, tc) // until the client closes
	}()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", ln.Addr().String(), client)
	if err != nil {
		o.clientErr = err
	} else {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, o.clientErr = c.Read(make([]byte, 1)); o.clientErr == nil {
			o.server = c.ConnectionState().PeerCertificates[0]
		}
		c.Close()
	}
	ln.Close()
	<-done
	return o
}

// A node and a client of one CA talk, each verifying the other; nodes
// talk to nodes.
func TestMutualTLS(t *testing.T) {
	ca := testCA(t, "test-ca")
	n1 := must[*Material](t)(ca.Node("n1"))
	n2 := must[*Material](t)(ca.Node("n2", "node2.example", "10.0.0.2"))
	c1 := must[*Material](t)(ca.Client("alice"))
	for _, c := range []struct {
		name           string
		server, client *Material
		host           string
	}{
		{"client to node by IPv4", n1, c1, "127.0.0.1"},
		{"client to node by IPv6", n1, c1, "::1"},
		{"client to node by name", n1, c1, "localhost"},
		{"node to node by an extra name", n2, n1, "node2.example"},
		{"node to node by an extra IP", n2, n1, "10.0.0.2"},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := connect(t, c.server.ServerConfig(), c.client.ClientConfig(c.host))
			if err := o.err(); err != nil {
				t.Fatal(err)
			}
			if o.client.Subject.CommonName != c.client.Leaf().Subject.CommonName || o.server.Subject.CommonName != c.server.Leaf().Subject.CommonName {
				t.Fatalf("server saw %q, client saw %q", o.client.Subject.CommonName, o.server.Subject.CommonName)
			}
		})
	}
}

// Whatever is wrong, the connection fails, refused by the side that must
// notice, for the right reason.
func TestRefusals(t *testing.T) {
	ca, other := testCA(t, "test-ca"), testCA(t, "other-ca")
	node := must[*Material](t)(ca.Node("n1", "node1.example"))
	client := must[*Material](t)(ca.Client("alice"))
	cert, key, err := other.IssueClient("mallory")
	if err != nil {
		t.Fatal(err)
	}
	outsider := must[*Material](t)(NewMaterial(ca.CAPEM(), cert, key)) // trusts the node
	impostor := must[*Material](t)(other.Node("n1", "node1.example"))
	cert, key, err = ca.issue("n1", &x509.Certificate{ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}})
	if err != nil {
		t.Fatal(err)
	}
	clientAsServer := must[*Material](t)(NewMaterial(ca.CAPEM(), cert, key))
	cert, key, err = ca.IssueClient("alice")
	if err != nil {
		t.Fatal(err)
	}
	distrustful := must[*Material](t)(NewMaterial(other.CAPEM(), cert, key))
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.CAPEM())
	renamed := client.ClientConfig("10.9.9.9")
	renamed.ServerName = "127.0.0.1" // as gRPC sets it on a copy for each handshake
	tls12 := client.ClientConfig("127.0.0.1")
	tls12.MinVersion, tls12.MaxVersion = tls.VersionTLS12, tls.VersionTLS12

	const byServer, byClient = true, false
	for _, c := range []struct {
		name     string
		server   *tls.Config
		client   *tls.Config
		byServer bool
		want     string
	}{
		{"client certificate from another CA", node.ServerConfig(), outsider.ClientConfig("127.0.0.1"), byServer, "unknown authority"},
		{"client without a certificate", node.ServerConfig(),
			&tls.Config{MinVersion: tls.VersionTLS13, RootCAs: pool, ServerName: "127.0.0.1"}, byServer, "certificate"},
		{"client that does not trust the node's CA", node.ServerConfig(), distrustful.ClientConfig("127.0.0.1"), byClient, "unknown authority"},
		{"node certificate from another CA", impostor.ServerConfig(), client.ClientConfig("127.0.0.1"), byClient, "unknown authority"},
		{"wrong IP", node.ServerConfig(), client.ClientConfig("10.9.9.9"), byClient, "not 10.9.9.9"},
		{"wrong name", node.ServerConfig(), client.ClientConfig("node2.example"), byClient, "not node2.example"},
		{"no server name", node.ServerConfig(), client.ClientConfig(""), byClient, "no server name"},
		{"the name the config was made for, whatever its ServerName", node.ServerConfig(), renamed, byClient, "not 10.9.9.9"},
		{"a client certificate serving", clientAsServer.ServerConfig(), client.ClientConfig("127.0.0.1"), byClient, "usage"},
		{"TLS 1.2", node.ServerConfig(), tls12, byServer, "version"},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := connect(t, c.server, c.client)
			refusal := o.clientErr
			if c.byServer {
				refusal = o.serverErr
			}
			if refusal == nil {
				t.Fatalf("not refused by the %s: server %v, client %v", map[bool]string{true: "server", false: "client"}[c.byServer], o.serverErr, o.clientErr)
			}
			if !strings.Contains(refusal.Error(), c.want) {
				t.Fatalf("refused for another reason than %q: %v", c.want, refusal)
			}
			t.Log(refusal)
		})
	}
}

// writeAtomic replaces path with data as a certificate rotation would.
func writeAtomic(t *testing.T, path string, data ...[]byte) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(strings.Join(func() []string {
		var s []string
		for _, d := range data {
			s = append(s, string(d))
		}
		return s
	}(), "")), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// loadNow returns a Reloader of files that looks at them on every
// handshake, and the recorder of its logs.
func loadNow(t *testing.T, f Files) (*Reloader, *testutil.Recorder) {
	t.Helper()
	rec := testutil.NewRecorder()
	f.Logger = slog.New(rec)
	r, err := Load(f)
	if err != nil {
		t.Fatal(err)
	}
	r.every = 0
	return r, rec
}

// A new certificate written over the files is used by the next
// connection; files that cannot be loaded keep the last good material,
// with a warning (automatic look) or an error (Reload).
func TestReloadCertificate(t *testing.T) {
	ca := testCA(t, "test-ca")
	dir := t.TempDir()
	if err := ca.WriteCA(dir); err != nil {
		t.Fatal(err)
	}
	nf := must[Files](t)(ca.WriteNode(dir, "n1"))
	cf := must[Files](t)(ca.WriteClient(dir, "alice"))
	node, rec := loadNow(t, nf)
	client, _ := loadNow(t, cf)
	server, dial := node.ServerConfig(), client.ClientConfig("127.0.0.1")

	o := connect(t, server, dial)
	if err := o.err(); err != nil {
		t.Fatal(err)
	}
	first := o.server.SerialNumber

	must[Files](t)(ca.WriteNode(dir, "n1"))
	o = connect(t, server, dial)
	if err := o.err(); err != nil {
		t.Fatal(err)
	}
	second := o.server.SerialNumber
	if second.Cmp(first) == 0 {
		t.Fatal("the node still presents its first certificate")
	}
	if second.Cmp(node.Current().Leaf().SerialNumber) != 0 {
		t.Fatal("the node presents another certificate than its current one")
	}

	// A key that does not match the certificate: kept, warned once.
	other := must[Files](t)(ca.WriteNode(t.TempDir(), "n1"))
	writeAtomic(t, nf.Key, must[[]byte](t)(os.ReadFile(other.Key)))
	for i := 0; i < 3; i++ {
		o = connect(t, server, dial)
		if err := o.err(); err != nil {
			t.Fatal(err)
		}
		if o.server.SerialNumber.Cmp(second) != 0 {
			t.Fatal("a broken reload changed the certificate")
		}
	}
	if warns := rec.Above(slog.LevelInfo); len(warns) != 1 || !strings.Contains(warns[0], "keeping the previous material") {
		t.Fatalf("warnings after a broken reload: %q", warns)
	}
	if err := node.Reload(); err == nil || !strings.Contains(err.Error(), "private key does not match") {
		t.Fatalf("Reload of a mismatched pair: %v", err)
	}
	if err := os.Remove(nf.CA); err != nil {
		t.Fatal(err)
	}
	if err := node.Reload(); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Reload without a CA file: %v", err)
	}
	if err := ca.WriteCA(dir); err != nil {
		t.Fatal(err)
	}
	must[Files](t)(ca.WriteNode(dir, "n1"))
	if err := node.Reload(); err != nil {
		t.Fatal(err)
	}
	o = connect(t, server, dial)
	if err := o.err(); err != nil {
		t.Fatal(err)
	}
	if o.server.SerialNumber.Cmp(second) == 0 {
		t.Fatal("a good reload after a broken one did not change the certificate")
	}
}

// Files are looked at no more often than every CheckInterval.
func TestReloadInterval(t *testing.T) {
	ca := testCA(t, "test-ca")
	dir := t.TempDir()
	if err := ca.WriteCA(dir); err != nil {
		t.Fatal(err)
	}
	f := must[Files](t)(ca.WriteNode(dir, "n1"))
	f.Logger = slog.New(slog.DiscardHandler)
	r := must[*Reloader](t)(Load(f))
	first := r.Current().Leaf().SerialNumber
	must[Files](t)(ca.WriteNode(dir, "n1"))
	r.mu.Lock()
	r.checked = time.Now()
	r.mu.Unlock()
	if r.Current().Leaf().SerialNumber.Cmp(first) != 0 {
		t.Fatal("files looked at again within CheckInterval")
	}
	r.mu.Lock()
	r.checked = time.Now().Add(-CheckInterval)
	r.mu.Unlock()
	if r.Current().Leaf().SerialNumber.Cmp(first) == 0 {
		t.Fatal("files changed CheckInterval ago not reloaded")
	}
}

// Load fails on files it cannot use.
func TestLoadErrors(t *testing.T) {
	ca := testCA(t, "test-ca")
	dir := t.TempDir()
	if err := ca.WriteCA(dir); err != nil {
		t.Fatal(err)
	}
	f := must[Files](t)(ca.WriteNode(dir, "n1"))
	junk := filepath.Join(dir, "junk.pem")
	writeAtomic(t, junk, []byte("not PEM\n"))
	for name, bad := range map[string]Files{
		"missing CA":     {CA: filepath.Join(dir, "none.pem"), Cert: f.Cert, Key: f.Key},
		"CA not PEM":     {CA: junk, Cert: f.Cert, Key: f.Key},
		"key as CA":      {CA: f.Key, Cert: f.Cert, Key: f.Key},
		"missing cert":   {CA: f.CA, Cert: filepath.Join(dir, "none.pem"), Key: f.Key},
		"cert not PEM":   {CA: f.CA, Cert: junk, Key: f.Key},
		"key of another": {CA: f.CA, Cert: f.Cert, Key: filepath.Join(dir, CAKeyFile)},
	} {
		if _, err := Load(bad); err == nil {
			t.Errorf("%s: loaded", name)
		}
	}
}

// A CA rotated in three steps, each written over the files of a running
// node and client: (1) both trust the old and the new CA, (2) both hold
// certificates from the new CA, (3) both trust the new CA alone. Nothing
// fails in between, and at the end the old CA's certificates are refused
// both ways.
func TestCARotation(t *testing.T) {
	oldCA, newCA := testCA(t, "ca-1"), testCA(t, "ca-2")
	ndir, cdir := t.TempDir(), t.TempDir()
	for _, d := range []string{ndir, cdir} {
		if err := oldCA.WriteCA(d); err != nil {
			t.Fatal(err)
		}
	}
	nf := must[Files](t)(oldCA.WriteNode(ndir, "n1"))
	cf := must[Files](t)(oldCA.WriteClient(cdir, "alice"))
	node, nrec := loadNow(t, nf)
	client, crec := loadNow(t, cf)
	server, dial := node.ServerConfig(), client.ClientConfig("127.0.0.1")
	check := func(step string, nodeIssuer, clientIssuer *CA) {
		t.Helper()
		o := connect(t, server, dial)
		if err := o.err(); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		if o.server.Issuer.CommonName != nodeIssuer.cert.Subject.CommonName || o.client.Issuer.CommonName != clientIssuer.cert.Subject.CommonName {
			t.Fatalf("%s: node's certificate from %s, client's from %s", step, o.server.Issuer.CommonName, o.client.Issuer.CommonName)
		}
	}
	check("before", oldCA, oldCA)

	for _, f := range []Files{nf, cf} {
		writeAtomic(t, f.CA, oldCA.CAPEM(), newCA.CAPEM())
	}
	check("both CAs trusted", oldCA, oldCA)

	must[Files](t)(newCA.WriteNode(ndir, "n1"))
	check("node's certificate from the new CA, client's from the old", newCA, oldCA)
	must[Files](t)(newCA.WriteClient(cdir, "alice"))
	check("both certificates from the new CA", newCA, newCA)

	for _, f := range []Files{nf, cf} {
		writeAtomic(t, f.CA, newCA.CAPEM())
	}
	check("new CA alone", newCA, newCA)

	oldClient := must[*Material](t)(oldCA.Client("alice"))
	if o := connect(t, server, oldClient.ClientConfig("127.0.0.1")); o.serverErr == nil {
		t.Fatal("after the rotation, the node accepts a client certificate from the old CA")
	}
	oldNode := must[*Material](t)(oldCA.Node("n1"))
	if o := connect(t, oldNode.ServerConfig(), dial); o.clientErr == nil {
		t.Fatal("after the rotation, the client accepts a node certificate from the old CA")
	}
	for _, rec := range []*testutil.Recorder{nrec, crec} {
		for _, w := range rec.Above(slog.LevelInfo) {
			t.Errorf("logged during the rotation: %s", w)
		}
	}
}

func TestCA(t *testing.T) {
	ca := testCA(t, "test-ca")
	dir := filepath.Join(t.TempDir(), "certs")
	if err := ca.WriteCA(dir); err != nil {
		t.Fatal(err)
	}
	f := must[Files](t)(ca.WriteNode(dir, "n1", "node1.example", "10.0.0.1", "localhost"))
	if want := (Files{CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(dir, "n1.pem"), Key: filepath.Join(dir, "n1-key.pem")}); f != want {
		t.Fatalf("files %+v, want %+v", f, want)
	}
	for name, perm := range map[string]os.FileMode{"ca.pem": 0o644, "ca-key.pem": 0o600, "n1.pem": 0o644, "n1-key.pem": 0o600} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != perm {
			t.Errorf("%s: mode %v, want %v", name, fi.Mode().Perm(), perm)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 4 {
		t.Errorf("%d files in the directory, want 4 (no temporary file left)", len(entries))
	}
	leaf := must[*Reloader](t)(Load(f)).Current().Leaf()
	if got := fmt.Sprint(leaf.DNSNames, leaf.IPAddresses); got != "[localhost node1.example] [127.0.0.1 ::1 10.0.0.1]" {
		t.Errorf("SANs %s", got)
	}
	if fmt.Sprint(leaf.ExtKeyUsage) != fmt.Sprint([]x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}) {
		t.Errorf("node EKU %v", leaf.ExtKeyUsage)
	}
	if d := leaf.NotAfter.Sub(leaf.NotBefore); d != CertValidity+backdate {
		t.Errorf("node certificate valid for %v", d)
	}
	if leaf.PublicKeyAlgorithm != x509.ECDSA || leaf.SignatureAlgorithm != x509.ECDSAWithSHA256 {
		t.Errorf("key %v, signature %v", leaf.PublicKeyAlgorithm, leaf.SignatureAlgorithm)
	}
	c := must[*Material](t)(ca.Client("alice")).Leaf()
	if len(c.DNSNames)+len(c.IPAddresses) != 0 || fmt.Sprint(c.ExtKeyUsage) != fmt.Sprint([]x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}) {
		t.Errorf("client certificate: SANs %v %v, EKU %v", c.DNSNames, c.IPAddresses, c.ExtKeyUsage)
	}

	// A CA read back issues certificates the first one's trust accepts.
	again := must[*CA](t)(LoadCA(dir))
	if string(again.CAPEM()) != string(ca.CAPEM()) {
		t.Fatal("LoadCA read another CA")
	}
	o := connect(t, must[*Material](t)(again.Node("n2")).ServerConfig(), must[*Material](t)(ca.Client("alice")).ClientConfig("127.0.0.1"))
	if err := o.err(); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadCA(t.TempDir()); err == nil {
		t.Fatal("LoadCA of an empty directory")
	}
	if _, err := ca.WriteNode(dir, "../n3"); err == nil {
		t.Fatal("a name with a path was written")
	}
	if _, err := ca.Node(""); err == nil {
		t.Fatal("a certificate for an empty name")
	}
}
