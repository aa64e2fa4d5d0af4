package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/ordo-actors/ordo/ordotls"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// etcdPasswordEnv names the environment variable that holds the etcd
// password when --etcd-password-file is not given.
const etcdPasswordEnv = "ORDO_ETCD_PASSWORD"

// secFlags are the security flags of every command that is a node or
// dials the cluster: the transport's mutual TLS (or --insecure) and how
// etcd is reached (TLS, user; the password from a file or the
// environment, never a flag).
type secFlags struct {
	tlsCA, tlsCert, tlsKey string
	insecure               bool
	etcdCA, etcdCert       string
	etcdKey, etcdUser      string
	etcdPasswordFile       string
}

func (f *secFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.tlsCA, "tls-ca", "", "CA bundle (PEM) the cluster's certificates are verified against (mutual TLS; see bank certs)")
	fs.StringVar(&f.tlsCert, "tls-cert", "", "this process's certificate (PEM); re-read when it changes")
	fs.StringVar(&f.tlsKey, "tls-key", "", "the certificate's private key (PEM)")
	fs.BoolVar(&f.insecure, "insecure", false, "plaintext transport instead of mutual TLS: anyone who can reach a node can call any entity")
	fs.StringVar(&f.etcdCA, "etcd-ca", "", "CA bundle (PEM) etcd's certificate is verified against (etcd over TLS; https:// endpoints)")
	fs.StringVar(&f.etcdCert, "etcd-cert", "", "client certificate (PEM) presented to etcd")
	fs.StringVar(&f.etcdKey, "etcd-key", "", "the etcd client certificate's private key (PEM)")
	fs.StringVar(&f.etcdUser, "etcd-user", "", "etcd user, when etcd's auth is on; the password comes from --etcd-password-file or $"+etcdPasswordEnv)
	fs.StringVar(&f.etcdPasswordFile, "etcd-password-file", "", "file holding the etcd user's password (default $"+etcdPasswordEnv+")")
}

// transportTLS returns the transport's TLS source (Load: re-read when the
// files change), or insecure; a usage error when the flags choose neither,
// both, or only some of the files.
func (f *secFlags) transportTLS() (src ordotls.Source, insecure bool, err error) {
	files := f.tlsCA != "" || f.tlsCert != "" || f.tlsKey != ""
	switch {
	case files && f.insecure:
		return nil, false, usagef("--insecure excludes --tls-ca, --tls-cert and --tls-key")
	case f.insecure:
		return nil, true, nil
	case !files:
		return nil, false, usagef("mutual TLS (--tls-ca, --tls-cert, --tls-key; 'bank certs' writes them) or --insecure (plaintext) is required")
	case f.tlsCA == "" || f.tlsCert == "" || f.tlsKey == "":
		return nil, false, usagef("--tls-ca, --tls-cert and --tls-key go together")
	}
	r, err := ordotls.Load(ordotls.Files{CA: f.tlsCA, Cert: f.tlsCert, Key: f.tlsKey})
	if err != nil {
		return nil, false, usageError{err}
	}
	return r, false, nil
}

// etcdSecurity returns etcd's TLS configuration (nil without --etcd-*
// files), user and password.
func (f *secFlags) etcdSecurity() (tc *tls.Config, user, password string, err error) {
	if (f.etcdCert == "") != (f.etcdKey == "") {
		return nil, "", "", usagef("--etcd-cert and --etcd-key go together")
	}
	if f.etcdCA != "" || f.etcdCert != "" {
		// etcd's own loader: the certificate is re-read at each handshake.
		info := transport.TLSInfo{TrustedCAFile: f.etcdCA, CertFile: f.etcdCert, KeyFile: f.etcdKey, Logger: zap.NewNop()}
		if tc, err = info.ClientConfig(); err != nil {
			return nil, "", "", usagef("etcd TLS: %v", err)
		}
	}
	password = os.Getenv(etcdPasswordEnv)
	if f.etcdPasswordFile != "" {
		b, err := os.ReadFile(f.etcdPasswordFile)
		if err != nil {
			return nil, "", "", usagef("--etcd-password-file: %v", err)
		}
		password = strings.TrimRight(string(b), "\r\n")
	}
	switch {
	case f.etcdUser == "" && f.etcdPasswordFile != "":
		return nil, "", "", usagef("--etcd-password-file needs --etcd-user")
	case f.etcdUser == "":
		password = ""
	case password == "":
		return nil, "", "", usagef("--etcd-user needs a password: --etcd-password-file FILE or $%s", etcdPasswordEnv)
	}
	return tc, f.etcdUser, password, nil
}

// etcdClient returns the configuration of an etcd client of endpoints
// with the flags' security (the etcd store's own client).
func (f *secFlags) etcdClient(endpoints []string) (clientv3.Config, error) {
	tc, user, password, err := f.etcdSecurity()
	if err != nil {
		return clientv3.Config{}, err
	}
	return clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		TLS: tc, Username: user, Password: password}, nil
}

// readSecretFile reads a secret (a token) from path, without its trailing
// newline; an empty one is an error.
func readSecretFile(flag, path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", usagef("--%s: %v", flag, err)
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "", usagef("--%s %s is empty", flag, path)
	}
	return s, nil
}

// clientCertName is the certificate name `bank certs` gives the clients.
const clientCertName = "client"

// etcdCertDir is the subdirectory of `bank certs --dir` that holds the
// etcd members' own CA and certificates.
const etcdCertDir = "etcd"

func newCertsCmd() *cobra.Command {
	var (
		dir                   string
		nodes, hosts, members []string
	)
	cmd := &cobra.Command{
		Use:   "certs --dir D --nodes n1,n2,n3 [--hosts h1,h2] [--etcd e1,e2,e3]",
		Short: "Write a CA, node certificates and a client certificate for a bank cluster's mutual TLS (and etcd's)",
		Long: `certs writes, into --dir, the PEM files of a bank cluster's mutual TLS:
ca.pem and ca-key.pem (a new CA, or the one already in --dir, reused), for
each node nX.pem and nX-key.pem (server and client authentication, valid for
127.0.0.1, ::1, localhost and --hosts), and client.pem and client-key.pem
(client authentication only) for the client commands. Keys are readable by
their owner only. Give each process --tls-ca D/ca.pem and its own --tls-cert
and --tls-key; keep ca-key.pem away from the nodes.

With --etcd, it also writes the files of etcd's TLS into D/etcd/, under a
CA of their own (so that a certificate of the cluster's, a client's above
all, gives no access to etcd): ca.pem and ca-key.pem, each member's eX.pem
and eX-key.pem (server and client authentication, for its client and peer
URLs: bank etcd --tls-ca D/etcd/ca.pem --tls-cert D/etcd/eX.pem --tls-key
D/etcd/eX-key.pem), and the etcd client certificates of each node and of
the clients, D/etcd/nX.pem and D/etcd/client.pem (client authentication
only: --etcd-ca D/etcd/ca.pem --etcd-cert D/etcd/nX.pem --etcd-key
D/etcd/nX-key.pem).`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" {
				return usagef("--dir is required")
			}
			if len(nodes) == 0 {
				return usagef("--nodes is required")
			}
			for _, n := range slices.Concat(nodes, hosts, members) {
				if n == "" {
					return usagef("--nodes, --hosts and --etcd take non-empty names")
				}
			}
			for _, m := range members {
				if m == clientCertName || slices.Contains(nodes, m) {
					return usagef("--etcd member %q: its certificate would share a name with a node's or the clients' etcd certificate", m)
				}
			}
			if err := writeCerts(cmd.OutOrStdout(), dir, nodes, hosts); err != nil {
				return err
			}
			if len(members) == 0 {
				return nil
			}
			return writeEtcdCerts(cmd.OutOrStdout(), filepath.Join(dir, etcdCertDir), members, nodes, hosts)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&dir, "dir", "", "directory to write the files to, created if needed (required)")
	fs.StringSliceVar(&nodes, "nodes", nil, "node IDs, comma-separated: one certificate each (required)")
	fs.StringSliceVar(&hosts, "hosts", nil, "more host names or IP addresses the nodes and etcd members are dialed by, comma-separated")
	fs.StringSliceVar(&members, "etcd", nil, "etcd member names, comma-separated: also write etcd's CA, member and client certificates into DIR/etcd")
	return cmd
}

// caIn returns the CA kept in dir, or a new one named name written there.
func caIn(w io.Writer, dir, name string) (*ordotls.CA, error) {
	ca, err := ordotls.LoadCA(dir)
	switch {
	case err == nil:
		fmt.Fprintf(w, "reusing the CA in %s\n", filepath.Join(dir, ordotls.CAFile))
		return ca, nil
	case errors.Is(err, os.ErrNotExist):
		if _, serr := os.Stat(filepath.Join(dir, ordotls.CAFile)); serr == nil {
			return nil, fmt.Errorf("%s exists without its key %s: cannot issue certificates", filepath.Join(dir, ordotls.CAFile), ordotls.CAKeyFile)
		}
		if ca, err = ordotls.NewCA(name); err != nil {
			return nil, err
		}
		if err := ca.WriteCA(dir); err != nil {
			return nil, err
		}
		fmt.Fprintf(w, "wrote %s and %s\n", filepath.Join(dir, ordotls.CAFile), filepath.Join(dir, ordotls.CAKeyFile))
		return ca, nil
	default:
		return nil, err
	}
}

// writeCerts writes the cluster's files `bank certs` describes and lists
// them on w.
func writeCerts(w io.Writer, dir string, nodes, hosts []string) error {
	ca, err := caIn(w, dir, "ordo bank CA")
	if err != nil {
		return err
	}
	for _, n := range nodes {
		f, err := ca.WriteNode(dir, n, hosts...)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "wrote %s and %s\n", f.Cert, f.Key)
	}
	f, err := ca.WriteClient(dir, clientCertName)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "wrote %s and %s\n", f.Cert, f.Key)
	return nil
}

// writeEtcdCerts writes etcd's files `bank certs --etcd` describes into
// dir and lists them on w.
func writeEtcdCerts(w io.Writer, dir string, members, nodes, hosts []string) error {
	ca, err := caIn(w, dir, "ordo bank etcd CA")
	if err != nil {
		return err
	}
	for _, m := range members {
		f, err := ca.WriteNode(dir, m, hosts...)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "wrote %s and %s\n", f.Cert, f.Key)
	}
	for _, n := range append(slices.Clone(nodes), clientCertName) {
		f, err := ca.WriteClient(dir, n)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "wrote %s and %s\n", f.Cert, f.Key)
	}
	return nil
}
