package gateway

import (
	"testing"
	"time"
)

// BenchmarkRequestTime measures requestContext.requestTime for requests
// that arrive within the same second, as most do under load.
func BenchmarkRequestTime(b *testing.B) {
	e := &Emulator{}
	t := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		if e.requestTime(t) == "" {
			b.Fatal("empty requestTime")
		}
	}
}
