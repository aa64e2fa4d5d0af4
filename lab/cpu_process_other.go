//go:build !unix

package lab

import (
	"errors"
	"runtime"
	"time"
)

// ReadProcessCPU fails where getrusage is missing; reports show "n/a".
func ReadProcessCPU() (time.Duration, error) {
	return 0, errors.New("lab: process CPU time needs getrusage, which " + runtime.GOOS + " lacks")
}
