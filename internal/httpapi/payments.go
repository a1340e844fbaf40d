package httpapi

import (
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/internal/payments"
)

// createPayment serves POST /v1/payments inside the idempotency middleware.
func (h *handler) createPayment(w http.ResponseWriter, r *http.Request) {
	req, ok := decodeBody(w, r, payments.Decode)
	if !ok {
		return
	}
	call, ok := idempotency.Begin(w, r)
	if !ok {
		return
	}
	p := payments.New(call.Key().Tenant, req, h.deps.Now())
	call.AddEffect(payments.Effect(h.deps.PaymentsTable, p))
	writeJSON(w, r, http.StatusCreated, p, func(hd http.Header) { hd.Set("Location", p.Location()) })
}

// getPayment serves GET /v1/payments/{id}: another tenant's payment does not
// exist.
func (h *handler) getPayment(w http.ResponseWriter, r *http.Request) {
	obs := &infoFrom(r.Context()).obs
	obs.Route, obs.Outcome = RouteGetPayment, OutcomeRead
	tenant, ok := h.deps.Tenant(r)
	if !ok {
		obs.Outcome = idempotency.OutcomeRejected
		WriteError(w, r, idempotency.ErrNoTenant)
		return
	}
	obs.Tenant = tenant
	id := r.PathValue("id")
	if !payments.ValidID(id) {
		WriteError(w, r, ErrNotFound)
		return
	}
	start := time.Now()
	p, err := h.deps.Payments.Get(r.Context(), tenant, id)
	obs.StoreCalls++
	obs.StoreLatency += time.Since(start)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	writeJSON(w, r, http.StatusOK, p, func(hd http.Header) { hd.Set("Cache-Control", "no-store") })
}

func writeJSON(w http.ResponseWriter, r *http.Request, status int, v any, headers func(http.Header)) {
	body, err := json.Marshal(v)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	headers(h)
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// decodeBody checks the Content-Type and decodes the body (already read and
// bounded by the idempotency middleware) with decode. On failure it answers
// the problem (415, 400), before anything is reserved, and returns false.
func decodeBody[T any](w http.ResponseWriter, r *http.Request, decode func([]byte) (T, error)) (T, bool) {
	var zero T
	if !isJSON(r.Header.Values("Content-Type")) {
		WriteError(w, r, ErrUnsupportedMediaType)
		return zero, false
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		WriteError(w, r, err)
		return zero, false
	}
	v, err := decode(body)
	if err != nil {
		WriteError(w, r, err)
		return zero, false
	}
	return v, true
}

// isJSON reports whether the Content-Type header values declare a JSON body:
// exactly one application/json, with any parameters but a charset other than
// UTF-8.
func isJSON(values []string) bool {
	if len(values) != 1 {
		return false
	}
	mt, params, err := mime.ParseMediaType(values[0])
	if err != nil || mt != "application/json" {
		return false
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") && !strings.EqualFold(cs, "utf8") {
		return false
	}
	return true
}
