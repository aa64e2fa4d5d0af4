package cluster

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/ordotls"
	"github.com/ordo-actors/ordo/proto/ordopb"
)

// testCA is the throw-away CA of the package's internal tests.
var testCA = sync.OnceValue(func() *ordotls.CA {
	ca, err := ordotls.NewCA("cluster-internal-test-ca")
	if err != nil {
		panic(err)
	}
	return ca
})

// nodeTLS returns material for a node named name, from testCA.
func nodeTLS(tb testing.TB, name string) *ordotls.Material {
	tb.Helper()
	m, err := testCA().Node(name)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// clientTLS returns material for a client named name, from testCA.
func clientTLS(tb testing.TB, name string) *ordotls.Material {
	tb.Helper()
	m, err := testCA().Client(name)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// The served function learns who is calling: the subject of the
// certificate the caller presented, and whether it is a node's (server
// authentication) or a client's, and nobody in plaintext. A caller whose security does not match the server's gets
// no stream (errUnreachable, as for a node that is down).
func TestTransportCaller(t *testing.T) {
	leakCheck(t)
	for _, c := range []struct {
		name           string
		server, client ordotls.Source
		want           string
		node           bool
	}{
		{"client certificate", nodeTLS(t, "n1"), clientTLS(t, "alice"), "alice", false},
		{"client certificate named like a node", nodeTLS(t, "n1"), clientTLS(t, "n2"), "n2", false},
		{"node certificate", nodeTLS(t, "n1"), nodeTLS(t, "n2"), "n2", true},
		{"plaintext", nil, nil, "", false},
		{"plaintext caller, TLS server", nodeTLS(t, "n1"), nil, "refused", false},
		{"TLS caller, plaintext server", nil, clientTLS(t, "alice"), "refused", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv, err := startTransport("127.0.0.1:0", "", quietLog(), c.server)
			if err != nil {
				t.Fatal(err)
			}
			defer srv.close(false)
			got := make(chan peerID, 1)
			srv.serve(func(caller peerID, env *ordopb.Envelope, reply func(*ordopb.Reply)) {
				got <- caller
				reply(&ordopb.Reply{RequestId: env.GetRequestId()})
			})
			cl := newTransport(quietLog(), c.client)
			defer cl.close(false)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			rep, err := cl.request(ctx, srv.addr, &ordopb.Envelope{RequestId: "r1"})
			if c.want == "refused" {
				if !errors.Is(err, errUnreachable) {
					t.Fatalf("got %v, %v; want errUnreachable", rep, err)
				}
				if len(got) != 0 {
					t.Fatal("the call was served")
				}
				return
			}
			if err != nil || rep.GetRequestId() != "r1" {
				t.Fatalf("got %v, %v", rep, err)
			}
			if caller := <-got; caller != (peerID{Name: c.want, Node: c.node}) {
				t.Fatalf("caller %+v, want %q (node %v)", caller, c.want, c.node)
			}
		})
	}
}
