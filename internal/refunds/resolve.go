package refunds

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/internal/provider"
)

// Routes of the refunds endpoints.
const (
	RouteCreate = "POST /v1/refunds"
	RouteGet    = "GET /v1/refunds/{id}"
)

// Provider refunds charges and looks refunds up; *provider.Client is one.
type Provider interface {
	// Refund refunds req under the idempotency key. It returns the
	// succeeded refund, or an error that wraps provider.ErrNotRefunded or
	// provider.ErrOutcomeUnknown, matches provider.ErrRejected, or is
	// another error for a call that was wrong.
	Refund(ctx context.Context, key string, req provider.RefundRequest) (provider.Refund, error)
	// LookupRefund returns the refund made under key, or an error wrapping
	// provider.ErrNoRefund when there is none. Any other error means the
	// provider could not tell.
	LookupRefund(ctx context.Context, key string) (provider.Refund, error)
}

// Resolver is the idempotency.Resolver of POST /v1/refunds: it looks the
// request's refund up at the provider under the record's forward key. A
// refund found completes the record with Response's answer and the effects
// the live request would have written (Tables.Completion); none releases
// the key and gives the hold back (Tables.Release).
type Resolver struct {
	tables   Tables
	provider Provider
}

// NewResolver returns the Resolver that looks refunds up at p and writes
// the effects on t.
func NewResolver(t Tables, p Provider) *Resolver { return &Resolver{tables: t, provider: p} }

// Resolve looks rec's refund up. It fails when there is no provider, when
// the provider cannot tell, and when the refund found is not the request's;
// a recorded request that does not decode is ErrUnresolvable.
func (r *Resolver) Resolve(ctx context.Context, rec idempotency.Record) (idempotency.Resolution, error) {
	if r.provider == nil {
		return idempotency.Resolution{}, errors.New("refunds: no provider to look the refund up")
	}
	req, err := Decode(rec.Request)
	if err != nil {
		return idempotency.Resolution{}, fmt.Errorf("refunds: the recorded request: %w: %w", idempotency.ErrUnresolvable, err)
	}
	res, err := r.provider.LookupRefund(ctx, rec.ForwardKey())
	switch {
	case errors.Is(err, provider.ErrNoRefund):
		return idempotency.Resolution{Effects: []idempotency.Effect{r.tables.Release(rec.Key, req.Payment)}}, nil
	case err != nil:
		return idempotency.Resolution{}, fmt.Errorf("refunds: look up %s: %w", rec.Key.Short(), err)
	}
	ref, resp, err := Outcome(rec, res)
	if err != nil {
		return idempotency.Resolution{}, err
	}
	return idempotency.Resolution{Response: &resp, Effects: r.tables.Completion(rec.Key, ref)}, nil
}

// Response is the complete answer to POST /v1/refunds (status, headers,
// body) for the request recorded in rec once the provider's refund res is
// known: 201, Location, and the refund (New, from rec.Key, rec.Request and
// rec.CreatedAt, and res). The handler sends exactly this answer, and the
// Resolver, which learns res later, stores it: both are byte for byte the
// same. It fails when res is not a succeeded refund of the request's
// amount (when it names one), or rec lacks its request or creation time.
func Response(rec idempotency.Record, res provider.Refund) (idempotency.Response, error) {
	_, resp, err := Outcome(rec, res)
	return resp, err
}

// Outcome is the refund of Response, and its answer.
func Outcome(rec idempotency.Record, res provider.Refund) (Refund, idempotency.Response, error) {
	if rec.CreatedAt.IsZero() {
		return Refund{}, idempotency.Response{}, errors.New("refunds: response: the record has no creation time")
	}
	req, err := Decode(rec.Request)
	if err != nil {
		return Refund{}, idempotency.Response{}, fmt.Errorf("refunds: response: the recorded request: %w", err)
	}
	switch {
	case res.Status != provider.StatusSucceeded:
		return Refund{}, idempotency.Response{}, fmt.Errorf("refunds: response: refund %s has status %q", res.ID, res.Status)
	case res.Amount <= 0 || req.Amount > 0 && res.Amount != req.Amount:
		return Refund{}, idempotency.Response{}, fmt.Errorf("refunds: response: refund %s is of %d, the request of %d", res.ID, res.Amount, req.Amount)
	}
	ref := New(rec.Key, req, res, rec.CreatedAt)
	body, err := json.Marshal(ref)
	if err != nil {
		return Refund{}, idempotency.Response{}, fmt.Errorf("refunds: response: %w", err)
	}
	return ref, idempotency.Response{
		Status: http.StatusCreated,
		Header: map[string]string{"Content-Type": "application/json", "Location": Location(ref.ID)},
		Body:   body,
	}, nil
}
