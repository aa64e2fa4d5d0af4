package cluster

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strings"
)

// ErrGossipKey is matched (errors.Is) by the errors about a malformed
// gossip key or key file. They never include key material.
var ErrGossipKey = errors.New("cluster: invalid gossip key")

var errGossipPlaintext = errors.New("cluster: gossip is not encrypted (the node was started without Config.GossipKeys)")

// GossipKeySize is the size of the keys GenerateGossipKey makes (AES-256).
const GossipKeySize = 32

// GenerateGossipKey returns a new random gossip key of GossipKeySize bytes.
func GenerateGossipKey() ([]byte, error) {
	k := make([]byte, GossipKeySize)
	if _, err := rand.Read(k); err != nil {
		return nil, fmt.Errorf("cluster: generating a gossip key: %w", err)
	}
	return k, nil
}

// ReadGossipKeys reads a gossip key file: one key per line in standard
// base64 (16, 24 or 32 bytes once decoded), the first line the primary
// key (see Config.GossipKeys). Blank lines and lines starting with '#'
// are skipped. It fails, with an error matching ErrGossipKey, on a
// malformed line or a file without keys. Keep the file readable by the
// node's user only; WriteGossipKeys makes it so.
func ReadGossipKeys(path string) ([][]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("cluster: gossip key file: %w", err)
	}
	defer f.Close()
	var keys [][]byte
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		s := strings.TrimSpace(sc.Text())
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		k, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return nil, fmt.Errorf("%w: %s line %d: not base64", ErrGossipKey, path, line)
		}
		if err := validGossipKey(k); err != nil {
			return nil, fmt.Errorf("%w: %s line %d: %v", ErrGossipKey, path, line, err)
		}
		keys = append(keys, k)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrGossipKey, path, err)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w: %s holds no key", ErrGossipKey, path)
	}
	return keys, nil
}

// WriteGossipKeys writes keys to path in the format ReadGossipKeys reads,
// the first the primary, creating or truncating the file with mode 0600.
func WriteGossipKeys(path string, keys [][]byte) error {
	if err := validGossipKeys(keys); err != nil {
		return err
	}
	var b bytes.Buffer
	for _, k := range keys {
		b.WriteString(base64.StdEncoding.EncodeToString(k))
		b.WriteByte('\n')
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("cluster: gossip key file: %w", err)
	}
	if _, err := f.Write(b.Bytes()); err != nil {
		f.Close()
		return fmt.Errorf("cluster: gossip key file: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("cluster: gossip key file: %w", err)
	}
	return nil
}

// SetGossipKeys replaces the node's gossip keys while it runs: keys[0]
// becomes the primary key (the one the node encrypts with), and only the
// keys given decrypt from then on. It fails when the node was started
// without Config.GossipKeys (turning encryption on or off needs a restart
// of every node) or when a key is invalid (ErrGossipKey). Safe for
// concurrent use once Start has returned.
//
// Rotating the key of a running cluster, with old the current key and new
// its replacement, takes three rounds; finish each on every node before
// the next, and keep the key file in step so that a restarted node comes
// back with the current keys:
//
//  1. SetGossipKeys([][]byte{old, new}): every node accepts new, none
//     sends with it yet.
//  2. SetGossipKeys([][]byte{new, old}): nodes send with new; old is still
//     accepted from nodes not yet switched.
//  3. SetGossipKeys([][]byte{new}): old is no longer accepted.
//
// A node whose keys share nothing with a peer's cannot gossip with it: each
// sees the other dead (placement does not move shards while leases renew,
// but failover slows to the lease TTL). Restarting every node with the
// changed key file, in the same three rounds, rotates keys without this
// method.
func (n *Node) SetGossipKeys(keys [][]byte) error {
	if !n.up.Load() || n.stopped.Load() {
		return errors.New("cluster: SetGossipKeys: node not running")
	}
	if err := validGossipKeys(keys); err != nil {
		return err
	}
	if err := n.members.setKeys(keys); err != nil {
		return err
	}
	n.log.Info("gossip keys changed", "keys", len(keys))
	return nil
}

// validGossipKeys checks a keyring: at least one key, each of an AES
// size.
func validGossipKeys(keys [][]byte) error {
	if len(keys) == 0 {
		return fmt.Errorf("%w: no key", ErrGossipKey)
	}
	for i, k := range keys {
		if err := validGossipKey(k); err != nil {
			return fmt.Errorf("%w: key %d: %v", ErrGossipKey, i, err)
		}
	}
	return nil
}

func validGossipKey(k []byte) error {
	switch len(k) {
	case 16, 24, 32:
		return nil
	}
	return fmt.Errorf("%d bytes, want 16, 24 or 32", len(k))
}

// copyKeys returns a deep copy of keys.
func copyKeys(keys [][]byte) [][]byte {
	out := make([][]byte, len(keys))
	for i, k := range keys {
		out[i] = bytes.Clone(k)
	}
	return out
}
