package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// etcdAccess is how a node or client reaches etcd (Config.EtcdEndpoints,
// EtcdTLS, EtcdUsername, EtcdPassword and their ClientConfig twins).
type etcdAccess struct {
	endpoints          []string
	timeout            time.Duration
	tls                *tls.Config
	username, password string
}

// checkEtcdSecurity checks the etcd security settings against the
// endpoints: a username goes with a password, and TLS with no http://
// endpoint (the etcd client would drop TLS for it, and send the password
// in plaintext).
func checkEtcdSecurity(endpoints []string, tc *tls.Config, username, password string) error {
	if (username == "") != (password == "") {
		return errors.New("cluster: EtcdUsername and EtcdPassword go together")
	}
	if tc == nil {
		return nil
	}
	for _, ep := range endpoints {
		if strings.HasPrefix(ep, "http://") {
			return fmt.Errorf("cluster: etcd endpoint %q is plaintext but EtcdTLS is set: use https://", ep)
		}
	}
	return nil
}

// plaintextEtcd returns the endpoints a connection with TLS tc would reach
// in plaintext on another host than this one's loopback.
func plaintextEtcd(endpoints []string, tc *tls.Config) []string {
	var out []string
	for _, ep := range endpoints {
		hostport, scheme := ep, ""
		if u, err := url.Parse(ep); err == nil && strings.Contains(ep, "://") {
			hostport, scheme = u.Host, u.Scheme
		}
		if scheme == "https" || scheme == "unixs" || scheme == "unix" || (tc != nil && scheme == "") {
			continue
		}
		host, _, err := net.SplitHostPort(hostport)
		if err != nil {
			host = hostport
		}
		if !isLoopback(host) {
			out = append(out, ep)
		}
	}
	return out
}

// isLoopback reports whether host (an IP address or a name) is this
// machine's loopback: "localhost" or an address in 127.0.0.0/8 or ::1.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// dialEtcd connects to etcd with a's TLS and credentials, and checks that
// it answers; the client logs through log (etcdLogger). It warns, once,
// when etcd is reached in plaintext on another host.
func dialEtcd(ctx context.Context, a etcdAccess, log *slog.Logger) (*clientv3.Client, error) {
	if err := checkEtcdSecurity(a.endpoints, a.tls, a.username, a.password); err != nil {
		return nil, err
	}
	if eps := plaintextEtcd(a.endpoints, a.tls); len(eps) > 0 {
		log.Warn("etcd reached without TLS on another host: placement and any credentials travel in plaintext",
			"endpoints", eps)
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: a.endpoints, DialTimeout: a.timeout, Logger: etcdLogger(log),
		TLS: a.tls, Username: a.username, Password: a.password})
	if err != nil {
		return nil, fmt.Errorf("cluster: etcd %v: %w", a.endpoints, err)
	}
	sctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	if _, err := c.Get(sctx, "/ordo-ping"); err != nil {
		c.Close()
		return nil, fmt.Errorf("cluster: etcd %v unreachable: %w", a.endpoints, err)
	}
	return c, nil
}
