package placement_test

// Tests of placement's safety guards, each written so that the guard's
// mutation in tools/mutants fails it.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ordo-actors/ordo/internal/netproxy"
	"github.com/ordo-actors/ordo/internal/testutil"
	"github.com/ordo-actors/ordo/placement"
)

// The validity deadline counts from the send time of the acknowledged
// keepalive, not from the acknowledgement's arrival: through a proxy that
// delays every byte to and from etcd, each deadline is at least the round
// trip earlier than an arrival-based one (arrival + TTL - margin) would be.
func TestGuardDeadlineCountsFromSendTime(t *testing.T) {
	srv := startEtcd(t)
	proxy, err := netproxy.Listen(strings.TrimPrefix(srv.Endpoints()[0], "http://"), netproxy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	c := newClient(t, "http://"+proxy.Addr())
	// Each request and each reply waits oneWay in the proxy: every
	// acknowledgement arrives at least 2×oneWay after its request left.
	const oneWay = 300 * time.Millisecond
	const rtt = 2 * oneWay
	proxy.Delay(oneWay)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const margin = time.Second
	s, err := placement.NewSession(ctx, c, 5*time.Second, margin, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	// check fails when deadline d, first seen at `seen` (at or after the
	// acknowledgement's arrival), is later than arrival-based minus rtt.
	check := func(what string, d, seen time.Time) {
		t.Helper()
		arrivalBased := seen.Add(s.TTL() - margin)
		if early := arrivalBased.Sub(d); early < rtt {
			t.Fatalf("%s deadline is only %v earlier than arrival + TTL - margin; the round trip was at least %v",
				what, early, rtt)
		}
		t.Logf("%s deadline: %v earlier than arrival-based (round trip >= %v)", what, arrivalBased.Sub(d).Round(time.Millisecond), rtt)
	}
	last := s.Deadline()
	check("grant", last, time.Now())
	renewals := 0
	testutil.Eventually(t, 20*time.Second, time.Millisecond, func() error {
		d, seen := s.Deadline(), time.Now()
		if d.After(last) {
			renewals++
			check(fmt.Sprintf("renewal %d", renewals), d, seen)
			last = d
		}
		if !s.Valid() {
			t.Fatalf("session ended: %v", s.Err())
		}
		if renewals < 3 {
			return fmt.Errorf("%d renewals seen", renewals)
		}
		return nil
	})
}
