package idempotency

import (
	"context"
	"errors"
)

// Resolver finds out what became of a request whose outcome is unknown: an
// External request whose call out timed out, or whose process crashed or lost
// its lease while calling out. Every External route has one (see
// Middleware.External); the reconciler dispatches an UNKNOWN record to the
// Resolver of its Route, and never releases or re-executes a record whose
// route has none.
//
// A Resolver must be safe for concurrent use and must not change the other
// system: it asks, it does not do. The one exception is a Resolver that
// resumes a multi-step request (rec.Point set, see BeginAt) with
// ResumeSteps: it runs the phases after rec.Point as the handler would,
// and so repeats at most the interrupted phase's call out, under the same
// Steps.ForwardKey, which the other system (idempotent by key) takes as the
// same operation.
type Resolver interface {
	// Resolve returns what became of rec's request at the other system,
	// looked up by rec.ForwardKey() (for a multi-step request, by the
	// Steps.ForwardKey of the phase after rec.Point). It returns an error when the other
	// system cannot tell now (the reconciler retries), and an error wrapping
	// ErrUnresolvable when it never will (the record stays UNKNOWN for an
	// operator).
	Resolve(ctx context.Context, rec Record) (Resolution, error)
}

// ResolverFunc adapts a function to Resolver.
type ResolverFunc func(ctx context.Context, rec Record) (Resolution, error)

// Resolve calls f.
func (f ResolverFunc) Resolve(ctx context.Context, rec Record) (Resolution, error) {
	return f(ctx, rec)
}

// Resolution is what a Resolver found.
type Resolution struct {
	// Response is the answer the request would have received had the other
	// system's answer come back in time, byte for byte what the live handler
	// sends for that outcome. Nil means the request provably had no effect
	// there: the key is released, so that a retry executes.
	Response *Response
	// Effects are committed with the completion (when Response is set: the
	// business writes the live handler would have added) or with the release
	// (when it is nil: undoing what the reservation's holds took), in the
	// same transaction, fenced on the lease.
	Effects []Effect
	// Steps, for a multi-step request the Resolver resumed (ResumeSteps),
	// are where it ended: the completed record keeps their point and data,
	// as the live path's does (Call.Finish names the final point).
	Steps *Steps
	// FinalPoint names the final recovery point, as Call.Finish does.
	FinalPoint string
}

// Resolvers maps route patterns ("POST /v1/charges") to their resolvers.
type Resolvers map[string]Resolver

// ErrUnresolvable is wrapped by a Resolver's error when the outcome can never
// be told automatically.
var ErrUnresolvable = errors.New("idempotency: the outcome cannot be resolved automatically")
