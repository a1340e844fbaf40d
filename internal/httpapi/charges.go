package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/internal/charges"
	"github.com/oncehq/once/internal/fault"
	"github.com/oncehq/once/internal/provider"
)

// Provider charges the payment provider; *provider.Client is one.
type Provider interface {
	// Charge charges req under the idempotency key. It returns the succeeded
	// charge, or an error that is a *provider.DeclinedError, wraps
	// provider.ErrNotCharged or provider.ErrOutcomeUnknown, matches
	// provider.ErrRejected (the provider refused the request itself), or is
	// another error for a call that was wrong.
	Charge(ctx context.Context, key string, req provider.ChargeRequest) (provider.Charge, error)
}

// ErrNoProvider: the handler has no payment provider configured (503
// provider_unavailable; nothing is reserved).
var ErrNoProvider = errors.New("httpapi: no payment provider is configured")

// createCharge serves POST /v1/charges inside the idempotency middleware, in
// External mode.
func (h *handler) createCharge(w http.ResponseWriter, r *http.Request) {
	req, ok := decodeBody(w, r, charges.Decode)
	if !ok {
		return
	}
	if h.deps.Provider == nil {
		WriteError(w, r, ErrNoProvider)
		return
	}
	call, ok := idempotency.Begin(w, r)
	if !ok {
		return
	}
	c, err := h.charge(r, call.ForwardKey(), charges.ProviderRequest(req))
	fault.Check(r.Context(), fault.AfterProviderCall)
	var declined *provider.DeclinedError
	switch {
	case err == nil:
	case errors.As(err, &declined):
		c = declined.Charge
	case errors.Is(err, provider.ErrOutcomeUnknown):
		// The charge may exist: the record goes to UNKNOWN, for the
		// reconciler, and this 504 is not stored.
		call.Unknown()
		WriteError(w, r, err)
		return
	default:
		// The provider rejected the request (422, final: the engine stores
		// it, as a decline), nothing was charged (503), or something else
		// went wrong (500): the engine releases the key of a 5xx, so a retry
		// executes.
		WriteError(w, r, err)
		return
	}
	resp, err := ChargeResponse(call.Record(), c)
	if err != nil {
		// Unreachable with a well-behaved provider (a charge of another
		// amount or currency under this request's key). Something was
		// charged that this request cannot answer for: leave the record
		// UNKNOWN, where the reconciler fails on it too and its alarm
		// fires, rather than release the key to the same answer forever.
		call.Unknown()
		WriteError(w, r, fmt.Errorf("%w: %w", provider.ErrOutcomeUnknown, err))
		return
	}
	writeResponse(w, resp)
}

// charge calls the provider, bounded by ProviderTimeout, and notes the call
// for the request's log line.
func (h *handler) charge(r *http.Request, key string, req provider.ChargeRequest) (provider.Charge, error) {
	ctx := r.Context()
	if h.deps.ProviderTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, h.deps.ProviderTimeout)
		defer cancel()
	}
	start := time.Now()
	c, err := h.deps.Provider.Charge(ctx, key, req)
	if info := infoFrom(r.Context()); info != nil {
		info.providerCalls++
		info.providerLatency += time.Since(start)
	}
	return c, err
}

// ChargeResponse is the complete answer to POST /v1/charges (status, headers,
// body) for the request recorded in rec once the provider's charge c is
// known: for a succeeded charge, 201 and the charge (rendered by
// charges.Charge from rec.Key, rec.Request and rec.CreatedAt, and c.ID); for
// a failed one, 402 card_declined. The handler sends exactly this answer, and
// a reconciler that learns c later (provider.Client.Lookup) stores it for an
// UNKNOWN record: both are byte for byte the same. It fails when c has
// another status or rec lacks its request or creation time.
func ChargeResponse(rec idempotency.Record, c provider.Charge) (idempotency.Response, error) {
	switch c.Status {
	case provider.StatusSucceeded:
	case provider.StatusFailed:
		return problemResponse(&provider.DeclinedError{Code: c.FailureCode, Charge: c}), nil
	default:
		return idempotency.Response{}, fmt.Errorf("httpapi: charge response: charge %s has status %q", c.ID, c.Status)
	}
	if rec.CreatedAt.IsZero() {
		return idempotency.Response{}, errors.New("httpapi: charge response: the record has no creation time")
	}
	req, err := charges.Decode(rec.Request)
	if err != nil {
		return idempotency.Response{}, fmt.Errorf("httpapi: charge response: the recorded request: %w", err)
	}
	if c.Amount != req.Amount || !strings.EqualFold(c.Currency, req.Currency) {
		// Not this request's charge: never tell a client it was charged
		// what it was not.
		return idempotency.Response{}, fmt.Errorf("httpapi: charge response: charge %s is of %d %s, the request of %d %s",
			c.ID, c.Amount, c.Currency, req.Amount, req.Currency)
	}
	body, err := json.Marshal(charges.New(rec.Key, req, c.ID, rec.CreatedAt))
	if err != nil {
		return idempotency.Response{}, fmt.Errorf("httpapi: charge response: %w", err)
	}
	return idempotency.Response{
		Status: http.StatusCreated,
		Header: map[string]string{"Content-Type": "application/json"},
		Body:   body,
	}, nil
}
