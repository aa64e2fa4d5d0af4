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

type callOptions struct{ requestID string }

// WithRequestID sets the call's request ID. A retry that must be applied at
// most once reuses the ID of the first attempt. Without it, Call draws a
// random ID.
func WithRequestID(id string) CallOption { return func(o *callOptions) { o.requestID = id } }

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
