#include "funcdata.h"

// func Grow()
//
// A 16-KiB frame, with no pointers in it: the prologue grows the stack
// when the frame does not fit, and the body returns at once. See stack.go.
TEXT ·Grow(SB), 0, $16384-0
	NO_LOCAL_POINTERS
	RET
