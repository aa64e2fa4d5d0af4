package actors

import (
	"context"
	"fmt"

	"github.com/ordo-actors/ordo/proto/ordopb"
)

// CallerClass says what sent a request, as the host that admitted it
// established it.
type CallerClass uint8

const (
	// CallerUnknown: a sender with no verified identity (a plaintext
	// transport). It is external unless HostConfig.TrustUnauthenticated.
	CallerUnknown CallerClass = iota
	// CallerProcess: code of the process that runs the host (Host.Invoke,
	// Host.Submit, a call a node routes to itself). Trusted.
	CallerProcess
	// CallerNode: code of another node of the cluster, known by its node
	// certificate (Caller.Name). Trusted.
	CallerNode
	// CallerEntity: an entity of the cluster (Context.Send, Request),
	// named by Caller.Entity. Trusted: only this process or a node may
	// say that a message comes from an entity.
	CallerEntity
	// CallerClient: an external client, known by its client certificate
	// (Caller.Name). External.
	CallerClient
)

func (c CallerClass) String() string {
	switch c {
	case CallerUnknown:
		return "unknown"
	case CallerProcess:
		return "process"
	case CallerNode:
		return "node"
	case CallerEntity:
		return "entity"
	case CallerClient:
		return "client"
	}
	return fmt.Sprintf("CallerClass(%d)", uint8(c))
}

// Caller is who sent a request. A handler reads it with Context.Caller or
// CallerFrom. A remote peer cannot forge it: the receiving node takes
// the class and the name from the peer's verified certificate (a node
// certificate or a client one), and believes an envelope's claim that an
// entity sent it only from a trusted peer (see Trusted). Callers are
// values and safe to share.
type Caller struct {
	Class CallerClass
	// Name is the subject common name of the verified certificate of the
	// sending node (CallerNode, and CallerEntity from another node) or
	// client (CallerClient); "" for this process and unknown callers.
	Name string
	// Entity is the sending entity (CallerEntity only).
	Entity Ref
}

// Trusted reports whether c is part of the cluster (this process, a node
// or an entity): whether it may send the messages a kind declares
// internal (Internal). A host configured with TrustUnauthenticated trusts
// CallerUnknown as well, without changing the caller's class.
func (c Caller) Trusted() bool {
	return c.Class == CallerProcess || c.Class == CallerNode || c.Class == CallerEntity
}

// String returns a short description, such as "entity transfer/t1 via
// node-2" or "client alice".
func (c Caller) String() string {
	s := c.Class.String()
	if c.Class == CallerEntity {
		s += " " + c.Entity.String()
		if c.Name != "" {
			s += " via " + c.Name
		}
		return s
	}
	if c.Name != "" {
		s += " " + c.Name
	}
	return s
}

type callerKey struct{}

// CallerFrom returns the caller of the request a handler's context
// belongs to (pass the handler's Context). It reports false for any other
// context, hooks' and continuations' included: they answer no request.
func CallerFrom(ctx context.Context) (Caller, bool) {
	c, ok := ctx.Value(callerKey{}).(Caller)
	return c, ok
}

// resolveCaller returns the caller of env sent by from, the sender as
// the transport (or this process) authenticated it, and whether it is
// trusted. A trusted sender's claim that an entity sent env (its sender
// field) is believed; anyone else's is ignored.
func (h *Host) resolveCaller(from Caller, env *ordopb.Envelope) (Caller, bool, error) {
	trusted := from.Trusted() || (from.Class == CallerUnknown && h.cfg.TrustUnauthenticated)
	if !trusted {
		return Caller{Class: from.Class, Name: from.Name}, false, nil
	}
	if s := env.GetSender(); s != nil {
		ref, err := RefFromProto(s)
		if err != nil {
			return Caller{}, true, fmt.Errorf("sender: %w", err)
		}
		return Caller{Class: CallerEntity, Name: from.Name, Entity: ref}, true, nil
	}
	return from, true, nil
}
