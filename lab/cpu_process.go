//go:build unix

package lab

import (
	"syscall"
	"time"
)

// ReadProcessCPU returns the CPU time (user + system) this process has
// used so far, all its threads together (getrusage RUSAGE_SELF).
func ReadProcessCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, err
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}
