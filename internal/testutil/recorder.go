package testutil

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
)

// Recorder is a slog.Handler that keeps every record it is given, for
// tests that check what was logged. It enables every level. Safe for
// concurrent use; handlers derived with WithAttrs and WithGroup record
// into the same Recorder.
type Recorder struct {
	shared *recorded
	attrs  []slog.Attr
}

type recorded struct {
	mu   sync.Mutex
	recs []slog.Record
}

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder { return &Recorder{shared: &recorded{}} }

// Enabled implements slog.Handler: every level is.
func (r *Recorder) Enabled(context.Context, slog.Level) bool { return true }

// Handle implements slog.Handler.
func (r *Recorder) Handle(_ context.Context, rec slog.Record) error {
	rec = rec.Clone()
	rec.AddAttrs(r.attrs...)
	r.shared.mu.Lock()
	r.shared.recs = append(r.shared.recs, rec)
	r.shared.mu.Unlock()
	return nil
}

// WithAttrs implements slog.Handler.
func (r *Recorder) WithAttrs(as []slog.Attr) slog.Handler {
	return &Recorder{shared: r.shared, attrs: append(append([]slog.Attr(nil), r.attrs...), as...)}
}

// WithGroup implements slog.Handler (groups are flattened).
func (r *Recorder) WithGroup(string) slog.Handler { return r }

// Records returns a copy of the records kept so far.
func (r *Recorder) Records() []slog.Record {
	r.shared.mu.Lock()
	defer r.shared.mu.Unlock()
	return append([]slog.Record(nil), r.shared.recs...)
}

// Above returns the records whose level is above level, one line each.
func (r *Recorder) Above(level slog.Level) []string {
	var out []string
	for _, rec := range r.Records() {
		if rec.Level > level {
			out = append(out, Format(rec))
		}
	}
	return out
}

// Format renders a record on one line: level, message, attributes.
func Format(rec slog.Record) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %q", rec.Level, rec.Message)
	rec.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	return b.String()
}
