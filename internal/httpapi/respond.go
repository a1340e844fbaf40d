package httpapi

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/problem"
)

// Errors of the HTTP layer itself.
var (
	// ErrUnsupportedMediaType: the request body is not declared as JSON (415).
	ErrUnsupportedMediaType = problem.New(http.StatusUnsupportedMediaType, "unsupported_media_type", "Unsupported media type",
		"The request body must be sent as Content-Type: application/json (UTF-8).")
	// ErrNotFound: no such route or resource (404). Domains answer their own
	// missing resources with it too, so that "not found" is one code.
	ErrNotFound = problem.New(http.StatusNotFound, "not_found", "Not found", "No such resource.")
	// ErrMethodNotAllowed: the route exists for other methods (405).
	ErrMethodNotAllowed = problem.New(http.StatusMethodNotAllowed, "method_not_allowed", "Method not allowed",
		"This resource does not support the request's method; see the Allow header.")
)

// WriteError answers err as its problem (package problem: the error's own
// answer, or 500 internal_error). It is the idempotency middleware's
// Config.OnError. The text of an error that answers 5xx, or is marked Log,
// is never sent: it goes to the request's log line.
func WriteError(w http.ResponseWriter, r *http.Request, err error) {
	if problem.Logged(err) {
		noteError(r, err)
	}
	problem.Write(w, r, err)
}

// WriteResponse sends resp as it is (a stored or rebuilt answer).
func WriteResponse(w http.ResponseWriter, resp idempotency.Response) {
	h := w.Header()
	resp.SetHeader(h)
	h.Set("Content-Length", strconv.Itoa(len(resp.Body)))
	w.WriteHeader(resp.Status)
	_, _ = w.Write(resp.Body)
}

// WriteJSON answers status with v as JSON, after headers (if not nil) has
// set its own headers (Location, Cache-Control).
func WriteJSON(w http.ResponseWriter, r *http.Request, status int, v any, headers func(http.Header)) {
	body, err := json.Marshal(v)
	if err != nil {
		WriteError(w, r, err)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if headers != nil {
		headers(h)
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// DecodeJSON checks the Content-Type (415) and decodes the body with decode,
// whose errors answer as their problems (a *problem.FieldError: 400
// invalid_request naming the field). On failure it has answered, before
// anything is reserved (so nothing is stored and a corrected request with
// the same key executes), and returns false.
func DecodeJSON[T any](w http.ResponseWriter, r *http.Request, decode func([]byte) (T, error)) (T, bool) {
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

// noteError hands err to the request's log line, or logs it on its own when
// the request did not come through the router.
func noteError(r *http.Request, err error) {
	if info := infoFrom(r.Context()); info != nil {
		info.err = err
		return
	}
	slog.Default().ErrorContext(r.Context(), "request failed", slog.String("error", err.Error()))
}

// ServeGet serves GET .../{id} of one of the tenant's items: 404 for an id
// that valid refuses, the item read answered as JSON, never cached
// (Cache-Control: no-store). read answers ErrNotFound, or an error that
// carries its answer, when the tenant has no such item: another tenant's
// item does not exist.
func ServeGet[T any](w http.ResponseWriter, r *http.Request, valid func(id string) bool, read func(ctx context.Context, tenant, id string) (T, error)) {
	NoteRead(r)
	tenant, ok := Tenant(r)
	if !ok {
		WriteError(w, r, idempotency.ErrNoTenant)
		return
	}
	if err := idempotency.ValidateTenant(tenant); err != nil {
		WriteError(w, r, err) // 403 tenant_invalid, as the middleware answers a POST
		return
	}
	id := r.PathValue("id")
	if !valid(id) {
		WriteError(w, r, ErrNotFound)
		return
	}
	start := time.Now()
	v, err := read(r.Context(), tenant, id)
	NoteStoreCall(r, time.Since(start))
	if err != nil {
		WriteError(w, r, err)
		return
	}
	WriteJSON(w, r, http.StatusOK, v, func(hd http.Header) { hd.Set("Cache-Control", "no-store") })
}
