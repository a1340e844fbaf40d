package idempotency

import (
	"net/http"
	"time"
)

// Status is the state of a record.
type Status string

// The states of a record; see the package documentation for the transitions.
const (
	StatusInProgress Status = "IN_PROGRESS"
	StatusCompleted  Status = "COMPLETED"
	StatusUnknown    Status = "UNKNOWN"
)

// Mode says how an endpoint has its effects, and so how its requests are
// recorded.
type Mode int

const (
	// Atomic endpoints have only DynamoDB writes as effects (Effect values),
	// committed in one transaction with the COMPLETED record.
	Atomic Mode = iota
	// Leased endpoints reserve the key IN_PROGRESS under a lease, run, and
	// complete fenced on the lease token; their effects, if any, are committed
	// with the completion, so an abandoned reservation is safe to release.
	Leased
	// External endpoints are Leased endpoints that call out to another system;
	// an abandoned reservation goes to UNKNOWN and is reconciled, never
	// re-executed blindly.
	External
)

// String names m.
func (m Mode) String() string {
	switch m {
	case Atomic:
		return "atomic"
	case Leased:
		return "leased"
	case External:
		return "external"
	}
	return "invalid"
}

// Response is a stored HTTP response.
type Response struct {
	// Status is the HTTP status code.
	Status int
	// Header holds the response's header fields (Content-Type, Location
	// and whatever else the handler set), one value each: a field the
	// handler gave several values is kept as one line, its values joined
	// with ", " in order, as RFC 9110 §5.3 allows for any field that may
	// be repeated, and the live answer is sent the same way.
	Header map[string]string
	// SetCookie holds the Set-Cookie field values, in order, one per line:
	// the one field whose values cannot be joined (RFC 9110 §5.3, RFC 6265
	// §3). Records stored before it existed hold a single Set-Cookie in
	// Header.
	SetCookie []string
	// Body is the response body, byte for byte.
	Body []byte
}

// SetHeader sets r's header fields on h: each field of Header, replacing
// its values there, then the Set-Cookie lines of SetCookie.
func (r Response) SetHeader(h http.Header) {
	for k, v := range r.Header {
		h.Set(k, v)
	}
	if len(r.SetCookie) > 0 {
		h["Set-Cookie"] = append([]string(nil), r.SetCookie...)
	}
}

// Record is the stored state of one scoped idempotency key.
type Record struct {
	// Key is the scoped key the record belongs to.
	Key Key
	// Status is the record's state.
	Status Status
	// Route is the route pattern that created the record ("POST /v1/payments").
	Route string
	// Fingerprint identifies the request that created the record.
	Fingerprint string
	// External is true when the request may have had an effect outside the
	// store (External mode).
	External bool
	// LeaseToken is the fencing token of the current owner (IN_PROGRESS and
	// UNKNOWN records).
	LeaseToken string
	// ExpiresAt is the record's expiry, and the store's TTL but for an
	// UNKNOWN record and an External reservation, which TTL never deletes:
	// the lease deadline while IN_PROGRESS, the end of the retention
	// otherwise.
	ExpiresAt time.Time
	// Request is the canonical request body, kept on External records (in
	// every state) so that a reconciler can rebuild the response.
	Request []byte
	// Response is the stored response of a COMPLETED record.
	Response *Response
	// Point is the recovery point a multi-step request has reached: the name
	// of its last committed phase, empty for a one-step request (see
	// BeginAt).
	Point string
	// Data holds what the phases committed so far recorded (ids, another
	// system's references), for the phases after Point.
	Data map[string]string
	// CreatedAt is when the record was first written.
	CreatedAt time.Time
	// UpdatedAt is when the record last changed.
	UpdatedAt time.Time
	// UnknownSince is when an UNKNOWN record's last call out may have
	// been made: set by the Store's MarkUnknown that moves an IN_PROGRESS
	// record to UNKNOWN, carried unchanged by a redrive's MarkUnknown
	// (which calls nothing out), and set again by a Resolver's Advance of
	// the UNKNOWN record (ResumeSteps: the phases after it may call out
	// again). Every call out of its request was made before it, so a
	// reconciler measures the time the other system may still apply one
	// (recovery.ReconcilerConfig.Settle) from it, not from UpdatedAt,
	// which each redrive moves. A record that went UNKNOWN before stores
	// kept it has none (zero) until its next MarkUnknown, which sets it to
	// that write's time; a Reserve of an UNKNOWN record (a restore) keeps
	// the one it is given. Zero on a record of any other status: a store
	// keeps it on UNKNOWN records only.
	UnknownSince time.Time
}

// Expired reports whether r's expiry has passed at now.
func (r Record) Expired(now time.Time) bool {
	return !r.ExpiresAt.After(now)
}

// ForwardKey is the key under which the request of r was sent to another
// system (Key.Forward of its fingerprint).
func (r Record) ForwardKey() string { return r.Key.Forward(r.Fingerprint) }

// Reclaimable reports whether a new request may overwrite r at now: its expiry
// has passed and it is COMPLETED, or an IN_PROGRESS reservation that is not
// External. An External reservation must be reconciled through UNKNOWN
// first, and an UNKNOWN record never expires into a free key (its request
// may have had its effect at the other system): only its reconciliation, or
// an operator, ends it. Stores implement the same rule in their conditions.
func (r Record) Reclaimable(now time.Time) bool {
	return r.Expired(now) && (r.Status == StatusCompleted || r.Status == StatusInProgress && !r.External)
}
