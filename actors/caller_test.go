package actors_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/persistence/memory"
	"github.com/ordo-actors/ordo/proto/ordopb"
	"github.com/ordo-actors/ordo/proto/testpb"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
)

// callerLog records the caller each vault entity saw last, by entity ID.
type callerLog struct {
	mu   sync.Mutex
	seen map[string]actors.Caller
}

func (l *callerLog) set(id string, c actors.Caller) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen == nil {
		l.seen = make(map[string]actors.Caller)
	}
	l.seen[id] = c
}

func (l *callerLog) get(id string) (actors.Caller, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c, ok := l.seen[id]
	return c, ok
}

// newVaultKind declares a counter whose Add is internal: Get and Forward
// (which makes the entity send Add to another vault) are public. Every
// handler records its caller in log.
func newVaultKind(t *testing.T, log *callerLog) *actors.KindOf[*testpb.Counter] {
	record := func(c *ctxC) {
		caller := c.Caller()
		if from, ok := actors.CallerFrom(c); !ok || from != caller {
			t.Errorf("CallerFrom = %v, %v; Caller = %v", from, ok, caller)
		}
		log.set(c.Ref().ID, caller)
	}
	return actors.MustKind("vault", func() *testpb.Counter { return new(testpb.Counter) },
		actors.Internal[*testpb.Counter](new(testpb.Add)),
		actors.On(func(c *ctxC, m *testpb.Add) (*testpb.Value, error) {
			record(c)
			c.State.Value += m.Delta
			return &testpb.Value{Value: c.State.Value}, nil
		}),
		actors.OnRead(func(c *ctxC, _ *testpb.Get) (*testpb.Value, error) {
			record(c)
			return &testpb.Value{Value: c.State.Value}, nil
		}),
		actors.On(func(c *ctxC, m *testpb.Forward) (*testpb.Value, error) {
			record(c)
			c.Defer(m.RequestId)
			actors.Request(c, actors.Ref{Kind: "vault", ID: m.To}, &testpb.Add{Delta: m.Delta}, c.Ref().ID+"/"+m.RequestId,
				func(c *ctxC, r *testpb.Value, err error) { c.Resolve(m.RequestId, r, err) })
			return nil, nil
		}),
		actors.OnActivate(func(c *ctxC) {
			if _, ok := actors.CallerFrom(c); ok || c.Caller() != (actors.Caller{}) {
				t.Errorf("a hook has a caller: %v", c.Caller())
			}
		}),
	)
}

type vaultHarness struct {
	host  *actors.Host
	store *countingStore
	log   *callerLog
}

func newVaultHarness(t *testing.T, trustUnauthenticated bool) *vaultHarness {
	cfg := actors.DefaultLocalConfig()
	cfg.Shards = 8
	cfg.TrustUnauthenticated = trustUnauthenticated
	v := &vaultHarness{store: &countingStore{Store: memory.New()}, log: &callerLog{}}
	v.host = startHost(t, cfg, actors.HostDeps{Store: v.store}, newVaultKind(t, v.log))
	ownAll(t, v.host, cfg.Shards)
	return v
}

// submit sends msg to vault/id as from, with env.Sender set to sender
// when it is not nil, and returns the reply.
func (v *vaultHarness) submit(t *testing.T, from actors.Caller, id string, msg proto.Message, sender *ordopb.EntityRef) *ordopb.Reply {
	t.Helper()
	env, err := actors.Envelope(actors.Ref{Kind: "vault", ID: id}, msg, actors.NewRequestID())
	require.NoError(t, err)
	env.Sender = sender
	ch := make(chan *ordopb.Reply, 1)
	v.host.SubmitAs(from, env, func(r *ordopb.Reply) { ch <- r })
	select {
	case r := <-ch:
		return r
	case <-testCtx(t).Done():
		t.Fatal("no reply")
		return nil
	}
}

var (
	alice   = actors.Caller{Class: actors.CallerClient, Name: "alice"}
	node2   = actors.Caller{Class: actors.CallerNode, Name: "n2"}
	unknown = actors.Caller{}
	forged  = &ordopb.EntityRef{Kind: "vault", Id: "bank"}
)

// An internal message from an external client (or an unauthenticated
// caller) is refused at admission, forged sender or not: no activation,
// no store read, no state change. The error is not retryable.
func TestInternalRefusedToClients(t *testing.T) {
	v := newVaultHarness(t, false)
	for _, c := range []struct {
		name   string
		from   actors.Caller
		sender *ordopb.EntityRef
	}{
		{"client", alice, nil},
		{"client claiming to be an entity", alice, forged},
		{"unknown caller", unknown, nil},
		{"unknown caller claiming to be an entity", unknown, forged},
	} {
		t.Run(c.name, func(t *testing.T) {
			rep := v.submit(t, c.from, "a", &testpb.Add{Delta: 100}, c.sender)
			err := actors.ErrorFromProto(rep.GetError())
			require.ErrorIs(t, err, actors.ErrPermissionDenied)
			require.False(t, actors.Retryable(err))
			require.Contains(t, err.Error(), "ordo.test.v1.Add")
		})
	}
	require.Zero(t, v.store.loads.Load(), "a refused call read the store")
	require.Zero(t, v.host.Stats().Activations, "a refused call activated its entity")
	_, ran := v.log.get("a")
	require.False(t, ran)

	// Public messages from the same callers are served, and the handler
	// sees the client, not the entity it claimed to be.
	rep := v.submit(t, alice, "a", &testpb.Get{}, forged)
	require.Nil(t, rep.GetError())
	got, _ := v.log.get("a")
	require.Equal(t, alice, got)
	value, err := actors.DecodeReply[*testpb.Value](rep)
	require.NoError(t, err)
	require.Zero(t, value.Value, "a refused Add changed the state")
}

// Trusted callers may send internal messages: this process, a node, and
// an entity (on this host, or on another node that says so).
func TestInternalFromTrustedCallers(t *testing.T) {
	v := newVaultHarness(t, false)
	ctx := testCtx(t)

	// This process.
	_, err := actors.Call[*testpb.Value](ctx, v.host, actors.Ref{Kind: "vault", ID: "p"}, &testpb.Add{Delta: 1})
	require.NoError(t, err)
	got, _ := v.log.get("p")
	require.Equal(t, actors.Caller{Class: actors.CallerProcess}, got)

	// A node, for itself and for one of its entities.
	require.Nil(t, v.submit(t, node2, "n", &testpb.Add{Delta: 1}, nil).GetError())
	got, _ = v.log.get("n")
	require.Equal(t, node2, got)
	require.Nil(t, v.submit(t, node2, "n", &testpb.Add{Delta: 1}, forged).GetError())
	got, _ = v.log.get("n")
	require.Equal(t, actors.Caller{Class: actors.CallerEntity, Name: "n2", Entity: actors.Ref{Kind: "vault", ID: "bank"}}, got)
	require.Equal(t, "entity vault/bank via n2", got.String())

	// A node's malformed sender is a bad request.
	rep := v.submit(t, node2, "n", &testpb.Add{Delta: 1}, &ordopb.EntityRef{Kind: "vault"})
	require.ErrorIs(t, actors.ErrorFromProto(rep.GetError()), actors.ErrBadRequest)

	// An entity of this host, in another shard and in the same shard
	// (co-located messages skip the envelope's encoding): a client asks
	// the entity to forward, and the entity's Add is admitted.
	shards := uint32(8)
	src := actors.Ref{Kind: "vault", ID: "src"}
	var other, same string
	for i := 0; other == "" || same == ""; i++ {
		id := fmt.Sprint("dst-", i)
		if actors.ShardOf(actors.Ref{Kind: "vault", ID: id}, shards) == actors.ShardOf(src, shards) {
			if same == "" {
				same = id
			}
		} else if other == "" {
			other = id
		}
	}
	for _, to := range []string{other, same} {
		rep := v.submit(t, alice, "src", &testpb.Forward{To: to, Delta: 7, RequestId: "f-" + to}, nil)
		require.Nil(t, rep.GetError(), "forward to %s", to)
		got, _ := v.log.get(to)
		require.Equal(t, actors.Caller{Class: actors.CallerEntity, Entity: src}, got, "the Add to %s", to)
	}
}

// A host that trusts unauthenticated callers (a plaintext cluster) lets
// them send internal messages, and believes their sender.
func TestTrustUnauthenticated(t *testing.T) {
	v := newVaultHarness(t, true)
	require.Nil(t, v.submit(t, unknown, "a", &testpb.Add{Delta: 1}, nil).GetError())
	got, _ := v.log.get("a")
	require.Equal(t, unknown, got)
	require.Nil(t, v.submit(t, unknown, "a", &testpb.Add{Delta: 1}, forged).GetError())
	got, _ = v.log.get("a")
	require.Equal(t, actors.Caller{Class: actors.CallerEntity, Entity: actors.Ref{Kind: "vault", ID: "bank"}}, got)
	// Clients are still clients.
	rep := v.submit(t, alice, "a", &testpb.Add{Delta: 1}, nil)
	require.ErrorIs(t, actors.ErrorFromProto(rep.GetError()), actors.ErrPermissionDenied)
}

// A message type declared internal needs a handler; the error is the
// wire code's sentinel on the way back.
func TestInternalDeclaration(t *testing.T) {
	_, err := actors.NewKind("vault", func() *testpb.Counter { return new(testpb.Counter) },
		actors.Internal[*testpb.Counter](new(testpb.Add)))
	require.ErrorContains(t, err, "declared internal but has no handler")
	_, err = actors.NewKind("vault", func() *testpb.Counter { return new(testpb.Counter) },
		actors.Internal[*testpb.Counter](nil))
	require.Error(t, err)

	wire := actors.ErrorToProto(fmt.Errorf("wrapped: %w", actors.ErrPermissionDenied))
	require.Equal(t, ordopb.Code_CODE_PERMISSION_DENIED, wire.GetCode())
	require.True(t, errors.Is(actors.ErrorFromProto(wire), actors.ErrPermissionDenied))
}
