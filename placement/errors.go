package placement

import "errors"

// Errors returned by this package. Match them with errors.Is.
var (
	// ErrInvalidConfig wraps every Config.Validate error.
	ErrInvalidConfig = errors.New("placement: invalid config")
	// ErrShardCountMismatch means P/config records another shard count
	// than the node's Config.Shards.
	ErrShardCountMismatch = errors.New("placement: shard count differs from the cluster's")
	// ErrNodeIDInUse means P/nodes/<id> is held by another live lease.
	ErrNodeIDInUse = errors.New("placement: node ID registered by another live session")
	// ErrLeaseLost means the session's lease was revoked or expired in etcd.
	ErrLeaseLost = errors.New("placement: lease lost")
	// ErrSessionExpired means the local validity deadline passed before a
	// keepalive was acknowledged.
	ErrSessionExpired = errors.New("placement: session validity deadline passed")
	// ErrSessionClosed means the session was closed by its owner.
	ErrSessionClosed = errors.New("placement: session closed")
	// ErrNotOwner means the shard lock is held by another node or epoch.
	ErrNotOwner = errors.New("placement: shard not owned at this epoch")
	// ErrShardTaken means an acquisition found the shard key already present.
	ErrShardTaken = errors.New("placement: shard already owned")
	// ErrStarted means Start was called twice.
	ErrStarted = errors.New("placement: already started")
)
