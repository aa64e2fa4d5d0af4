// Package testutil holds the helpers ordo's tests share: polling with a
// deadline instead of sleeping, and a test logger.
package testutil

import (
	"io"
	"log/slog"
	"os"
	"testing"
	"time"
)

// Eventually calls f every interval until it returns nil, and fails the
// test with f's last error once timeout has passed.
func Eventually(t testing.TB, timeout, interval time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition not met after %v: %v", timeout, err)
		}
		time.Sleep(interval)
	}
}

// Logger discards logs unless ORDO_TEST_LOG is set, then writes debug logs
// to stderr.
func Logger() *slog.Logger {
	if os.Getenv("ORDO_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}
