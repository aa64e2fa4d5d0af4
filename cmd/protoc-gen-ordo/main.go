// Command protoc-gen-ordo is a protoc plugin that generates typed clients
// and servers for entity kinds declared as protobuf services.
//
// A service describes one entity kind: each method is one handler,
// dispatched on its request message, so no two methods of a service may
// take the same request type, and no method may stream (an entity takes
// one request and gives one reply). The options of
// proto/ordopb/options.proto name the kind and mark read handlers:
//
//	service AccountService {
//	  option (ordo.v1.kind).name = "account";
//	  rpc Debit(Debit) returns (Balance);
//	  rpc GetBalance(GetBalance) returns (Balance) {
//	    option (ordo.v1.handler).read_only = true;
//	  }
//	}
//
// Without (ordo.v1.kind).name the kind is named after the service: its name
// without a trailing "Service", in snake case (AccountService is "account",
// HTTPSession is "http_session"). The name must be a valid kind name
// (actors.NewKind); a service that breaks a rule fails generation with an
// error that names it.
//
// For every file with services, it writes <file>_ordo.pb.go next to the
// file's .pb.go, in the same Go package. For the service above:
//
//	const AccountServiceKindName = "account"
//
//	// From outside any entity (actors.Call):
//	type AccountServiceClient struct{ ... }
//	func NewAccountServiceClient(inv actors.Invoker) AccountServiceClient
//	func (c AccountServiceClient) Debit(ctx context.Context, id string, req *Debit, opts ...actors.CallOption) (*Balance, error)
//
//	// The kind's handlers, for any state type S:
//	type AccountServiceServer[S proto.Message] interface {
//		Debit(c *actors.Context[S], req *Debit) (*Balance, error)      // actors.On
//		GetBalance(c *actors.Context[S], req *GetBalance) (*Balance, error) // actors.OnRead
//	}
//	func AccountServiceHandlers[S proto.Message](srv AccountServiceServer[S]) []actors.Option[S]
//	func NewAccountServiceKind[S proto.Message](newState func() S, srv AccountServiceServer[S], extra ...actors.Option[S]) (*actors.KindOf[S], error)
//	func MustAccountServiceKind[S proto.Message](newState func() S, srv AccountServiceServer[S], extra ...actors.Option[S]) *actors.KindOf[S]
//
//	// From inside another entity with state S (actors.Request):
//	type AccountServiceRequester[S proto.Message] struct{}
//	func (AccountServiceRequester[S]) Debit(c *actors.Context[S], id string, req *Debit, requestID string,
//		then func(c *actors.Context[S], reply *Balance, err error))
//
// The names follow gRPC's generated stubs (XClient and NewXClient, the
// XServer interface, XHandlers in the place of RegisterXServer), so a
// reader who knows gRPC finds them where expected. As with Proto.Actor's
// protoc-gen-go-grain and Orleans grain interfaces, the server is an
// interface whose methods receive the entity's context, and a call names
// the entity by its ID; unlike them, the server is generic in its state
// type S, so one service can describe kinds of several state types, and
// the entity-to-entity side (the Requester) returns at once and runs a
// continuation instead of blocking, as entities in ordo never wait for
// each other. A co-located entity (actors.Colocated) is an entity of the
// kind whose ID carries its placement, so the same methods call it, given
// the ID of its ref.
//
// The plugin accepts protoc-gen-go's paths= and M options:
//
//	protoc -I . -I /usr/include --plugin=protoc-gen-ordo=$(go tool -n protoc-gen-ordo) \
//		--ordo_out=. --ordo_opt=paths=source_relative proto/bankpb/bank.proto
//
// It is pinned by go.mod's tool directive; `make proto` runs it over every
// .proto file that imports proto/ordopb/options.proto.
package main

import (
	"google.golang.org/protobuf/compiler/protogen"
)

func main() {
	protogen.Options{}.Run(generate)
}
