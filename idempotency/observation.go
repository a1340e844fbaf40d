package idempotency

import (
	"context"
	"time"
)

// Observation collects what the middleware did with one request, for the
// caller's log line and metrics. It never holds the raw key or the body.
type Observation struct {
	// Route is the wrapped route.
	Route string
	// Tenant is the caller's tenant.
	Tenant string
	// Key is Key.Short of the scoped key.
	Key string
	// Outcome is one of the Outcome constants.
	Outcome string
	// StoreCalls counts store round trips.
	StoreCalls int
	// StoreLatency is the time spent in the store.
	StoreLatency time.Duration
	// CacheHit says the answer came from the Middleware's Cache, with no
	// store round trip.
	CacheHit bool
	// Err describes a store error, for the log.
	Err string
}

type observationKey struct{}

// WithObservation returns a context whose requests the middleware reports
// into obs. The caller then logs the request itself: the middleware logs
// the outcomes an operator must see to Config.Logger only for a request
// without an Observation.
func WithObservation(ctx context.Context, obs *Observation) context.Context {
	return context.WithValue(ctx, observationKey{}, obs)
}

// observationFrom returns the Observation installed in ctx by
// WithObservation, and true; else a new one, and false.
func observationFrom(ctx context.Context) (*Observation, bool) {
	if obs, ok := ctx.Value(observationKey{}).(*Observation); ok && obs != nil {
		return obs, true
	}
	return &Observation{}, false
}
