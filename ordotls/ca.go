package ordotls

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Validity of what a CA creates. Certificates start an hour in the past so
// that a peer whose clock is a little behind accepts them.
const (
	CAValidity   = 5 * 365 * 24 * time.Hour
	CertValidity = 365 * 24 * time.Hour
	backdate     = time.Hour
)

// File names in a certificate directory (see CA.WriteCA, CA.WriteNode).
const (
	CAFile    = "ca.pem"
	CAKeyFile = "ca-key.pem"
)

// CA is a throw-away certificate authority for tests and demos: a
// self-signed ECDSA P-256 CA certificate and its key, kept in memory
// unless written out. It issues node certificates (server and client
// authentication) and client certificates (client authentication). A
// production cluster brings certificates from its own PKI, or guards the
// key of a CA made here like any other secret. Safe for concurrent use.
type CA struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
	keyPEM  []byte
}

// NewCA creates a CA named commonName, valid for CAValidity.
func NewCA(commonName string) (*CA, error) {
	if commonName == "" {
		return nil, errors.New("ordotls: NewCA: empty common name")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("ordotls: CA key: %w", err)
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(CAValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("ordotls: CA certificate: %w", err)
	}
	return newCA(der, key)
}

// LoadCA reads a CA written by WriteCA from dir (ca.pem, ca-key.pem), to
// issue more certificates.
func LoadCA(dir string) (*CA, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, CAFile))
	if err != nil {
		return nil, fmt.Errorf("ordotls: %w", err)
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, CAKeyFile))
	if err != nil {
		return nil, fmt.Errorf("ordotls: %w", err)
	}
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || cb.Type != "CERTIFICATE" || kb == nil || kb.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("ordotls: %s: want a CERTIFICATE in %s and a PRIVATE KEY in %s", dir, CAFile, CAKeyFile)
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("ordotls: %s: %w", CAKeyFile, err)
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("ordotls: %s: not an ECDSA key", CAKeyFile)
	}
	ca, err := newCA(cb.Bytes, key)
	if err != nil {
		return nil, err
	}
	if !ca.cert.IsCA || !key.PublicKey.Equal(ca.cert.PublicKey) {
		return nil, fmt.Errorf("ordotls: %s: %s is not a CA certificate of the key in %s", dir, CAFile, CAKeyFile)
	}
	return ca, nil
}

func newCA(der []byte, key *ecdsa.PrivateKey) (*CA, error) {
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("ordotls: CA certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("ordotls: CA key: %w", err)
	}
	return &CA{cert: cert, key: key,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})}, nil
}

// CAPEM returns the CA certificate in PEM: what every process of the
// cluster trusts (Files.CA).
func (ca *CA) CAPEM() []byte { return append([]byte(nil), ca.certPEM...) }

// KeyPEM returns the CA's private key in PEM (PKCS #8). Whoever holds it
// can issue certificates the cluster accepts.
func (ca *CA) KeyPEM() []byte { return append([]byte(nil), ca.keyPEM...) }

// Issue returns a node certificate and its key, in PEM: subject common
// name name, valid for CertValidity (not beyond the CA), for server and
// client authentication, with subject alternative names 127.0.0.1, ::1,
// localhost and hosts (IP addresses or DNS names: every address peers
// dial the node by).
func (ca *CA) Issue(name string, hosts ...string) (certPEM, keyPEM []byte, err error) {
	tmpl := &x509.Certificate{ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	seen := map[string]bool{}
	for _, h := range append([]string{"127.0.0.1", "::1", "localhost"}, hosts...) {
		if h == "" || seen[h] {
			continue
		}
		seen[h] = true
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	return ca.issue(name, tmpl)
}

// IssueClient returns a client certificate and its key, in PEM: subject
// common name name, valid for CertValidity (not beyond the CA), for client
// authentication only. A process holding it can call nodes but not serve
// as one.
func (ca *CA) IssueClient(name string) (certPEM, keyPEM []byte, err error) {
	return ca.issue(name, &x509.Certificate{ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
}

func (ca *CA) issue(name string, tmpl *x509.Certificate) (certPEM, keyPEM []byte, err error) {
	if name == "" {
		return nil, nil, errors.New("ordotls: certificate for an empty name")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("ordotls: key: %w", err)
	}
	if tmpl.SerialNumber, err = serialNumber(); err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl.Subject = pkix.Name{CommonName: name}
	tmpl.NotBefore = now.Add(-backdate)
	tmpl.NotAfter = now.Add(CertValidity)
	if tmpl.NotAfter.After(ca.cert.NotAfter) {
		tmpl.NotAfter = ca.cert.NotAfter
	}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("ordotls: certificate for %q: %w", name, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("ordotls: key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), nil
}

// Node issues a node certificate (see Issue) and returns it as Material
// that trusts this CA alone.
func (ca *CA) Node(name string, hosts ...string) (*Material, error) {
	cert, key, err := ca.Issue(name, hosts...)
	if err != nil {
		return nil, err
	}
	return NewMaterial(ca.certPEM, cert, key)
}

// Client issues a client certificate (see IssueClient) and returns it as
// Material that trusts this CA alone.
func (ca *CA) Client(name string) (*Material, error) {
	cert, key, err := ca.IssueClient(name)
	if err != nil {
		return nil, err
	}
	return NewMaterial(ca.certPEM, cert, key)
}

// WriteCA writes the CA certificate to dir/ca.pem and its key to
// dir/ca-key.pem (readable by the owner only), creating dir if needed.
func (ca *CA) WriteCA(dir string) error {
	if err := writeFile(dir, CAFile, ca.certPEM, 0o644); err != nil {
		return err
	}
	return writeFile(dir, CAKeyFile, ca.keyPEM, 0o600)
}

// WriteNode issues a node certificate (see Issue), writes it to
// dir/<name>.pem and its key to dir/<name>-key.pem, and returns the Files
// of a node that uses them with dir/ca.pem (written by WriteCA).
func (ca *CA) WriteNode(dir, name string, hosts ...string) (Files, error) {
	cert, key, err := ca.Issue(name, hosts...)
	if err != nil {
		return Files{}, err
	}
	return writePair(dir, name, cert, key)
}

// WriteClient issues a client certificate (see IssueClient) and writes it
// as WriteNode does.
func (ca *CA) WriteClient(dir, name string) (Files, error) {
	cert, key, err := ca.IssueClient(name)
	if err != nil {
		return Files{}, err
	}
	return writePair(dir, name, cert, key)
}

func writePair(dir, name string, cert, key []byte) (Files, error) {
	if filepath.Base(name) != name || name == "." || name == ".." {
		return Files{}, fmt.Errorf("ordotls: %q cannot name a file", name)
	}
	f := Files{CA: filepath.Join(dir, CAFile), Cert: filepath.Join(dir, name+".pem"), Key: filepath.Join(dir, name+"-key.pem")}
	// The key first: a Reloader that looks between the two writes sees a
	// pair that does not match and keeps its material until the second.
	if err := writeFile(dir, name+"-key.pem", key, 0o600); err != nil {
		return Files{}, err
	}
	if err := writeFile(dir, name+".pem", cert, 0o644); err != nil {
		return Files{}, err
	}
	return f, nil
}

// writeFile replaces dir/name with data atomically (a temporary file
// renamed over it), so that a reader never sees part of it.
func writeFile(dir, name string, data []byte, perm os.FileMode) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("ordotls: %w", err)
	}
	tmp, err := os.CreateTemp(dir, "."+name+".tmp*")
	if err != nil {
		return fmt.Errorf("ordotls: %w", err)
	}
	defer os.Remove(tmp.Name()) // fails harmlessly once renamed
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("ordotls: %w", err)
	}
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return fmt.Errorf("ordotls: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("ordotls: %w", err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, name)); err != nil {
		return fmt.Errorf("ordotls: %w", err)
	}
	return nil
}

func serialNumber() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("ordotls: serial number: %w", err)
	}
	return n.Add(n, big.NewInt(1)), nil // never 0
}
