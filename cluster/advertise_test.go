package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/actors"
	"github.com/ordo-actors/ordo/cluster"
	"github.com/ordo-actors/ordo/internal/netproxy"
	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/ordo-actors/ordo/proto/testpb"
	"github.com/stretchr/testify/require"
)

// A node behind proxies advertises their addresses: other nodes and
// clients reach it only through them (remote over TCP, gossip over TCP
// and UDP). Cutting the proxies cuts the node from its peers and clients
// but not from etcd: gossip declares it dead, yet its lease renews, so it
// keeps its shards (unreachable meanwhile) and nobody else serves them.
// After the heal it is alive again and answers, with ownership unchanged.
func TestAdvertisedAddressesAndNodePartition(t *testing.T) {
	e := newEnv(t, nil, 16)
	e.startN(2)
	remoteProxy, err := netproxy.Listen("", netproxy.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { remoteProxy.Close() })
	gossipProxy, err := netproxy.Listen("", netproxy.Options{UDP: true})
	require.NoError(t, err)
	t.Cleanup(func() { gossipProxy.Close() })

	cfg := e.config("n3")
	cfg.AdvertiseRemoteAddr = remoteProxy.Addr()
	cfg.AdvertiseGossipAddr = gossipProxy.Addr()
	n3 := e.start(cfg)
	remote, gossip := n3.ListenAddrs()
	require.NotEqual(t, remote, n3.RemoteAddr())
	require.Equal(t, remoteProxy.Addr(), n3.RemoteAddr())
	require.Equal(t, gossipProxy.Addr(), n3.GossipAddr())
	require.NoError(t, remoteProxy.SetTarget(remote))
	require.NoError(t, gossipProxy.SetTarget(gossip))
	e.settled(e.nodes...)

	n1 := e.nodes[0]
	sees := func(alive bool) func() error {
		return func() error {
			for _, m := range n1.Status().Members {
				if m.ID == "n3" {
					if m.Alive != alive {
						return fmt.Errorf("n1 sees n3 alive=%v, want %v", m.Alive, alive)
					}
					if m.RemoteAddr != remoteProxy.Addr() {
						return fmt.Errorf("n1 has n3 at %s, want the proxy %s", m.RemoteAddr, remoteProxy.Addr())
					}
					return nil
				}
			}
			return errors.New("n1 does not know n3")
		}
	}
	testutil.Eventually(t, 30*time.Second, 20*time.Millisecond, sees(true))
	// Only once n1 sees n3 alive do shards move to n3 (and n3 hands back
	// any it took before it knew its peers): n3's shards are final only
	// when placement has converged.
	e.converged(e.nodes...)

	// Counters in n3's shards and in the others'.
	owned := n3.Owned()
	var on3, elsewhere []string
	for i := 0; len(on3) < 5 || len(elsewhere) < 5; i++ {
		id := fmt.Sprintf("c%d", i)
		if _, ok := owned[uint32(actors.ShardOf(counter(id), e.shards))]; ok {
			on3 = append(on3, id)
		} else {
			elsewhere = append(elsewhere, id)
		}
	}
	client := e.dial()
	add := func(id string, timeout time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		_, err := cluster.Call[*testpb.Value](ctx, client, counter(id), &testpb.Add{Delta: 1})
		return err
	}
	for _, id := range append(on3, elsewhere...) {
		require.NoError(t, add(id, 10*time.Second))
	}
	require.Positive(t, remoteProxy.Stats().Conns, "n3 was called without its proxy")
	// Probes of n3 come through its proxy (within a probe round or two).
	testutil.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		if gossipProxy.Stats().Datagrams == 0 {
			return errors.New("n3 gossiped without its proxy")
		}
		return nil
	})

	remoteProxy.Partition()
	gossipProxy.Partition()
	testutil.Eventually(t, 30*time.Second, 20*time.Millisecond, sees(false))
	require.True(t, n3.Status().LeaseValid, "n3 lost its lease though etcd is reachable")
	require.Equal(t, owned, n3.Owned(), "n3's shards moved during a partition from its peers")
	err = add(on3[0], time.Second)
	require.Error(t, err, "n3 answered through a partition")
	for _, id := range elsewhere {
		require.NoError(t, add(id, 10*time.Second))
	}

	remoteProxy.Heal()
	gossipProxy.Heal()
	testutil.Eventually(t, 30*time.Second, 20*time.Millisecond, sees(true))
	for _, id := range on3 {
		require.NoError(t, add(id, 10*time.Second))
	}
	require.Equal(t, owned, n3.Owned(), "ownership moved after the heal")
}

func TestAdvertisedAddressValidation(t *testing.T) {
	e := newEnv(t, nil, 4)
	for _, c := range []struct{ remote, gossip string }{
		{"127.0.0.1", ""},
		{"127.0.0.1:0", ""},
		{":7000", ""},
		{"", "localhost:7000"},
		{"", "127.0.0.1:70000"},
	} {
		cfg := e.config("n1")
		cfg.AdvertiseRemoteAddr, cfg.AdvertiseGossipAddr = c.remote, c.gossip
		require.Error(t, cfg.Validate(), "advertise %q %q accepted", c.remote, c.gossip)
	}
	cfg := e.config("n1")
	cfg.AdvertiseRemoteAddr, cfg.AdvertiseGossipAddr = "node1.example:7000", "10.0.0.1:7001"
	require.NoError(t, cfg.Validate())
}
