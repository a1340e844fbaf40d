// Package racing starts goroutines together, for the tests of once's
// public packages (storetest, recovery) that race writers on one record
// and count what each got.
package racing

import "sync"

// All runs do(i) for every i in [0, n) from n goroutines released at
// once, and returns each one's error at its index.
func All(n int, do func(i int) error) []error {
	errs := make([]error, n)
	var start, wg sync.WaitGroup
	start.Add(1)
	for i := range n {
		wg.Go(func() {
			start.Wait()
			errs[i] = do(i)
		})
	}
	start.Done()
	wg.Wait()
	return errs
}
