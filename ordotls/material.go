package ordotls

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
)

// Source yields the TLS configurations of one process: ServerConfig for
// its listener, ClientConfig for each server it dials. The configurations
// present and trust the source's current material at every handshake, so
// material that changes (a Reloader's) reaches new connections without
// new configurations. Implementations are safe for concurrent use.
type Source interface {
	// ServerConfig returns a listener's configuration: TLS 1.3, the
	// current certificate, and a client certificate required and verified
	// against the current CAs (for client authentication).
	ServerConfig() *tls.Config
	// ClientConfig returns the configuration for dialing serverName, a DNS
	// name or an IP address without port: TLS 1.3, the current certificate
	// presented, and the server's certificate verified against the current
	// CAs (for server authentication) and serverName. An empty serverName
	// refuses every server.
	ClientConfig(serverName string) *tls.Config
}

var (
	_ Source = (*Material)(nil)
	_ Source = (*Reloader)(nil)
)

// Material is fixed TLS material: the CAs a process trusts and the
// certificate it presents. It never changes; safe for concurrent use.
type Material struct {
	pool   *x509.CertPool
	cert   tls.Certificate
	server *tls.Config // what a listener uses, built once
}

// NewMaterial parses a bundle of one or more PEM CA certificates and a PEM
// certificate chain (leaf first) with its PEM private key.
func NewMaterial(caPEM, certPEM, keyPEM []byte) (*Material, error) {
	pool, err := parseCAs(caPEM)
	if err != nil {
		return nil, err
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("ordotls: certificate and key: %w", err)
	}
	if cert.Leaf == nil {
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, fmt.Errorf("ordotls: certificate: %w", err)
		}
	}
	m := &Material{pool: pool, cert: cert}
	m.server = &tls.Config{
		MinVersion:             tls.VersionTLS13,
		Certificates:           []tls.Certificate{cert},
		ClientAuth:             tls.RequireAndVerifyClientCert,
		ClientCAs:              pool,
		SessionTicketsDisabled: true,
	}
	return m, nil
}

// parseCAs reads every certificate of a PEM bundle into a pool; anything
// but certificates, or no certificate at all, is an error.
func parseCAs(bundle []byte) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	n := 0
	for rest := bundle; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("ordotls: CA bundle holds a %q PEM block, want only CERTIFICATE", block.Type)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("ordotls: CA bundle: %w", err)
		}
		pool.AddCert(c)
		n++
	}
	if n == 0 {
		return nil, errors.New("ordotls: CA bundle holds no PEM certificate")
	}
	return pool, nil
}

// Leaf returns the certificate the material presents. The caller must not
// modify it.
func (m *Material) Leaf() *x509.Certificate { return m.cert.Leaf }

// ServerConfig implements Source.
func (m *Material) ServerConfig() *tls.Config { return serverConfig(func() *Material { return m }) }

// ClientConfig implements Source.
func (m *Material) ClientConfig(serverName string) *tls.Config {
	return clientConfig(serverName, func() *Material { return m })
}

// serverConfig returns a listener configuration that takes, at each
// handshake, the certificate and CAs of current().
func serverConfig(current func() *Material) *tls.Config {
	return &tls.Config{
		MinVersion:             tls.VersionTLS13,
		ClientAuth:             tls.RequireAndVerifyClientCert,
		SessionTicketsDisabled: true,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return current().server.Clone(), nil
		},
	}
}

// clientConfig returns a configuration for dialing serverName that
// presents, and verifies the server against, the material of current() at
// each handshake. The standard verification is off because it would use a
// fixed RootCAs; VerifyConnection does the same checks against the
// current CAs. The name it checks is serverName, bound here: the
// connection state carries no server name when an IP address was dialed
// (no SNI is sent for one), and a check against an empty name would skip
// the host check altogether.
func clientConfig(serverName string, current func() *Material) *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS13,
		ServerName:         serverName,
		InsecureSkipVerify: true, // VerifyConnection verifies, against the current CAs
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			c := current().cert
			return &c, nil
		},
		VerifyConnection: func(cs tls.ConnectionState) error {
			return current().verifyServer(cs.PeerCertificates, serverName)
		},
	}
}

// verifyServer checks a server's chain (leaf first) as crypto/tls would:
// it leads to one of m's CAs, is valid now for server authentication, and
// names serverName (a DNS name, or an IP address among the IP SANs).
func (m *Material) verifyServer(chain []*x509.Certificate, serverName string) error {
	if serverName == "" {
		return errors.New("ordotls: no server name to verify the server's certificate against")
	}
	if len(chain) == 0 {
		return errors.New("ordotls: the server presented no certificate")
	}
	opts := x509.VerifyOptions{
		Roots:         m.pool,
		Intermediates: x509.NewCertPool(),
		DNSName:       serverName,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, c := range chain[1:] {
		opts.Intermediates.AddCert(c)
	}
	if _, err := chain[0].Verify(opts); err != nil {
		return fmt.Errorf("ordotls: server certificate: %w", err)
	}
	return nil
}
