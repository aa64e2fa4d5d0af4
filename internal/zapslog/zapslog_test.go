package zapslog_test

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/ordo-actors/ordo/internal/zapslog"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// attrs returns a record's attributes as strings.
func attrs(r slog.Record) map[string]string {
	m := map[string]string{}
	r.Attrs(func(a slog.Attr) bool {
		m[a.Key] = a.Value.String()
		return true
	})
	return m
}

func TestLevelsAndFields(t *testing.T) {
	rec := testutil.NewRecorder()
	lg := zapslog.New(rec, zapslog.Options{}).Named("etcd").With(zap.String("member", "m0"))
	lg.Debug("d")
	lg.Info("i", zap.Int("n", 3), zap.Duration("took", 2*time.Second))
	lg.Warn("w", zap.Error(errors.New("boom")))
	lg.Error("e", zap.Strings("urls", []string{"a", "b"}))
	got := rec.Records()
	if len(got) != 4 {
		t.Fatalf("%d records, want 4", len(got))
	}
	wantLevels := []slog.Level{slog.LevelDebug, slog.LevelInfo, slog.LevelWarn, slog.LevelError}
	for i, r := range got {
		if r.Level != wantLevels[i] {
			t.Errorf("record %d %q: level %v, want %v", i, r.Message, r.Level, wantLevels[i])
		}
		if a := attrs(r); a["member"] != "m0" || a["logger"] != "etcd" {
			t.Errorf("record %d: attrs %v, want member=m0 logger=etcd", i, a)
		}
	}
	if a := attrs(got[1]); a["n"] != "3" || a["took"] != "2s" {
		t.Errorf("info attrs %v", a)
	}
	if a := attrs(got[2]); a["error"] != "boom" {
		t.Errorf("warn attrs %v", a)
	}
	if a := attrs(got[3]); a["urls"] != "[a b]" {
		t.Errorf("error attrs %v", a)
	}
}

// A handler's level decides which entries zap builds at all.
func TestEnabledFollowsHandler(t *testing.T) {
	h := slog.NewTextHandler(nil, &slog.HandlerOptions{Level: slog.LevelWarn})
	lg := zapslog.New(h, zapslog.Options{})
	if lg.Core().Enabled(zapcore.InfoLevel) {
		t.Error("info enabled under a warn handler")
	}
	if !lg.Core().Enabled(zapcore.WarnLevel) {
		t.Error("warn not enabled under a warn handler")
	}
	quiet := zapslog.New(h, zapslog.Options{Level: func(zapcore.Level) slog.Level { return slog.LevelDebug }})
	if quiet.Core().Enabled(zapcore.ErrorLevel) {
		t.Error("error mapped to debug still enabled under a warn handler")
	}
}

func TestDemote(t *testing.T) {
	rec := testutil.NewRecorder()
	lg := zapslog.New(rec, zapslog.Options{Demote: func(e zapcore.Entry, fields []zapcore.Field) bool {
		for _, f := range fields {
			if f.Key == "benign" {
				return true
			}
		}
		return false
	}})
	lg.With(zap.Bool("benign", true)).Error("known")
	lg.Error("unknown")
	got := rec.Records()
	if len(got) != 2 || got[0].Level != slog.LevelDebug || got[1].Level != slog.LevelError {
		for _, r := range got {
			t.Log(testutil.Format(r))
		}
		t.Fatal("want the benign error at debug and the other at error")
	}
}
