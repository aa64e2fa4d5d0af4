// Package ports picks ports for servers that must be told their port
// before they bind it (a member restarted on its old port, a child process
// given its address on the command line).
//
// A port found with port 0 and closed again can be taken, before the
// server binds it, as the local port of any outgoing connection on the
// machine, since it lies in the kernel's ephemeral range (32768-60999 by
// default). Free picks ports in [Low, High), below that range, checks each
// free for TCP and UDP, and hands each out once per process.
package ports

import (
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
)

// The range Free picks from.
const (
	Low  = 20000
	High = 32000
)

var (
	mu    sync.Mutex
	given = map[int]bool{}
)

// Free returns n distinct loopback ports, free for TCP and UDP when
// checked and never returned before by this process.
func Free(n int) ([]int, error) {
	mu.Lock()
	defer mu.Unlock()
	out := make([]int, 0, n)
	for try := 0; len(out) < n; try++ {
		if try == 1000*n {
			return nil, fmt.Errorf("ports: no free port in [%d, %d)", Low, High)
		}
		p := Low + rand.IntN(High-Low)
		if given[p] || !free(p) {
			continue
		}
		given[p] = true
		out = append(out, p)
	}
	return out, nil
}

func free(p int) bool {
	addr := "127.0.0.1:" + strconv.Itoa(p)
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	defer l.Close()
	u, err := net.ListenPacket("udp", addr)
	if err != nil {
		return false
	}
	u.Close()
	return true
}
