package cluster

import (
	"log/slog"

	"github.com/ordo-actors/ordo/internal/zapslog"
	"go.uber.org/zap"
)

// etcdLogger returns the zap logger of a node's or client's etcd client:
// its messages go to log, each at its own level, so log's handler decides
// what shows.
func etcdLogger(log *slog.Logger) *zap.Logger {
	return zapslog.New(log.Handler(), zapslog.Options{}).Named("etcd-client")
}
