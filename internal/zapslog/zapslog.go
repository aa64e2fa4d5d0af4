// Package zapslog sends the logs of libraries that log with zap (etcd's
// server and client) to a slog.Handler, so that a process logs through one
// handler at one level.
//
// zap's own go.uber.org/zap/exp/zapslog goes the other way (a slog.Handler
// writing to a zap core); this package is the small zapcore.Core needed
// for this direction.
package zapslog

import (
	"context"
	"log/slog"
	"slices"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Options adjusts how entries become records. The zero value maps every
// zap level to the slog level of the same name.
type Options struct {
	// Level maps a zap level to a slog level; nil uses Level. It decides
	// which entries zap builds at all: one whose level maps to a level the
	// handler does not enable costs nothing.
	Level func(zapcore.Level) slog.Level
	// Demote, when it returns true, writes the entry at slog.LevelDebug
	// instead: for known messages a library logs too loudly. It sees the
	// entry and its fields (the logger's own fields first).
	Demote func(e zapcore.Entry, fields []zapcore.Field) bool
}

// New returns a zap logger writing to h. Fields become attributes (a
// named logger's name becomes the "logger" attribute); stack traces and
// caller information are dropped.
func New(h slog.Handler, opts Options) *zap.Logger {
	if opts.Level == nil {
		opts.Level = Level
	}
	return zap.New(&core{h: h, opts: opts})
}

// Level maps zap's levels to slog's: debug, info and warn to the same,
// error and above (DPanic, Panic, Fatal) to error.
func Level(l zapcore.Level) slog.Level {
	switch {
	case l <= zapcore.DebugLevel:
		return slog.LevelDebug
	case l == zapcore.InfoLevel:
		return slog.LevelInfo
	case l == zapcore.WarnLevel:
		return slog.LevelWarn
	default:
		return slog.LevelError
	}
}

// core is a zapcore.Core over a slog.Handler. It is immutable and safe for
// concurrent use, as zap requires.
type core struct {
	h      slog.Handler
	opts   Options
	fields []zapcore.Field // the logger's own fields (With), for Demote
}

var _ zapcore.Core = (*core)(nil)

func (c *core) Enabled(l zapcore.Level) bool {
	return c.h.Enabled(context.Background(), c.opts.Level(l))
}

func (c *core) With(fields []zapcore.Field) zapcore.Core {
	if len(fields) == 0 {
		return c
	}
	all := make([]zapcore.Field, 0, len(c.fields)+len(fields))
	all = append(append(all, c.fields...), fields...)
	return &core{h: c.h.WithAttrs(attrs(fields)), opts: c.opts, fields: all}
}

func (c *core) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *core) Write(e zapcore.Entry, fields []zapcore.Field) error {
	level := c.opts.Level(e.Level)
	if c.opts.Demote != nil {
		all := fields
		if len(c.fields) > 0 {
			all = append(append(make([]zapcore.Field, 0, len(c.fields)+len(fields)), c.fields...), fields...)
		}
		if c.opts.Demote(e, all) {
			level = slog.LevelDebug
		}
	}
	ctx := context.Background()
	if !c.h.Enabled(ctx, level) {
		return nil
	}
	r := slog.NewRecord(e.Time, level, e.Message, 0)
	if e.LoggerName != "" {
		r.AddAttrs(slog.String("logger", e.LoggerName))
	}
	r.AddAttrs(attrs(fields)...)
	return c.h.Handle(ctx, r)
}

func (c *core) Sync() error { return nil }

// attrs encodes zap fields as slog attributes, through zap's map encoder
// (which knows every field type: errors, durations, objects, arrays,
// namespaces), in key order.
func attrs(fields []zapcore.Field) []slog.Attr {
	if len(fields) == 0 {
		return nil
	}
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range fields {
		f.AddTo(enc)
	}
	keys := make([]string, 0, len(enc.Fields))
	for k := range enc.Fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]slog.Attr, 0, len(keys))
	for _, k := range keys {
		out = append(out, slog.Any(k, enc.Fields[k]))
	}
	return out
}
