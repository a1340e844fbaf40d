package charges

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/problem"
	"github.com/oncehq/once/internal/fault"
	"github.com/oncehq/once/internal/httpapi"
	"github.com/oncehq/once/internal/provider"
)

// Route is the charges endpoint.
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

// Routes returns POST /v1/charges in External mode: the key is reserved
// under a lease, the provider is charged under the request's forward key,
// each call bounded by timeout (none but the provider client's own when
// zero; it must be shorter than the lease), and an unknown outcome is
// resolved by looking the charge up (NewResolver). Without a provider the
// route answers a valid request 503 provider_unavailable, reserving nothing.
func Routes(mw *idempotency.Middleware, p Provider, timeout time.Duration) []httpapi.Route {
	h := handler{provider: p, timeout: timeout}
	return []httpapi.Route{{Pattern: Route, Handler: mw.External(Route, http.HandlerFunc(h.create), NewResolver(p))}}
}

type handler struct {
	provider Provider
	timeout  time.Duration
}

// create serves POST /v1/charges inside the idempotency middleware.
func (h handler) create(w http.ResponseWriter, r *http.Request) {
	req, ok := httpapi.DecodeJSON(w, r, Decode)
	if !ok {
		return
	}
	if h.provider == nil {
		httpapi.WriteError(w, r, ErrProviderUnavailable)
		return
	}
	call, ok := idempotency.Begin(w, r)
	if !ok {
		return
	}
	c, err := h.charge(r, call.ForwardKey(), ProviderRequest(req))
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
		httpapi.WriteError(w, r, Answer(err))
		return
	default:
		// The provider rejected the request (422, final: the engine stores
		// it, as a decline), nothing was charged (503), or something else
		// went wrong (500): the engine releases the key of a 5xx, so a retry
		// executes.
		httpapi.WriteError(w, r, Answer(err))
		return
	}
	resp, err := Response(call.Record(), c)
	if err != nil {
		// Unreachable with a well-behaved provider (a charge of another
		// amount or currency under this request's key). Something was
		// charged that this request cannot answer for: leave the record
		// UNKNOWN, where the reconciler fails on it too and its alarm
		// fires, rather than release the key to the same answer forever.
		call.Unknown()
		httpapi.WriteError(w, r, fmt.Errorf("%w: %w", ErrOutcomeUnknown, err))
		return
	}
	httpapi.WriteResponse(w, resp)
}

// charge calls the provider, bounded by the timeout, and notes the call for
// the request's log line.
func (h handler) charge(r *http.Request, key string, req provider.ChargeRequest) (provider.Charge, error) {
	ctx := r.Context()
	if h.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, h.timeout)
		defer cancel()
	}
	start := time.Now()
	c, err := h.provider.Charge(ctx, key, req)
	httpapi.NoteCall(r, time.Since(start))
	return c, err
}

// NewResolver returns the Resolver of the charges route: it looks the
// request's charge up at the provider under the record's forward key and
// rebuilds the answer with Response; no charge means nothing happened.
func NewResolver(p Provider) idempotency.Resolver {
	return idempotency.ResolverFunc(func(ctx context.Context, rec idempotency.Record) (idempotency.Resolution, error) {
		if p == nil {
			return idempotency.Resolution{}, errors.New("charges: no provider to look the charge up")
		}
		c, err := p.Lookup(ctx, rec.ForwardKey())
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
	})
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
