package orders

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/internal/charges"
	"github.com/oncehq/once/internal/httpapi"
	"github.com/oncehq/once/internal/provider"
)

// Routes of the orders endpoints.
const (
	RouteCreate = "POST /v1/orders"
	RouteGet    = "GET /v1/orders/{id}"
)

// Reader reads orders; *Table is one.
type Reader interface {
	// Get returns tenant's order id, or an error wrapping ErrNotFound or
	// idempotency.ErrUnavailable.
	Get(ctx context.Context, tenant, id string) (Order, error)
}

// Deps are what the orders endpoints need besides the middleware.
type Deps struct {
	// Store is the idempotency store the middleware writes, for the
	// Resolver's ResumeSteps.
	Store idempotency.Store
	// Provider charges orders; nil answers 503 provider_unavailable.
	Provider Charger
	// Orders and Outbox are the tables of the orders and of their receipt
	// jobs.
	Orders, Outbox string
	// Reader reads orders for GET.
	Reader Reader
	// Timeout bounds one provider call (none but the client's own when
	// zero; it must be shorter than the lease).
	Timeout time.Duration
	// Now stamps new orders (time.Now when nil).
	Now func() time.Time
}

// Routes returns POST /v1/orders, in External mode with its Resolver
// (NewResolver), and GET /v1/orders/{id}.
func Routes(mw *idempotency.Middleware, d Deps) []httpapi.Route {
	if d.Now == nil {
		d.Now = time.Now
	}
	h := handlers{flow: flow{provider: d.Provider, orders: d.Orders, outbox: d.Outbox, timeout: d.Timeout}, reader: d.Reader, now: d.Now}
	var resolver idempotency.Resolver = NewResolver(d.Store, d.Provider, d.Orders, d.Outbox, d.Timeout, d.Now)
	return []httpapi.Route{
		{Pattern: RouteCreate, Handler: mw.External(RouteCreate, http.HandlerFunc(h.create), resolver)},
		{Pattern: RouteGet, Handler: http.HandlerFunc(h.get)},
	}
}

type handlers struct {
	flow   flow
	reader Reader
	now    func() time.Time
}

// create serves POST /v1/orders inside the idempotency middleware.
func (h handlers) create(w http.ResponseWriter, r *http.Request) {
	var body []byte
	req, ok := httpapi.DecodeJSON(w, r, func(b []byte) (Request, error) {
		body = b
		return Decode(b)
	})
	if !ok {
		return
	}
	if h.flow.provider == nil {
		httpapi.WriteError(w, r, charges.ErrProviderUnavailable)
		return
	}
	key, fingerprint, err := requestIdentity(r, body)
	if err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	now := h.now()
	o := New(key.Tenant, ID(key, fingerprint), req, now)
	holdOrder, err := hold(h.flow.orders, o)
	if err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	// A request that resumes an abandoned one gets its call back at the
	// recorded point, with the recorded order; these are then not written.
	call, ok := idempotency.BeginAt(w, r, PointOrderCreated,
		map[string]string{dataOrder: o.ID, dataCreated: strconv.FormatInt(o.Created, 10)}, holdOrder)
	if !ok {
		return
	}
	resp, effects, err := h.flow.run(r.Context(), call.Steps(), req, func(d time.Duration) { httpapi.NoteCall(r, d) })
	var conflict *idempotency.ConflictError
	switch {
	case errors.As(err, &conflict):
		return // the lease is lost: the middleware answers from the store
	case errors.Is(err, provider.ErrOutcomeUnknown), errors.Is(err, errDrift):
		// The charge may exist (or exists and is not this request's): the
		// lease keeps running, and whoever resumes the request after it (a
		// retry, or the reconciler once the record is abandoned) calls the
		// provider again under the same forwarded key.
		call.Unknown()
		httpapi.WriteError(w, r, fmt.Errorf("%w: %w", charges.ErrOutcomeUnknown, err))
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
	call.Finish(PointFinished)
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
	fingerprint, err := idempotency.RequestFingerprint(r.Method, RouteCreate, body)
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
	httpapi.NoteRead(r)
	tenant, ok := httpapi.Tenant(r)
	if !ok {
		httpapi.WriteError(w, r, idempotency.ErrNoTenant)
		return
	}
	id := r.PathValue("id")
	if !ValidID(id) || h.reader == nil {
		httpapi.WriteError(w, r, httpapi.ErrNotFound)
		return
	}
	start := time.Now()
	o, err := h.reader.Get(r.Context(), tenant, id)
	httpapi.NoteStoreCall(r, time.Since(start))
	if err != nil {
		httpapi.WriteError(w, r, err)
		return
	}
	httpapi.WriteJSON(w, r, http.StatusOK, o, func(hd http.Header) { hd.Set("Cache-Control", "no-store") })
}
