package ordotls

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// CheckInterval is how often, at most, a Reloader looks at its files
// for changes: on a handshake, if the last look is older than that.
const CheckInterval = time.Second

// Files names the PEM files of a process's TLS material.
type Files struct {
	// CA is a bundle of one or more CA certificates: the authorities
	// whose certificates the process accepts from its peers.
	CA string
	// Cert is the process's certificate chain, leaf first.
	Cert string
	// Key is the certificate's private key (PKCS #8, PKCS #1 or SEC 1).
	Key string
	// Logger receives reloads after Load: at info when new material is in
	// use, at warning when changed files could not be loaded (the last
	// good material stays in use). Default slog.Default().
	Logger *slog.Logger
}

// Reloader is a Source backed by Files. It reads them at Load and again
// when one changes (size or modification time; a file replaced by rename
// counts), looking at most every CheckInterval when a handshake needs
// material, and at once on Reload. A load that fails keeps the last good
// material. Configurations returned earlier follow the reloads; a
// connection keeps the material it was established with. Safe for
// concurrent use.
type Reloader struct {
	files Files
	log   *slog.Logger
	every time.Duration

	mu      sync.Mutex
	mat     *Material
	checked time.Time // last look at the files
	seen    string    // the files' stamps at the last load attempt
}

// Load reads files and returns a Reloader serving their material.
func Load(files Files) (*Reloader, error) {
	r := &Reloader{files: files, log: files.Logger, every: CheckInterval}
	if r.log == nil {
		r.log = slog.Default()
	}
	r.seen = r.stamps()
	m, err := r.read()
	if err != nil {
		return nil, err
	}
	r.mat, r.checked = m, time.Now()
	return r, nil
}

// Reload reads the files now, whether or not they changed. On error the
// last good material stays in use and the error is returned (not
// logged).
func (r *Reloader) Reload() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.checked, r.seen = time.Now(), r.stamps()
	m, err := r.read()
	if err != nil {
		return err
	}
	r.use(m)
	return nil
}

// Current returns the material in use, after looking at the files if the
// last look is older than CheckInterval.
func (r *Reloader) Current() *Material {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := time.Now(); now.Sub(r.checked) >= r.every {
		r.checked = now
		if s := r.stamps(); s != r.seen {
			r.seen = s
			m, err := r.read()
			if err != nil {
				r.log.Warn("TLS files changed but cannot be loaded; keeping the previous material",
					"ca", r.files.CA, "cert", r.files.Cert, "key", r.files.Key, "err", err)
			} else {
				r.use(m)
			}
		}
	}
	return r.mat
}

// ServerConfig implements Source.
func (r *Reloader) ServerConfig() *tls.Config { return serverConfig(r.Current) }

// ClientConfig implements Source.
func (r *Reloader) ClientConfig(serverName string) *tls.Config {
	return clientConfig(serverName, r.Current)
}

// use makes m the material in use; r.mu is held.
func (r *Reloader) use(m *Material) {
	r.mat = m
	r.log.Info("TLS material reloaded", "cert", r.files.Cert, "subject", m.Leaf().Subject.CommonName,
		"serial", m.Leaf().SerialNumber.Text(16), "not_after", m.Leaf().NotAfter, "ca", r.files.CA)
}

func (r *Reloader) read() (*Material, error) {
	ca, err := os.ReadFile(r.files.CA)
	if err != nil {
		return nil, fmt.Errorf("ordotls: CA: %w", err)
	}
	cert, err := os.ReadFile(r.files.Cert)
	if err != nil {
		return nil, fmt.Errorf("ordotls: certificate: %w", err)
	}
	key, err := os.ReadFile(r.files.Key)
	if err != nil {
		return nil, fmt.Errorf("ordotls: key: %w", err)
	}
	m, err := NewMaterial(ca, cert, key)
	if err != nil {
		return nil, fmt.Errorf("%w (files %s, %s, %s)", err, r.files.CA, r.files.Cert, r.files.Key)
	}
	return m, nil
}

// stamps describes the files' current versions: size and modification
// time of each, or why it cannot be read.
func (r *Reloader) stamps() string {
	var s string
	for _, name := range []string{r.files.CA, r.files.Cert, r.files.Key} {
		fi, err := os.Stat(name)
		if err != nil {
			s += fmt.Sprintf("%s: %v;", name, err)
			continue
		}
		s += fmt.Sprintf("%s: %d %d;", name, fi.Size(), fi.ModTime().UnixNano())
	}
	return s
}
