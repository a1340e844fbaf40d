package chargeshttp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/internal/charges"
	"github.com/oncehq/once/internal/fault"
	"github.com/oncehq/once/internal/httpapi"
	"github.com/oncehq/once/internal/provider"
)

// Routes returns POST /v1/charges (charges.Route) in External mode: the
// key is reserved under a lease, the provider is charged under the
// request's forward key, each call bounded by timeout (none but the
// provider client's own when zero; it must be shorter than the lease), and
// an unknown outcome is resolved by looking the charge up
// (charges.NewResolver). Without a provider the route answers a valid
// request 503 provider_unavailable, reserving nothing.
func Routes(mw *idempotency.Middleware, p charges.Provider, timeout time.Duration) []httpapi.Route {
	h := handler{provider: p, timeout: timeout}
	return []httpapi.Route{{Pattern: charges.Route, Handler: mw.External(charges.Route, http.HandlerFunc(h.create), charges.NewResolver(p))}}
}

type handler struct {
	provider charges.Provider
	timeout  time.Duration
}

// create serves POST /v1/charges inside the idempotency middleware.
func (h handler) create(w http.ResponseWriter, r *http.Request) {
	req, ok := httpapi.DecodeJSON(w, r, charges.Decode)
	if !ok {
		return
	}
	if h.provider == nil {
		httpapi.WriteError(w, r, charges.ErrProviderUnavailable)
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
		httpapi.WriteError(w, r, charges.Answer(err))
		return
	default:
		// The provider rejected the request (422, final: the engine stores
		// it, as a decline), nothing was charged (503), or something else
		// went wrong (500): the engine releases the key of a 5xx, so a retry
		// executes.
		httpapi.WriteError(w, r, charges.Answer(err))
		return
	}
	resp, err := charges.Response(call.Record(), c)
	if err != nil {
		// Unreachable with a well-behaved provider (a charge of another
		// amount or currency under this request's key). Something was
		// charged that this request cannot answer for: leave the record
		// UNKNOWN, where the reconciler fails on it too and its alarm
		// fires, rather than release the key to the same answer forever.
		call.Unknown()
		httpapi.WriteError(w, r, fmt.Errorf("%w: %w", charges.ErrOutcomeUnknown, err))
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
