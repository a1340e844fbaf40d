package refunds

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/problem"
	"github.com/oncehq/once/internal/provider"
)

// The business answers of POST /v1/refunds, decided by the conditions of
// the hold in the transaction that reserves the key: final for the key,
// stored and replayed.
var (
	// ErrNotRefundable: the payment has not succeeded (400).
	ErrNotRefundable = problem.New(http.StatusBadRequest, "payment_not_refundable", "Payment not refundable",
		"Only a succeeded payment can be refunded. This answer is final for this Idempotency-Key: to try again once the payment has succeeded, use a new key.")
	// ErrExceedsRefundable: the amount is more than is left to refund,
	// counting the refunds in flight (400); see *ExceedsError.
	ErrExceedsRefundable = problem.New(http.StatusBadRequest, "amount_exceeds_refundable", "Amount exceeds refundable",
		"The amount is more than is left to refund, counting refunds in progress.")
	// ErrKeyUsed: the key named a refund before, whose record has expired
	// (422 idempotency_key_reused).
	ErrKeyUsed = problem.New(http.StatusUnprocessableEntity, "idempotency_key_reused", "Idempotency-Key reused",
		"This Idempotency-Key already named a refund, and a refund's key never names another: use a new key for a new refund.")
)

// ExceedsError is ErrExceedsRefundable for a payment with Left left to
// refund, counting the refunds in flight. It matches ErrExceedsRefundable.
type ExceedsError struct {
	// Left is what was left when the refund was refused.
	Left int64
}

// Error describes the refusal.
func (e *ExceedsError) Error() string {
	return fmt.Sprintf("refunds: the amount exceeds what is left to refund (%d)", e.Left)
}

// Is makes errors.Is(err, ErrExceedsRefundable) true.
func (e *ExceedsError) Is(target error) bool { return target == ErrExceedsRefundable }

// Problem answers 400 amount_exceeds_refundable, saying what is left.
func (e *ExceedsError) Problem() problem.Details {
	d := ErrExceedsRefundable.Problem()
	if e.Left == 0 {
		d.Detail = "Nothing is left to refund of this payment, counting refunds in progress."
	} else {
		d.Detail = fmt.Sprintf("The amount is more than is left to refund of this payment: %d, counting refunds in progress.", e.Left)
	}
	return d
}

// The answers of POST /v1/refunds to the provider's outcomes.
var (
	// ErrProviderRejected: the provider refused the request itself (422,
	// final: stored and replayed). Its own message is never sent.
	ErrProviderRejected = problem.New(http.StatusUnprocessableEntity, "provider_rejected", "Provider rejected the request",
		"The payment provider rejected the refund; nothing was refunded. Retrying the same request will not help: "+
			"this answer is final for this Idempotency-Key.").Logged()
	// ErrProviderUnavailable: provably nothing was refunded, or no provider
	// is configured (503, not stored: a retry executes).
	ErrProviderUnavailable = problem.New(http.StatusServiceUnavailable, "provider_unavailable", "Provider unavailable",
		"The payment provider could not take the refund; nothing was refunded. Retry with the same Idempotency-Key.").
		WithHeader("Retry-After", "1")
	// ErrOutcomeUnknown: no usable answer came (504): the refund may or may
	// not exist; the record goes UNKNOWN and is reconciled.
	ErrOutcomeUnknown = problem.New(http.StatusGatewayTimeout, "provider_outcome_unknown", "Provider outcome unknown",
		"The payment provider did not answer in time: the refund may or may not have been made. Retry with the same Idempotency-Key "+
			"after Retry-After: once the outcome is known the retry gets it, and the payment is never refunded twice.").
		WithHeader("Retry-After", idempotency.RetryAfterHeader(&idempotency.InProgressError{RetryAfter: idempotency.DefaultUnknownRetryAfter}))
)

// Answer is the answer to err, an error of provider.Client.Refund: err
// wrapped in the matching answer above, or err itself (a 500) when none
// matches. A key the provider says is used with other parameters has a
// refund there: that outcome is unknown, not a 500 that would release the
// hold.
func Answer(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, provider.ErrOutcomeUnknown), keyReused(err):
		return fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
	case errors.Is(err, provider.ErrRejected):
		return fmt.Errorf("%w: %w", ErrProviderRejected, err)
	case errors.Is(err, provider.ErrNotRefunded):
		return fmt.Errorf("%w: %w", ErrProviderUnavailable, err)
	}
	return err
}

// keyReused reports whether err is the provider's answer that the key was
// used with other parameters.
func keyReused(err error) bool {
	var se *provider.StatusError
	return errors.As(err, &se) && (se.Code == "idempotency_key_reused" || se.Code == "idempotency_error")
}
