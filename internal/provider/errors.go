package provider

import (
	"errors"
	"fmt"
	"net/http"
)

// Outcomes of Charge, Refund and their lookups; see the package
// documentation. They are always returned wrapped ("provider: charge: not
// charged: ..."), so their own text carries no prefix.
var (
	// ErrNotCharged: provably nothing was charged by this request (it never
	// left, or the provider answered 503 or 429).
	ErrNotCharged = errors.New("not charged")
	// ErrOutcomeUnknown: the request may have reached the provider and no
	// usable answer came; the charge (or refund) may exist.
	ErrOutcomeUnknown = errors.New("outcome unknown")
	// ErrNoCharge: the provider has no charge for the key (Lookup).
	ErrNoCharge = errors.New("no charge for the key")
	// ErrNotRefunded: provably nothing was refunded by this request (it
	// never left, or the provider answered 503 or 429).
	ErrNotRefunded = errors.New("not refunded")
	// ErrNoRefund: the provider has no refund for the key (LookupRefund).
	ErrNoRefund = errors.New("no refund for the key")
	// ErrRejected: the provider refused the charge (or refund) request
	// itself as wrong (400, 413 or 422): nothing was charged (or refunded)
	// by it, and sending the same request again will not help. Charge and
	// Refund never return it as such: its *StatusError matches it
	// (errors.Is).
	ErrRejected = errors.New("rejected")
)

// DeclinedError is the provider's final refusal of a charge (402): it
// recorded the charge as failed.
type DeclinedError struct {
	// Code is the provider's error code (card_declined).
	Code string
	// Message is the provider's explanation, for logs.
	Message string
	// Charge is the failed charge: ID, Status (failed), FailureCode, and the
	// Amount and Currency of the request. Created is zero: the provider does
	// not say (Lookup has it).
	Charge Charge
}

// Error describes the decline.
func (e *DeclinedError) Error() string {
	return fmt.Sprintf("declined (%s): failed charge %s", e.Code, e.Charge.ID)
}

// StatusError is an answer that maps to no outcome: from Charge, a 4xx other
// than 402 and 429, which says that nothing was charged by the request; from
// Lookup, anything but 200 and 404 resource_missing.
type StatusError struct {
	// StatusCode is the HTTP status.
	StatusCode int
	// Code is the provider's error code, when the body had one.
	Code string
	// Message is the provider's explanation. It may echo request values (a
	// card token): Error leaves it out, and a caller logs it only on purpose.
	Message string
}

// Error describes the answer by its status and code only.
func (e *StatusError) Error() string {
	if e.Code == "" {
		return fmt.Sprintf("status %d", e.StatusCode)
	}
	return fmt.Sprintf("status %d: %s", e.StatusCode, e.Code)
}

// Is reports whether target is ErrRejected and e an answer about the
// request's own content: 400, 413 or 422. The other 4xx are not: 401 and 403
// point at the caller's credentials, 404 and 405 at a wrong URL, 408, 409
// (the key is in use by a concurrent request) and 425 ask for a retry;
// fixing the configuration or retrying may well help with them.
//
// An answer that the key is already used with other parameters
// (idempotency_key_reused, Stripe's idempotency_error) is not ErrRejected
// either: a charge exists under the key.
func (e *StatusError) Is(target error) bool {
	if target != ErrRejected || e.Code == "idempotency_key_reused" || e.Code == "idempotency_error" {
		return false
	}
	switch e.StatusCode {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity:
		return true
	}
	return false
}
