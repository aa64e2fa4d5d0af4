package ports

import (
	"net"
	"strconv"
	"testing"
)

func TestFree(t *testing.T) {
	ps, err := Free(20)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ps {
		if p < Low || p >= High || seen[p] {
			t.Fatalf("port %d out of [%d, %d) or repeated in %v", p, Low, High, ps)
		}
		seen[p] = true
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Fatalf("port %d not free: %v", p, err)
		}
		l.Close()
	}
	more, err := Free(5)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range more {
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
	}
}
