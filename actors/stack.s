#include "funcdata.h"

// func growStack()
//
// A 16-KiB frame: the function's prologue grows the stack when the frame
// does not fit, and the body returns at once. See dispatch.go.
TEXT ·growStack(SB), 0, $16384-0
	NO_LOCAL_POINTERS
	RET
