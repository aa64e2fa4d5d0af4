package cluster_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/cluster"
	"github.com/ordo-actors/ordo/placement"
	"github.com/ordo-actors/ordo/proto/testpb"
	"github.com/stretchr/testify/require"
)

// vaultCallers records the caller of each vault entity's last Add or Get.
var vaultCallers sync.Map // entity ID -> actors.Caller

// vaultKind is a counter whose Add is internal; forwarderKind forwards an Add
// to a vault (Forward), as a saga's step would.
var (
	vaultKind = actors.MustKind("vault", func() *testpb.Counter { return new(testpb.Counter) },
		actors.Internal[*testpb.Counter](new(testpb.Add)),
		actors.On(func(c *counterCtx, m *testpb.Add) (*testpb.Value, error) {
			vaultCallers.Store(c.Ref().ID, c.Caller())
			c.State.Value += m.Delta
			return &testpb.Value{Value: c.State.Value}, nil
		}),
		actors.OnRead(func(c *counterCtx, _ *testpb.Get) (*testpb.Value, error) {
			vaultCallers.Store(c.Ref().ID, c.Caller())
			return &testpb.Value{Value: c.State.Value}, nil
		}))
	forwarderKind = actors.MustKind("forwarder", func() *testpb.Counter { return new(testpb.Counter) },
		actors.On(func(c *counterCtx, m *testpb.Forward) (*testpb.Value, error) {
			c.Defer(m.RequestId)
			actors.Request(c, vaultKind.Ref(m.To), &testpb.Add{Delta: m.Delta}, c.Ref().ID+"/"+m.RequestId,
				func(c *counterCtx, r *testpb.Value, err error) { c.Resolve(m.RequestId, r, err) })
			return nil, nil
		}))
)

func lastVaultCaller(t *testing.T, id string) actors.Caller {
	t.Helper()
	v, ok := vaultCallers.Load(id)
	require.True(t, ok, "vault/%s saw no call", id)
	return v.(actors.Caller)
}

// On a mutual-TLS cluster, a client certificate may not send a message
// its kind declares internal: the call is refused with
// ErrPermissionDenied before any activation, and nothing changes, even
// when the envelope claims an entity sent it. The same message sent by an
// entity on another node (node certificate) is served, and the handler
// sees that entity; a client's public call shows the client's name.
func TestInternalMessagesOverTLS(t *testing.T) {
	vaultCallers.Clear() // a vault of an earlier run (-count) is not this run's
	e := newEnv(t, nil, 16)
	n1 := e.startKinds(e.config("n1"), vaultKind, forwarderKind)
	n2 := e.startKinds(e.config("n2"), vaultKind, forwarderKind)
	e.converged(n1, n2)
	client := e.dial()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// A relay and a vault owned by different nodes.
	owner := func(r actors.Ref) string {
		return placement.Desired(actors.ShardOf(r, e.shards), []string{"n1", "n2"})
	}
	relay := forwarderKind.Ref("r")
	var vault actors.Ref
	for i := 0; vault.ID == "" || owner(vault) == owner(relay); i++ {
		vault = vaultKind.Ref(fmt.Sprint("v", i))
	}
	activations := func() uint64 { return n1.Status().Host.Activations + n2.Status().Host.Activations }

	before := activations()
	_, err := cluster.Call[*testpb.Value](ctx, client, vault, &testpb.Add{Delta: 1000})
	require.ErrorIs(t, err, actors.ErrPermissionDenied)
	require.False(t, actors.Retryable(err))
	// A forged sender: the client claims the relay sent it.
	env, err := actors.Envelope(vault, &testpb.Add{Delta: 1000}, actors.NewRequestID())
	require.NoError(t, err)
	env.Sender = relay.Proto()
	rep, err := client.Invoke(ctx, env)
	require.NoError(t, err)
	require.ErrorIs(t, actors.ErrorFromProto(rep.GetError()), actors.ErrPermissionDenied)
	require.Equal(t, before, activations(), "a refused call activated an entity")
	_, seen := vaultCallers.Load(vault.ID)
	require.False(t, seen, "the handler ran")

	// A public call with a forged sender: the handler sees the client.
	env, err = actors.Envelope(vault, &testpb.Get{}, actors.NewRequestID())
	require.NoError(t, err)
	env.Sender = relay.Proto()
	rep, err = client.Invoke(ctx, env)
	require.NoError(t, err)
	v, err := actors.DecodeReply[*testpb.Value](rep)
	require.NoError(t, err)
	require.Zero(t, v.Value, "a refused Add changed the state")
	require.Equal(t, actors.Caller{Class: actors.CallerClient, Name: "client"}, lastVaultCaller(t, vault.ID))

	// The relay's Add travels from its node to the vault's: served, and
	// the vault sees the relay, via the relay's node.
	v, err = cluster.Call[*testpb.Value](ctx, client, relay, &testpb.Forward{To: vault.ID, Delta: 5, RequestId: "f1"})
	require.NoError(t, err)
	require.EqualValues(t, 5, v.Value)
	require.Equal(t, actors.Caller{Class: actors.CallerEntity, Name: owner(relay), Entity: relay}, lastVaultCaller(t, vault.ID))

	// A node's own process code may send it too.
	caller := n1
	if owner(vault) == "n1" {
		caller = n2
	}
	v, err = cluster.Call[*testpb.Value](ctx, caller, vault, &testpb.Add{Delta: 1})
	require.NoError(t, err)
	require.EqualValues(t, 6, v.Value)
	require.Equal(t, actors.Caller{Class: actors.CallerNode, Name: caller.ID()}, lastVaultCaller(t, vault.ID))
}

// In plaintext (Insecure) nobody can be told apart: callers are unknown
// and trusted, so entities' messages between nodes still flow.
func TestInternalMessagesInsecure(t *testing.T) {
	e := newEnv(t, nil, 16)
	e.insecure = true
	n1 := e.startKinds(e.config("n1"), vaultKind, forwarderKind)
	n2 := e.startKinds(e.config("n2"), vaultKind, forwarderKind)
	e.converged(n1, n2)
	client := e.dial()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	v, err := cluster.Call[*testpb.Value](ctx, client, vaultKind.Ref("plain"), &testpb.Add{Delta: 2})
	require.NoError(t, err)
	require.EqualValues(t, 2, v.Value)
	_, err = cluster.Call[*testpb.Value](ctx, client, forwarderKind.Ref("r"), &testpb.Forward{To: "plain", Delta: 1, RequestId: "f1"})
	require.NoError(t, err)
	c := lastVaultCaller(t, "plain")
	require.Equal(t, actors.CallerEntity, c.Class)
	require.Equal(t, forwarderKind.Ref("r"), c.Entity)
}
