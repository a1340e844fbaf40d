package provider

import (
	"errors"
	"fmt"
)

// Outcomes of Charge and Lookup; see the package documentation. They are
// always returned wrapped ("provider: charge: not charged: ..."), so their
// own text carries no prefix.
var (
	// ErrNotCharged: provably nothing was charged by this request (it never
	// left, or the provider answered 503 or 429).
	ErrNotCharged = errors.New("not charged")
	// ErrOutcomeUnknown: the request may have reached the provider and no
	// usable answer came; the charge may exist.
	ErrOutcomeUnknown = errors.New("outcome unknown")
	// ErrNoCharge: the provider has no charge for the key (Lookup).
	ErrNoCharge = errors.New("no charge for the key")
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
// than 402 and 429, which says the request itself was wrong (nothing was
// charged by it, and sending it again will not help); from Lookup, anything
// but 200 and 404 resource_missing.
type StatusError struct {
	// StatusCode is the HTTP status.
	StatusCode int
	// Code is the provider's error code, when the body had one.
	Code string
	// Message is the provider's explanation, for logs.
	Message string
}

// Error describes the answer.
func (e *StatusError) Error() string {
	if e.Code == "" {
		return fmt.Sprintf("status %d", e.StatusCode)
	}
	return fmt.Sprintf("status %d: %s: %s", e.StatusCode, e.Code, e.Message)
}
