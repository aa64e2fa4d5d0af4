// Package stack grows a goroutine's stack before the deep calls it is
// about to make.
//
// Go grows a goroutine's stack by copying it to one twice the size when a
// call finds it full, and adjusts every frame on it as it copies; the
// garbage collector halves the stack of a goroutine that uses under a
// quarter of it. A goroutine that waits with a shallow stack and then
// runs deep code (a pool worker between runs) thus pays for one or two
// copies deep in that code, each costing in proportion to the frames on
// the stack: 3.5 % of a bank node's CPU in runtime.copystack before the
// actors' pool called Grow. Grow makes the copy at the top of the
// goroutine, where it is cheap.
//
// The stack it leaves is 32 KiB, which a goroutine keeps until the
// collector shrinks it: worth it for a bounded set of long-lived
// goroutines such as a pool's, not for one per call (the router's
// goroutine per entity-to-entity request gained 0.3 % of CPU from it,
// for up to four times the stack of every call in flight).
package stack

// Grow grows the calling goroutine's stack, if need be, so that a frame
// of 16 KiB fits above the caller's: the stack is then at least 32 KiB
// when the caller's frames are few. When it is large enough already, the
// call costs a comparison.
//
// It is a function with a 16-KiB frame that returns at once, written in
// assembly (stack.s) so that nothing clears the frame: the function's
// prologue grows the stack when the frame does not fit. The technique is
// CockroachDB's growstack package.
func Grow()
