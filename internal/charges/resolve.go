package charges

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/problem"
	"github.com/oncehq/once/internal/provider"
)

// Route is the charges endpoint (served by package chargeshttp), the route
// its idempotency records and its Resolver are keyed by.
const Route = "POST /v1/charges"

// Provider charges the payment provider and looks charges up;
// *provider.Client is one.
type Provider interface {
	// Charge charges req under the idempotency key. It returns the succeeded
	// charge, or an error that is a *provider.DeclinedError, wraps
	// provider.ErrNotCharged or provider.ErrOutcomeUnknown, matches
	// provider.ErrRejected (the provider refused the request itself), or is
	// another error for a call that was wrong.
	Charge(ctx context.Context, key string, req provider.ChargeRequest) (provider.Charge, error)
	// Lookup returns the charge (succeeded or failed) made under key, or an
	// error wrapping provider.ErrNoCharge when there is none. Any other
	// error means the provider could not tell.
	Lookup(ctx context.Context, key string) (provider.Charge, error)
}

// Resolver is the idempotency.Resolver of POST /v1/charges: it looks the
// request's charge up at the provider under the record's forward key and
// rebuilds the answer with Response; no charge means nothing happened.
type Resolver struct {
	provider Provider
}

// NewResolver returns the Resolver that looks charges up at p.
func NewResolver(p Provider) *Resolver { return &Resolver{provider: p} }

// Resolve looks rec's charge up. It fails when there is no provider, when
// the provider cannot tell, and when Response fails on the charge found.
func (r *Resolver) Resolve(ctx context.Context, rec idempotency.Record) (idempotency.Resolution, error) {
	if r.provider == nil {
		return idempotency.Resolution{}, errors.New("charges: no provider to look the charge up")
	}
	c, err := r.provider.Lookup(ctx, rec.ForwardKey())
	switch {
	case errors.Is(err, provider.ErrNoCharge):
		return idempotency.Resolution{}, nil
	case err != nil:
		return idempotency.Resolution{}, fmt.Errorf("charges: look up %s: %w", rec.Key.Short(), err)
	}
	resp, err := Response(rec, c)
	if err != nil {
		return idempotency.Resolution{}, err
	}
	return idempotency.Resolution{Response: &resp}, nil
}

// Response is the complete answer to POST /v1/charges (status, headers,
// body) for the request recorded in rec once the provider's charge c is
// known: for a succeeded charge, 201 and the charge (rendered by New from
// rec.Key, rec.Request and rec.CreatedAt, and c.ID); for a failed one, 402
// card_declined. The handler sends exactly this answer, and the Resolver,
// which learns c later (provider.Client.Lookup), stores it for an UNKNOWN
// record: both are byte for byte the same. It fails when c has another
// status, is of another amount or currency than the request, or rec lacks
// its request or creation time.
func Response(rec idempotency.Record, c provider.Charge) (idempotency.Response, error) {
	switch c.Status {
	case provider.StatusSucceeded:
	case provider.StatusFailed:
		d := problem.For(ErrDeclined)
		return idempotency.Response{Status: d.Status, Header: problem.Renderer{}.Header(d), Body: problem.Renderer{}.Body(d)}, nil
	default:
		return idempotency.Response{}, fmt.Errorf("charges: response: charge %s has status %q", c.ID, c.Status)
	}
	if rec.CreatedAt.IsZero() {
		return idempotency.Response{}, errors.New("charges: response: the record has no creation time")
	}
	req, err := Decode(rec.Request)
	if err != nil {
		return idempotency.Response{}, fmt.Errorf("charges: response: the recorded request: %w", err)
	}
	if c.Amount != req.Amount || !strings.EqualFold(c.Currency, req.Currency) {
		// Not this request's charge: never tell a client it was charged
		// what it was not.
		return idempotency.Response{}, fmt.Errorf("charges: response: charge %s is of %d %s, the request of %d %s",
			c.ID, c.Amount, c.Currency, req.Amount, req.Currency)
	}
	body, err := json.Marshal(New(rec.Key, req, c.ID, rec.CreatedAt))
	if err != nil {
		return idempotency.Response{}, fmt.Errorf("charges: response: %w", err)
	}
	return idempotency.Response{
		Status: http.StatusCreated,
		Header: map[string]string{"Content-Type": "application/json"},
		Body:   body,
	}, nil
}
