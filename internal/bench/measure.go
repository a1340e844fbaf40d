package bench

import (
	"runtime"
	"slices"
	"sync"
	"time"
)

// measured accumulates one case's operations: their latencies, the
// allocations they made, the DynamoDB calls they made (the Meter's tally)
// and the answers they got.
type measured struct {
	mu      sync.Mutex
	lat     []time.Duration
	allocs  uint64
	ops     int
	tally   Tally
	answers map[string]int
}

// sample is one measured operation, which may run in several segments (a
// recovery: the checker, the reconciler, the client's retry); what happens
// between segments (setup, clock moves) is not measured.
type sample struct {
	d      time.Duration
	allocs uint64
}

// run runs f as a segment of s, timing it and counting the heap allocations
// the process makes meanwhile.
func (s *sample) run(f func() error) error {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	err := f()
	d := time.Since(start)
	runtime.ReadMemStats(&after)
	s.d += d
	s.allocs += after.Mallocs - before.Mallocs
	return err
}

// add records a finished sample.
func (m *measured) add(s sample) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lat = append(m.lat, s.d)
	m.allocs += s.allocs
	m.ops++
}

// answer counts an answer under label.
func (m *measured) answer(label string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.answers == nil {
		m.answers = map[string]int{}
	}
	m.answers[label]++
}

// quantile returns the q-quantile of d (nearest rank), 0 when d is empty.
func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// clock is the time source of the functions the bench runs in process: the
// real time, moved forward past leases and settle times by the bench.
type clock struct {
	mu     sync.Mutex
	offset time.Duration
}

// Now returns the real time plus the moves.
func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

// advanceTo moves the clock to t, if t is ahead of it.
func (c *clock) advanceTo(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d := t.Sub(time.Now().Add(c.offset)); d > 0 {
		c.offset += d
	}
}
