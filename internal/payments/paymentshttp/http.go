package paymentshttp

import (
	"context"
	"net/http"
	"time"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/internal/httpapi"
	"github.com/oncehq/once/internal/payments"
)

// Routes of the payments endpoints.
const (
	RouteCreate = "POST /v1/payments"
	RouteGet    = "GET /v1/payments/{id}"
)

// Reader reads payments; *payments.Table is one.
type Reader interface {
	// Get returns tenant's payment id, or an error wrapping
	// payments.ErrNotFound or payments.ErrUnavailable.
	Get(ctx context.Context, tenant, id string) (payments.Payment, error)
}

// Routes returns the payments endpoints: POST /v1/payments in Atomic mode
// (the payment, pending, is inserted into table with the stored answer, in
// one transaction), and GET /v1/payments/{id} reading through r. now stamps
// created (time.Now when nil).
func Routes(mw *idempotency.Middleware, table string, r Reader, now func() time.Time) []httpapi.Route {
	if now == nil {
		now = time.Now
	}
	h := handlers{table: table, reader: r, now: now}
	return []httpapi.Route{
		{Pattern: RouteCreate, Handler: mw.Atomic(RouteCreate, http.HandlerFunc(h.create))},
		{Pattern: RouteGet, Handler: http.HandlerFunc(h.get)},
	}
}

type handlers struct {
	table  string
	reader Reader
	now    func() time.Time
}

// create serves POST /v1/payments inside the idempotency middleware.
func (h handlers) create(w http.ResponseWriter, r *http.Request) {
	req, ok := httpapi.DecodeJSON(w, r, payments.Decode)
	if !ok {
		return
	}
	call, ok := idempotency.Begin(w, r)
	if !ok {
		return
	}
	p := payments.New(call.Key().Tenant, req, h.now())
	call.AddEffect(Effect(h.table, p))
	httpapi.WriteJSON(w, r, http.StatusCreated, p, func(hd http.Header) { hd.Set("Location", p.Location()) })
}

// get serves GET /v1/payments/{id}: another tenant's payment does not exist.
func (h handlers) get(w http.ResponseWriter, r *http.Request) {
	httpapi.ServeGet(w, r, payments.ValidID, h.reader.Get)
}

// Effect is the insert of p into table, to commit with the idempotency
// record (idempotency.Call.AddEffect): the payment, pending, is the outbox
// the worker reads from the table's stream.
func Effect(table string, p payments.Payment) idempotency.Effect {
	return dynamo.Insert(table, payments.KeyAttr, p)
}
