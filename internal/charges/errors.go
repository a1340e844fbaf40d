package charges

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/problem"
	"github.com/oncehq/once/internal/provider"
)

// The answers of POST /v1/charges to the provider's outcomes.
var (
	// ErrDeclined: the provider declined the charge (402, final: stored and
	// replayed).
	ErrDeclined = problem.New(http.StatusPaymentRequired, "card_declined", "Card declined",
		"The payment provider declined the charge; nothing was charged. This answer is final for this Idempotency-Key: to try again, use a new key.")
	// ErrProviderRejected: the provider refused the request itself (422,
	// final, as a decline is: stored and replayed). The provider's own
	// message is never sent, it may echo the request (a card token); the
	// error's text goes to the log.
	ErrProviderRejected = problem.New(http.StatusUnprocessableEntity, "provider_rejected", "Provider rejected the request",
		"The payment provider rejected the request; nothing was charged. Retrying the same request will not help: "+
			"this answer is final for this Idempotency-Key. To try again, change the request and use a new key.").Logged()
	// ErrProviderUnavailable: provably nothing was charged (the provider
	// could not be reached or said so: 503, 429), or no provider is
	// configured (503, not stored: a retry executes).
	ErrProviderUnavailable = problem.New(http.StatusServiceUnavailable, "provider_unavailable", "Provider unavailable",
		"The payment provider could not take the charge; nothing was charged. Retry with the same Idempotency-Key.").
		WithHeader("Retry-After", "1")
	// ErrOutcomeUnknown: no usable answer came (504): the charge may or may
	// not exist; the record goes UNKNOWN and is reconciled.
	ErrOutcomeUnknown = problem.New(http.StatusGatewayTimeout, "provider_outcome_unknown", "Provider outcome unknown",
		"The payment provider did not answer in time: the charge may or may not have been made. Retry with the same Idempotency-Key "+
			"after Retry-After: once the outcome is known the retry gets it, and the card is never charged twice.").
		WithHeader("Retry-After", idempotency.RetryAfterHeader(&idempotency.InProgressError{RetryAfter: idempotency.DefaultUnknownRetryAfter}))
)

// Answer is the answer to err, an error of provider.Client.Charge or
// Lookup: err wrapped in the matching answer above, or err itself (a 500)
// when none matches (another 4xx from the provider, such as 401 for a wrong
// API key).
func Answer(err error) error {
	var declined *provider.DeclinedError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &declined):
		return fmt.Errorf("%w: %w", ErrDeclined, err)
	case errors.Is(err, provider.ErrRejected):
		return fmt.Errorf("%w: %w", ErrProviderRejected, err)
	case errors.Is(err, provider.ErrNotCharged):
		return fmt.Errorf("%w: %w", ErrProviderUnavailable, err)
	case errors.Is(err, provider.ErrOutcomeUnknown):
		return fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
	}
	return err
}
