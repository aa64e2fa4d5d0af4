package ordotls_test

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/ordo-actors/ordo/ordotls"
)

// TLS material from files, as a node and a client of a cluster would
// load it (cluster.Config.TLS and cluster.ClientConfig.TLS take the
// Reloader). The files are re-read when they change: a rotated
// certificate is used by new connections without a restart.
func ExampleLoad() {
	dir, err := os.MkdirTemp("", "ordotls-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	writeExampleCerts(dir) // ca.pem, n1.pem, n1-key.pem, alice.pem, alice-key.pem

	node, err := ordotls.Load(ordotls.Files{
		CA:   filepath.Join(dir, "ca.pem"),
		Cert: filepath.Join(dir, "n1.pem"),
		Key:  filepath.Join(dir, "n1-key.pem"),
	})
	if err != nil {
		panic(err)
	}
	client, err := ordotls.Load(ordotls.Files{
		CA:     filepath.Join(dir, "ca.pem"),
		Cert:   filepath.Join(dir, "alice.pem"),
		Key:    filepath.Join(dir, "alice-key.pem"),
		Logger: slog.Default(), // where reloads are reported
	})
	if err != nil {
		panic(err)
	}

	// The node listens, the client dials it by its address: each verifies
	// the other's certificate.
	ln, err := tls.Listen("tcp", "127.0.0.1:0", node.ServerConfig())
	if err != nil {
		panic(err)
	}
	defer ln.Close()
	caller := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			panic(err)
		}
		defer c.Close()
		tc := c.(*tls.Conn)
		if err := tc.Handshake(); err != nil {
			caller <- err.Error()
			return
		}
		caller <- tc.ConnectionState().VerifiedChains[0][0].Subject.CommonName
		_, _ = tc.Write([]byte("ok"))
	}()
	conn, err := tls.Dial("tcp", ln.Addr().String(), client.ClientConfig("127.0.0.1"))
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	reply := make([]byte, 2)
	if _, err := conn.Read(reply); err != nil {
		panic(err)
	}
	fmt.Println("the client reached", conn.ConnectionState().PeerCertificates[0].Subject.CommonName)
	fmt.Println("the node sees its caller as", <-caller)
	// Output:
	// the client reached n1
	// the node sees its caller as alice
}

// writeExampleCerts is what a `certs` command does: a throw-away CA and
// certificates for a node and a client, written to dir.
func writeExampleCerts(dir string) {
	ca, err := ordotls.NewCA("example-ca")
	if err != nil {
		panic(err)
	}
	if err := ca.WriteCA(dir); err != nil { // ca.pem, ca-key.pem
		panic(err)
	}
	if _, err := ca.WriteNode(dir, "n1"); err != nil { // valid for 127.0.0.1, ::1, localhost
		panic(err)
	}
	if _, err := ca.WriteClient(dir, "alice"); err != nil {
		panic(err)
	}
}

// A throw-away CA for a test or a demo: material for a node and a client
// in memory, no files. The client verifies the node against the address
// it dials; the node refuses a client certificate from another CA.
func ExampleNewCA() {
	ca, err := ordotls.NewCA("test-ca")
	if err != nil {
		panic(err)
	}
	node, err := ca.Node("n1", "node1.internal") // SANs: 127.0.0.1, ::1, localhost, node1.internal
	if err != nil {
		panic(err)
	}
	client, err := ca.Client("alice") // client authentication only
	if err != nil {
		panic(err)
	}
	fmt.Println(node.Leaf().Subject.CommonName, node.Leaf().DNSNames, node.Leaf().IPAddresses)
	fmt.Println(client.Leaf().Subject.CommonName, client.Leaf().Issuer.CommonName)

	ln, err := tls.Listen("tcp", "127.0.0.1:0", node.ServerConfig())
	if err != nil {
		panic(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.(*tls.Conn).Handshake()
			_, _ = c.Write([]byte("ok"))
			c.Close()
		}
	}()
	dial := func(m *ordotls.Material) error {
		conn, err := tls.Dial("tcp", ln.Addr().String(), m.ClientConfig("127.0.0.1"))
		if err != nil {
			return err
		}
		defer conn.Close()
		_, err = conn.Read(make([]byte, 2)) // a refused certificate shows here
		return err
	}
	fmt.Println("alice:", dial(client))

	other, err := ordotls.NewCA("other-ca")
	if err != nil {
		panic(err)
	}
	cert, key, err := other.IssueClient("mallory")
	if err != nil {
		panic(err)
	}
	mallory, err := ordotls.NewMaterial(ca.CAPEM(), cert, key) // trusts test-ca, holds a certificate from other-ca
	if err != nil {
		panic(err)
	}
	fmt.Println("mallory:", dial(mallory))
	// Output:
	// n1 [localhost node1.internal] [127.0.0.1 ::1]
	// alice test-ca
	// alice: <nil>
	// mallory: remote error: tls: unknown certificate authority
}
