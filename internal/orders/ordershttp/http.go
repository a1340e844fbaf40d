package ordershttp

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
	"github.com/oncehq/once/internal/orders"
	"github.com/oncehq/once/internal/provider"
)

// Reader reads orders; *orders.Table is one.
type Reader interface {
	// Get returns tenant's order id, or an error wrapping orders.ErrNotFound
	// or idempotency.ErrUnavailable.
	Get(ctx context.Context, tenant, id string) (orders.Order, error)
}

// Deps are what the orders endpoints need besides the middleware.
type Deps struct {
	// Store is the idempotency store the middleware writes, for the
	// Resolver's ResumeSteps (orders.NewResolver).
	Store idempotency.Store
	// Provider charges orders; nil answers 503 provider_unavailable.
	Provider orders.Charger
	// Orders and Outbox are the tables of the orders and of their receipt
	// jobs.
	Orders, Outbox string
	// Reader reads orders for GET, and for the phase charge_created before
	// it calls the provider (orders.Flow.Reader).
	Reader Reader
	// Timeout bounds one provider call (none but the client's own when
	// zero; it must be shorter than the lease).
	Timeout time.Duration
	// KeyRetention is how long the provider remembers a forwarded key
	// (orders.Flow.KeyRetention; zero: for ever).
	KeyRetention time.Duration
	// Now stamps new orders and measures the age of resumed ones (time.Now
	// when nil).
	Now func() time.Time
}

// Routes returns POST /v1/orders (orders.RouteCreate), in External mode
// with its Resolver (orders.NewResolver), and GET /v1/orders/{id}.
func Routes(mw *idempotency.Middleware, d Deps) []httpapi.Route {
	if d.Now == nil {
		d.Now = time.Now
	}
	f := orders.Flow{Provider: d.Provider, Orders: d.Orders, Outbox: d.Outbox, Timeout: d.Timeout, KeyRetention: d.KeyRetention, Now: d.Now}
	if d.Reader != nil { // a nil Reader would not be a nil orders.Reader
		f.Reader = d.Reader
	}
	h := handlers{flow: f, reader: d.Reader, now: d.Now}
	return []httpapi.Route{
		{Pattern: orders.RouteCreate, Handler: mw.External(orders.RouteCreate, http.HandlerFunc(h.create), orders.NewResolver(d.Store, f, d.Now))},
		{Pattern: orders.RouteGet, Handler: http.HandlerFunc(h.get)},
	}
}

type handlers struct {
	flow   orders.Flow
	reader Reader
	now    func() time.Time
}

// create serves POST /v1/orders inside the idempotency middleware.
func (h handlers) create(w http.ResponseWriter, r *http.Request) {
	var body []byte
	req, ok := httpapi.DecodeJSON(w, r, func(b []byte) (orders.Request, error) {
		body = b
		return orders.Decode(b)
	})
	if !ok {
		return
	}
	if h.flow.Provider == nil {
		httpapi.WriteError(w, r, charges.ErrProviderUnavailable)
		return
	}
	key, fingerprint, err := requestIdentity(r, body)
	if err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	now := h.now()
	o := orders.New(key.Tenant, orders.ID(key, fingerprint), req, now)
	point, data, hold, err := h.flow.Start(o)
	if err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	// A request that resumes an abandoned one gets its call back at the
	// recorded point, with the recorded order; these are then not written.
	call, ok := idempotency.BeginAt(w, r, point, data, hold)
	if !ok {
		return
	}
	resp, effects, err := h.flow.Run(r.Context(), call.Steps(), req, func(d time.Duration) {
		httpapi.NoteCall(r, d)
		fault.Check(r.Context(), fault.AfterProviderCall)
	})
	var conflict *idempotency.ConflictError
	switch {
	case errors.As(err, &conflict):
		return // the lease is lost: the middleware answers from the store
	case errors.Is(err, provider.ErrOutcomeUnknown), errors.Is(err, orders.ErrDrift):
		// The charge may exist (or exists and is not this request's): the
		// lease keeps running, and whoever resumes the request after it (a
		// retry, or the reconciler once the record is abandoned) calls the
		// provider again under the same forwarded key.
		call.Unknown()
		httpapi.WriteError(w, r, fmt.Errorf("%w: %w", charges.ErrOutcomeUnknown, err))
		return
	case errors.Is(err, orders.ErrKeyRetention):
		// A resumed request too old to call the provider again under its
		// forwarded key: nothing was called, and nothing can tell whether
		// the first call charged. Unknown, as a timeout is, but no resume
		// will find out (each is refused the same way, the Resolver's
		// included): the record waits for an operator.
		call.Unknown()
		httpapi.WriteError(w, r, err)
		return
	case err != nil:
		// Provably not charged (503), the store failed (503), or something
		// else (500): the engine gives the lease up at the point reached, and
		// a retry resumes there at once.
		httpapi.WriteError(w, r, charges.Answer(err))
		return
	}
	for _, e := range effects {
		call.AddEffect(e)
	}
	call.Finish(orders.PointFinished)
	httpapi.WriteResponse(w, resp)
}

// requestIdentity is the scoped key and the fingerprint the middleware gives
// the request (idempotency.KeyOf, and the fingerprint of its method, route
// and body), which the order's ID is derived from before anything is
// reserved.
func requestIdentity(r *http.Request, body []byte) (idempotency.Key, string, error) {
	key, ok := idempotency.KeyOf(r)
	if !ok {
		return idempotency.Key{}, "", errors.New("orders: the request did not come through the idempotency middleware")
	}
	fingerprint, err := idempotency.RequestFingerprint(r.Method, orders.RouteCreate, body)
	if errors.Is(err, idempotency.ErrNumberPrecision) {
		return idempotency.Key{}, "", idempotency.ErrNumberPrecision
	}
	if err != nil {
		return idempotency.Key{}, "", idempotency.ErrBodyInvalid
	}
	return key, fingerprint, nil
}

// get serves GET /v1/orders/{id}: another tenant's order does not exist.
func (h handlers) get(w http.ResponseWriter, r *http.Request) {
	valid := func(id string) bool { return h.reader != nil && orders.ValidID(id) }
	httpapi.ServeGet(w, r, valid, func(ctx context.Context, tenant, id string) (orders.Order, error) {
		return h.reader.Get(ctx, tenant, id)
	})
}
