package queue

import (
	"math/rand/v2"
	"time"
)

// Backoff is the delay before the attempt after attempt (from 1) of a retry
// sent through a queue: base doubled per attempt, capped at MaxDelay, with
// equal jitter (half of it fixed, half random), so that what failed together
// does not all come back together.
func Backoff(base time.Duration, attempt int) time.Duration {
	d := max(base, 0)
	for i := 1; i < attempt && d < MaxDelay; i++ {
		d *= 2
	}
	d = min(d, MaxDelay)
	return d/2 + rand.N(d/2+1)
}
