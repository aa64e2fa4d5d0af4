package etcdembed_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/etcdembed"
	"github.com/ordo-actors/ordo/internal/testutil"
)

// A member started, used and closed logs nothing above info, and the
// errors etcd logs while its listeners close arrive at debug.
func TestStartCloseLogsNothingAboveInfo(t *testing.T) {
	rec := testutil.NewRecorder()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A data directory etcd creates itself (0700): t.TempDir() is 0755,
	// and etcd rightly warns about that.
	srv, err := etcdembed.Start(ctx, etcdembed.Config{Dir: filepath.Join(t.TempDir(), "etcd"), UnsafeNoFsync: true, Slog: slog.New(rec)})
	if err != nil {
		t.Fatal(err)
	}
	c := client(t, srv.Endpoints()...)
	if err := put(c, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	srv.Close()

	for _, line := range rec.Above(slog.LevelInfo) {
		t.Errorf("logged above info: %s", line)
	}
	var shutdown, closing int
	for _, r := range rec.Records() {
		if r.Message == "closing etcd server" && r.Level == slog.LevelDebug {
			closing++ // etcd's info messages go to debug
		}
		if strings.HasPrefix(r.Message, "setting up serving from embedded etcd failed") {
			shutdown++
			if r.Level != slog.LevelDebug {
				t.Errorf("shutdown error at %v: %s", r.Level, testutil.Format(r))
			}
		}
	}
	if shutdown == 0 || closing != 1 {
		t.Errorf("%d shutdown errors, %d closing messages at debug: want the close's errors and etcd's info at debug", shutdown, closing)
	}
}

// LogLevel drops etcd's messages below it before the handler sees them.
func TestLogLevelFloor(t *testing.T) {
	rec := testutil.NewRecorder()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := etcdembed.Start(ctx, etcdembed.Config{Dir: filepath.Join(t.TempDir(), "etcd"), UnsafeNoFsync: true,
		Slog: slog.New(rec), LogLevel: "warn"})
	if err != nil {
		t.Fatal(err)
	}
	srv.Close()
	for _, r := range rec.Records() {
		if r.Message == "closing etcd server" {
			t.Errorf("an info message passed a warn floor: %s", testutil.Format(r))
		}
	}
}

func TestBadLogLevel(t *testing.T) {
	_, err := etcdembed.Start(context.Background(), etcdembed.Config{Dir: t.TempDir(), LogLevel: "loud"})
	if err == nil || !strings.Contains(err.Error(), "LogLevel") {
		t.Fatalf("Start with LogLevel loud: %v", err)
	}
}
