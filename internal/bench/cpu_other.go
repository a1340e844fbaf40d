//go:build !unix

package bench

import "time"

// selfCPU cannot read this process's CPU time here: false.
func selfCPU() (time.Duration, bool) { return 0, false }
