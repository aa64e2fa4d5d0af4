package cluster

import (
	"crypto/tls"
	"testing"

	"github.com/stretchr/testify/require"
)

// Plaintext etcd endpoints off this machine's loopback are the ones worth
// a warning.
func TestPlaintextEtcd(t *testing.T) {
	eps := []string{"http://127.0.0.1:2379", "http://localhost:2379", "http://[::1]:2379", "127.0.0.2:2379",
		"https://etcd.example:2379", "unix:///run/etcd.sock", "http://etcd.example:2379", "10.0.0.7:2379"}
	require.Equal(t, []string{"http://etcd.example:2379", "10.0.0.7:2379"}, plaintextEtcd(eps, nil))
	// With TLS, an endpoint without a scheme is dialed over TLS.
	require.Equal(t, []string{"http://etcd.example:2379"}, plaintextEtcd(eps, &tls.Config{}))
}
