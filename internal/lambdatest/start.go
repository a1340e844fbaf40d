package lambdatest

import (
	"context"
	"sync"
	"testing"
	"time"
)

// Runner works until its context is cancelled, as a stream.Poller (an event
// source mapping run in process) does.
type Runner interface {
	Run(ctx context.Context) error
}

// Start runs r in the background until stop is called or the test ends, and
// then checks that Run returns nil within 10 seconds. Calling stop again does
// nothing.
func Start(t testing.TB, r Runner) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run() = %v, want nil after cancellation", err)
				}
			case <-time.After(10 * time.Second):
				t.Errorf("Run did not return within 10s of cancellation")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}
