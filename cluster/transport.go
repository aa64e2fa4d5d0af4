package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/ordo-actors/ordo/proto/ordopb"
)

// routerName is the actor name every node's router is registered under.
const routerName = "ordo-router"

// errUnreachable marks attempts that got no answer from the owner (dead
// letter, timeout, closed connection); the caller retries.
var errUnreachable = errors.New("cluster: owner unreachable")

// transport is a protoactor actor system with remote over TCP. Nodes run a
// router actor on it; clients use it only to send requests and receive
// replies. Safe for concurrent use.
type transport struct {
	closeOnce sync.Once
	system    *actor.ActorSystem
	remote    *remote.Remote
	addr      string // advertised: what peers call
	bound     string // listened on
}

// startTransport listens on addr ("host:port", port 0 for a free one).
// advertise, if not "", is the address peers are told to call instead
// (it must reach addr); the transport's addr is then advertise.
func startTransport(addr, advertise string, log *slog.Logger) (t *transport, err error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("cluster: remote address %q: %w", addr, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 0 || port > 65535 {
		return nil, fmt.Errorf("cluster: remote address %q: bad port", addr)
	}
	// protoactor's remote panics when it cannot listen; check first so a
	// taken port is an error, not a crash.
	if port != 0 {
		l, lerr := net.Listen("tcp", addr)
		if lerr != nil {
			return nil, fmt.Errorf("cluster: remote address %q: %w", addr, lerr)
		}
		l.Close()
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	system := actor.NewActorSystem(
		actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }),
		actor.WithDeadLetterRequestLogging(false),
		actor.WithDeadLetterThrottleInterval(10*time.Millisecond),
	)
	var opts []remote.ConfigOption
	if advertise != "" {
		opts = append(opts, remote.WithAdvertisedHost(advertise))
	}
	rc := remote.Configure(host, port, opts...)
	rc.MaxRetryCount = 3 // ordo retries calls itself
	r := remote.NewRemote(system, rc)
	defer func() {
		if p := recover(); p != nil {
			system.Shutdown()
			t, err = nil, fmt.Errorf("cluster: starting remote on %q: %v", addr, p)
		}
	}()
	r.Start()
	return &transport{system: system, remote: r, addr: system.Address(), bound: r.ListenAddress()}, nil
}

// request sends env to the router at addr and waits for the reply, at most
// until ctx ends. Failures to reach the router wrap errUnreachable.
func (t *transport) request(ctx context.Context, addr string, env *ordopb.Envelope) (*ordopb.Reply, error) {
	timeout := 30 * time.Second
	if d, ok := ctx.Deadline(); ok {
		timeout = time.Until(d)
	}
	if timeout <= 0 {
		return nil, context.DeadlineExceeded
	}
	f := t.system.Root.RequestFuture(actor.NewPID(addr, routerName), env, timeout)
	done := make(chan struct{})
	var res any
	var err error
	go func() {
		res, err = f.Result()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		// Complete the future now so its waiter ends; a late reply is
		// dropped as a dead letter.
		t.system.Root.Stop(f.PID())
		<-done
		return nil, ctx.Err()
	}
	if err != nil {
		if errors.Is(err, actor.ErrTimeout) {
			if cerr := ctx.Err(); cerr != nil {
				return nil, cerr
			}
		}
		return nil, fmt.Errorf("%w: %s: %v", errUnreachable, addr, err)
	}
	switch r := res.(type) {
	case *ordopb.Reply:
		return r, nil
	case *actor.DeadLetterResponse:
		return nil, fmt.Errorf("%w: %s: no router", errUnreachable, addr)
	default:
		return nil, fmt.Errorf("%w: %s: unexpected answer %T", errUnreachable, addr, res)
	}
}

// close stops the remote (at once when hard) and the actor system. Later
// calls do nothing.
func (t *transport) close(hard bool) {
	t.closeOnce.Do(func() {
		t.remote.Shutdown(!hard)
		t.system.Shutdown()
	})
}
