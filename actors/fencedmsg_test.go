package actors_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/ordo-actors/ordo/persistence/memory"
	"github.com/ordo-actors/ordo/proto/ordopb"
	"github.com/ordo-actors/ordo/proto/testpb"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
)

// linkRouter stands for the link between nodes: it holds every message
// (as a stalled socket does) and answers its sender only when the
// sender's context ends.
type linkRouter struct {
	mu   sync.Mutex
	envs []*ordopb.Envelope
}

func (r *linkRouter) Route(ctx context.Context, env *ordopb.Envelope, _ actors.Sender, done func(*ordopb.Reply)) {
	r.mu.Lock()
	r.envs = append(r.envs, proto.Clone(env).(*ordopb.Envelope))
	r.mu.Unlock()
	go func() {
		<-ctx.Done()
		done(&ordopb.Reply{RequestId: env.GetRequestId(), Error: actors.ErrorToProto(ctx.Err())})
	}()
}

func (r *linkRouter) held() []*ordopb.Envelope {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*ordopb.Envelope(nil), r.envs...)
}

// submitFromNode delivers env to host as a cluster node's transport does and
// returns the reply.
func submitFromNode(t *testing.T, host *actors.Host, env *ordopb.Envelope) *ordopb.Reply {
	t.Helper()
	ch := make(chan *ordopb.Reply, 1)
	host.SubmitAs(actors.Caller{Class: actors.CallerNode, Name: "node-a"}, env, func(r *ordopb.Reply) { ch <- r })
	select {
	case r := <-ch:
		return r
	case <-time.After(30 * time.Second):
		t.Fatal("no reply")
		return nil
	}
}

// A message an entity sent before its shard moved, delayed on the link
// until the shard's new owner has carried out the same step and the
// receiver's dedup window has moved past it, is refused by the receiver
// (fenced by the sender's epoch) and changes nothing; the same message
// without its sender fence is applied a second time.
func TestLateMessageFromFormerOwnerIsRefused(t *testing.T) {
	ctx := testCtx(t)
	store := memory.New()
	cfg := actors.DefaultLocalConfig()
	cfg.Shards = 4
	cfg.DedupWindow = 2
	src := ref("src")
	var dst actors.Ref
	for i := 0; ; i++ {
		dst = ref(fmt.Sprint("dst", i))
		if actors.ShardOf(dst, cfg.Shards) != actors.ShardOf(src, cfg.Shards) {
			break
		}
	}
	srcShard := actors.ShardOf(src, cfg.Shards)

	// The former owner, epoch 1: its message to dst is held on the link.
	link := &linkRouter{}
	cfgA := cfg
	a := startHost(t, cfgA, actors.HostDeps{Router: link, Store: store}, newCounterKind(&guard{}, &counters{}))
	ownAll(t, a, cfg.Shards)
	fwd := &testpb.Forward{To: dst.ID, Delta: 5, RequestId: "step-1"}
	_, err := actors.Call[*testpb.Value](ctx, a, src, fwd)
	require.NoError(t, err)
	var late *ordopb.Envelope
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if h := link.held(); len(h) == 1 {
			late = h[0]
			return nil
		}
		return errPending
	})
	require.True(t, proto.Equal(&ordopb.SenderFence{Shard: srcShard, Epoch: 1}, late.GetSenderFence()), "%v", late.GetSenderFence())
	a.DropAll(actors.ErrFenced) // its lease is gone

	// The new owner, epoch 2, re-drives the step, then dst takes more
	// writes than its dedup window holds.
	n := &counters{}
	b := startHost(t, cfg, actors.HostDeps{Store: memoryView{store}}, newCounterKind(&guard{}, n))
	for s := range cfg.Shards {
		require.NoError(t, b.Own(uint32(s), 2))
	}
	_, err = actors.Call[*testpb.Value](ctx, b, src, fwd)
	require.NoError(t, err)
	value := func() int64 {
		v, err := actors.Call[*testpb.Value](ctx, b, dst, &testpb.Get{})
		require.NoError(t, err)
		return v.GetValue()
	}
	testutil.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if v := value(); v != 5 {
			return errorf("dst = %d", v)
		}
		return nil
	})
	for i := range 3 {
		_, err := actors.Call[*testpb.Value](ctx, b, dst, &testpb.Add{Delta: 1}, actors.WithRequestID(fmt.Sprint("other-", i)))
		require.NoError(t, err)
	}
	require.EqualValues(t, 8, value())
	adds := n.adds.Load()

	// The late message arrives: refused, nothing run.
	rep := submitFromNode(t, b, proto.Clone(late).(*ordopb.Envelope))
	require.Equal(t, ordopb.Code_CODE_FENCED, rep.GetError().GetCode(), "%v", rep)
	require.ErrorIs(t, actors.ErrorFromProto(rep.GetError()), actors.ErrFenced)
	require.EqualValues(t, 8, value())
	require.Equal(t, adds, n.adds.Load())

	// The fence is durable: a later owner refuses it too.
	b.DropAll(actors.ErrFenced)
	c := startHost(t, cfg, actors.HostDeps{Store: memoryView{store}}, newCounterKind(&guard{}, &counters{}))
	for s := range cfg.Shards {
		require.NoError(t, c.Own(uint32(s), 3))
	}
	rep = submitFromNode(t, c, proto.Clone(late).(*ordopb.Envelope))
	require.Equal(t, ordopb.Code_CODE_FENCED, rep.GetError().GetCode(), "%v", rep)

	// Without the sender fence, the dedup window no longer knows the
	// request: the step is applied twice.
	unfenced := proto.Clone(late).(*ordopb.Envelope)
	unfenced.SenderFence = nil
	rep = submitFromNode(t, c, unfenced)
	require.Nil(t, rep.GetError())
	v, err := actors.Call[*testpb.Value](ctx, c, dst, &testpb.Get{})
	require.NoError(t, err)
	require.EqualValues(t, 13, v.GetValue(), "applied twice without the fence")
}

// memoryView shares a memory store between hosts without letting each
// host's cleanup close it for the others.
type memoryView struct{ *memory.Store }

func (memoryView) Close() error { return nil }
