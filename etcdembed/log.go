package etcdembed

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync/atomic"

	"github.com/ordo-actors/ordo/internal/zapslog"
	"github.com/soheilhy/cmux"
	etcderrors "go.etcd.io/etcd/server/v3/etcdserver/errors"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc"
)

// memberLog is the logger of one run of a member: etcd's zap logs go to a
// slog.Logger, and Close sets closing first, so that the errors etcd logs
// while its own listeners close (below) go to debug.
type memberLog struct {
	closing atomic.Bool
}

// logger returns the zap logger for the member: l's handler decides what
// shows; etcd's info messages, which narrate the member's own workings
// (raft elections, snapshots, listeners), go to debug, so that a member
// logs at info or above only what needs attention. minLevel, when not "",
// drops etcd's messages below that level ("debug", "info", "warn",
// "error").
func (ml *memberLog) logger(l *slog.Logger, minLevel string) (*zap.Logger, error) {
	var opts []zap.Option
	if minLevel != "" {
		lvl, err := zapcore.ParseLevel(minLevel)
		if err != nil {
			return nil, fmt.Errorf("etcdembed: LogLevel %q: %w", minLevel, err)
		}
		opts = append(opts, zap.IncreaseLevel(lvl))
	}
	return zapslog.New(l.Handler(), zapslog.Options{Level: etcdLevel, Demote: ml.benign}).WithOptions(opts...), nil
}

// etcdLevel maps etcd's levels to slog's: info to debug (see logger), the
// others to their namesakes.
func etcdLevel(l zapcore.Level) slog.Level {
	if l == zapcore.InfoLevel {
		return slog.LevelDebug
	}
	return zapslog.Level(l)
}

// Messages etcd logs above info that are expected, and go to debug.
const (
	// Logged at every start when gRPC and HTTP share the client port, as
	// they do by design in an embedded member (its clients speak gRPC
	// only; a second port would gain nothing).
	msgSinglePort = "Running http and grpc server on single port. This is not recommended for production."
	// Logged at every start: the default auth token provider. ordo never
	// enables auth on an embedded member, so no token is ever issued.
	msgSimpleToken = "simple token is not cryptographically signed"
)

// shutdownMsgs are the errors etcd's serving goroutines log when their
// listeners close. embed.Etcd.Close closes every client and peer
// listener; each goroutine serving one then returns the listener's error
// (cmux's "mux: server closed", net/http's "http: Server closed", "use of
// closed network connection"), and embed's errHandler logs any error at
// error level, before it checks whether the member is stopping; the gRPC
// server's wrapper also logs it twice at warn. They are benign exactly
// when the member is closing and the error says a listener or server was
// closed.
var shutdownMsgs = map[string]bool{
	"setting up serving from embedded etcd failed.": true,
	"stopping insecure grpc server due to error":    true,
	"stopped insecure grpc server due to error":     true,
	"stopping secure grpc server due to error":      true,
	"stopped secure grpc server due to error":       true,
}

// stopMsgs are the warnings etcd logs when it closes while a request of
// its own is in flight: the cluster version a new leader sets, some time
// after it is elected (a member closed soon after it started). The
// request fails with the server's context, which the close cancels, or
// with the server stopped. They are benign exactly when the member is
// closing and the error says so.
var stopMsgs = map[string]bool{
	"failed to update cluster version":                   true,
	"aborting cluster version update; server is stopped": true,
}

// benign reports whether e is one of the expected messages above.
func (ml *memberLog) benign(e zapcore.Entry, fields []zapcore.Field) bool {
	switch {
	case e.Level <= zapcore.InfoLevel:
		return false
	case e.Message == msgSinglePort, e.Message == msgSimpleToken:
		return true
	case shutdownMsgs[e.Message] && ml.closing.Load():
		return onlyErrors(fields, net.ErrClosed, http.ErrServerClosed, cmux.ErrServerClosed, grpc.ErrServerStopped)
	case stopMsgs[e.Message] && ml.closing.Load():
		return onlyErrors(fields, context.Canceled, etcderrors.ErrCanceled, etcderrors.ErrStopped)
	}
	return false
}

// onlyErrors reports whether fields carry an error, and every error they
// carry is one of targets (errors.Is).
func onlyErrors(fields []zapcore.Field, targets ...error) bool {
	found := false
	for _, f := range fields {
		if f.Type != zapcore.ErrorType {
			continue
		}
		err, ok := f.Interface.(error)
		if !ok || !slices.ContainsFunc(targets, func(t error) bool { return errors.Is(err, t) }) {
			return false
		}
		found = true
	}
	return found
}
