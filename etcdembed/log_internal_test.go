package etcdembed

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"

	etcderrors "go.etcd.io/etcd/server/v3/etcdserver/errors"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// The warnings etcd logs when a close interrupts its own work go to debug
// only while the member closes, and only for the errors a close causes.
func TestBenignOnlyWhileClosingAndForCloseErrors(t *testing.T) {
	warn := func(msg string) zapcore.Entry { return zapcore.Entry{Level: zapcore.WarnLevel, Message: msg} }
	wrapped := fmt.Errorf("serve: %w", net.ErrClosed)
	cases := []struct {
		name    string
		closing bool
		entry   zapcore.Entry
		fields  []zapcore.Field
		want    bool
	}{
		{"version update canceled by the close", true, warn("failed to update cluster version"), []zapcore.Field{zap.Error(context.Canceled)}, true},
		{"version update canceled, etcd's own error", true, warn("failed to update cluster version"), []zapcore.Field{zap.Error(etcderrors.ErrCanceled)}, true},
		{"version update aborted, server stopped", true, warn("aborting cluster version update; server is stopped"), []zapcore.Field{zap.Error(etcderrors.ErrStopped)}, true},
		{"version update canceled, not closing", false, warn("failed to update cluster version"), []zapcore.Field{zap.Error(context.Canceled)}, false},
		{"version update timed out while closing", true, warn("failed to update cluster version"), []zapcore.Field{zap.Error(etcderrors.ErrTimeout)}, false},
		{"version update without an error", true, warn("failed to update cluster version"), nil, false},
		{"listener closed while closing", true, warn("setting up serving from embedded etcd failed."), []zapcore.Field{zap.Error(wrapped)}, true},
		{"listener closed, not closing", false, warn("setting up serving from embedded etcd failed."), []zapcore.Field{zap.Error(wrapped)}, false},
		{"serving failed otherwise", true, warn("setting up serving from embedded etcd failed."), []zapcore.Field{zap.Error(errors.New("bind: address in use"))}, false},
		{"a close error under another message", true, warn("failed to publish"), []zapcore.Field{zap.Error(context.Canceled)}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var ml memberLog
			ml.closing.Store(c.closing)
			if got := ml.benign(c.entry, c.fields); got != c.want {
				t.Errorf("benign(%q, %v) while closing=%v = %v, want %v", c.entry.Message, c.fields, c.closing, got, c.want)
			}
		})
	}
}
