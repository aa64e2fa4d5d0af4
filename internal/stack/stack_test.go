package stack

import (
	"runtime"
	"runtime/debug"
	"sync"
	"testing"
)

// stackInuse returns the bytes of the heap's spans that hold stacks.
func stackInuse() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.StackInuse
}

// TestGrowLeavesA32KiBStack parks goroutines that called Grow and checks
// that the stacks they hold add up to at least 32 KiB each, less a margin
// for stacks the runtime had cached: without Grow, a goroutine this
// shallow holds its starting stack (a few KiB). The garbage collector is
// off meanwhile: it would shrink the parked goroutines' stacks.
func TestGrowLeavesA32KiBStack(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	const n = 256
	before := stackInuse()
	var grown, done sync.WaitGroup
	release := make(chan struct{})
	grown.Add(n)
	done.Add(n)
	for range n {
		go func() {
			defer done.Done()
			Grow()
			grown.Done()
			<-release
		}()
	}
	grown.Wait()
	got := int64(stackInuse()) - int64(before)
	close(release)
	done.Wait()
	if min := int64(n * 24 << 10); got < min {
		t.Fatalf("%d goroutines that called Grow hold %d KiB of stack, want at least %d KiB", n, got>>10, min>>10)
	}
}

// TestGrowKeepsTheCallersFrames calls Grow with frames of the caller on
// the stack, which the copy must carry over intact.
func TestGrowKeepsTheCallersFrames(t *testing.T) {
	var deep func(int) int
	deep = func(d int) int {
		var pad [64]byte
		pad[d%64] = byte(d)
		if d == 0 {
			Grow()
			return int(pad[0])
		}
		return deep(d-1) + int(pad[d%64])
	}
	want := 0
	for d := 1; d <= 200; d++ {
		want += d % 256
	}
	ch := make(chan int)
	go func() { ch <- deep(200) }()
	if got := <-ch; got != want {
		t.Fatalf("deep(200) = %d after Grow, want %d", got, want)
	}
}
