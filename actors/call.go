package actors

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"github.com/ordo-actors/ordo/proto/ordopb"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// Invoker delivers one envelope and returns its reply. Host implements it
// for its own shards; the cluster package implements it across nodes, with
// routing and retries.
type Invoker interface {
	Invoke(ctx context.Context, env *ordopb.Envelope) (*ordopb.Reply, error)
}

// CallOption configures one Call. Options are built fresh per call.
type CallOption func(*callOptions)

type callOptions struct {
	requestID string
	asNew     bool
}

// WithRequestID sets the call's request ID. A retry that must be applied at
// most once reuses the ID of the first attempt. Without it, Call draws a
// random ID.
func WithRequestID(id string) CallOption { return func(o *callOptions) { o.requestID = id } }

// AsNew tells the target's kind that the caller believes the entity has
// never been written: it carries an ID the caller has just minted, as a
// new transfer does. A kind that trusts the hint (TrustAsNew) activates
// the entity without reading the store; any other kind ignores it. The
// hint goes with the call's first attempt only. A wrong one loses
// nothing but costs the entity's shard a restart: never use it for a
// resubmission.
func AsNew() CallOption { return func(o *callOptions) { o.asNew = true } }

// ForRetry returns env as a retry of it goes: without its AsNew hint,
// since the first attempt may have created the entity. It returns env
// itself when it carries no hint, and a copy otherwise (an attempt still
// in flight may be reading env). An Invoker that retries sends its
// attempts after the first through it.
func ForRetry(env *ordopb.Envelope) *ordopb.Envelope {
	if !env.GetNewEntity() {
		return env
	}
	c := proto.CloneOf(env)
	c.NewEntity = false
	return c
}

// NewRequestID returns a random 128-bit request ID in hex.
func NewRequestID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("actors: crypto/rand failed: %v", err)) // never happens on supported platforms
	}
	return hex.EncodeToString(b[:])
}

// Envelope builds the envelope of a call to ref with msg.
func Envelope(ref Ref, msg proto.Message, requestID string) (*ordopb.Envelope, error) {
	if err := ref.Validate(); err != nil {
		return nil, &Error{Code: ordopb.Code_CODE_BAD_REQUEST, Message: err.Error()}
	}
	payload := new(anypb.Any)
	err := anypb.MarshalFrom(payload, msg, proto.MarshalOptions{Deterministic: true})
	if err != nil {
		return nil, &Error{Code: ordopb.Code_CODE_BAD_REQUEST, Message: fmt.Sprintf("encoding %T: %v", msg, err)}
	}
	return &ordopb.Envelope{Target: ref.Proto(), RequestId: requestID, Payload: payload}, nil
}

// Call sends msg to the entity ref through inv and decodes the reply as R.
// Errors match the sentinels of this package (ErrNotHere, ErrHandler, ...).
// The envelope carries ctx's deadline and metadata (WithMetadata): the
// handler sees both in its Context.
func Call[R proto.Message](ctx context.Context, inv Invoker, ref Ref, msg proto.Message, opts ...CallOption) (R, error) {
	var zero R
	o := callOptions{}
	for _, opt := range opts {
		opt(&o)
	}
	if o.requestID == "" {
		o.requestID = NewRequestID()
	}
	env, err := Envelope(ref, msg, o.requestID)
	if err != nil {
		return zero, err
	}
	env.NewEntity = o.asNew
	if md := metadataOf(ctx); len(md) > 0 {
		if err := validateMetadata(md); err != nil {
			return zero, &Error{Code: ordopb.Code_CODE_BAD_REQUEST, Message: err.Error()}
		}
		env.Metadata = md // never changed in place (WithMetadata copies)
	}
	rep, err := inv.Invoke(ctx, env)
	if err != nil {
		return zero, err
	}
	return DecodeReply[R](rep)
}

// DecodeReply returns the reply's error, or its payload decoded as R.
func DecodeReply[R proto.Message](rep *ordopb.Reply) (R, error) {
	var zero R
	if err := ErrorFromProto(rep.GetError()); err != nil {
		return zero, err
	}
	r := zero.ProtoReflect().New().Interface().(R)
	if rep.GetPayload() == nil {
		return r, nil
	}
	if err := rep.GetPayload().UnmarshalTo(r); err != nil {
		return zero, &Error{Code: ordopb.Code_CODE_BAD_REQUEST, Message: fmt.Sprintf("decoding reply as %T: %v", r, err)}
	}
	return r, nil
}
