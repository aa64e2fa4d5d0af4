package actors

import (
	"testing"
	"unsafe"

	"github.com/ordo-actors/ordo/proto/ordopb"
)

// Every active entity holds a typedBehavior, so its size counts toward an
// idle entity's memory (BenchmarkIdleEntityMemory): four words, the
// event-sourcing rollback point kept apart behind one of them.
func TestBehaviorIsFourWords(t *testing.T) {
	const word = unsafe.Sizeof(uintptr(0))
	if got := unsafe.Sizeof(typedBehavior[*ordopb.Reply]{}); got != 4*word {
		t.Fatalf("typedBehavior is %d bytes, want %d", got, 4*word)
	}
}
