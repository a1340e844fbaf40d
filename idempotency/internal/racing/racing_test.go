package racing

import (
	"errors"
	"sync/atomic"
	"testing"
)

// TestAll: every index runs once, from goroutines that overlap, and each
// error lands at its index.
func TestAll(t *testing.T) {
	const n = 16
	var ran, inside, most atomic.Int32
	gate := make(chan struct{})
	errs := All(n, func(i int) error {
		ran.Add(1)
		now := inside.Add(1)
		for {
			m := most.Load()
			if now <= m || most.CompareAndSwap(m, now) {
				break
			}
		}
		if now == n {
			close(gate)
		}
		<-gate // every goroutine waits until all n are inside at once
		inside.Add(-1)
		if i%2 == 1 {
			return errors.New("odd")
		}
		return nil
	})
	if ran.Load() != n || most.Load() != n {
		t.Fatalf("ran %d, at most %d at once; want %d and %d", ran.Load(), most.Load(), n, n)
	}
	for i, err := range errs {
		if (err != nil) != (i%2 == 1) {
			t.Errorf("errs[%d] = %v", i, err)
		}
	}
}
