//go:build unix

package bench

import (
	"syscall"
	"time"
)

// selfCPU returns the CPU time (user and system) this process has used,
// its children's not included (getrusage RUSAGE_SELF, microseconds).
func selfCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
