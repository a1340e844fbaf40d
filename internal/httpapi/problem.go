package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/internal/payments"
	"github.com/oncehq/once/internal/provider"
)

// Errors of the HTTP layer itself.
var (
	// ErrUnsupportedMediaType: the request body is not declared as JSON (415).
	ErrUnsupportedMediaType = errors.New("httpapi: unsupported media type")
	// ErrNotFound: no such route or resource (404).
	ErrNotFound = errors.New("httpapi: not found")
	// ErrMethodNotAllowed: the route exists for other methods (405).
	ErrMethodNotAllowed = errors.New("httpapi: method not allowed")
)

// ProblemType is the base of every problem's type URI; the code is the
// fragment.
const ProblemType = "https://github.com/oncehq/once/blob/main/README.md#"

// ProblemContentType is the media type of error responses (RFC 9457).
const ProblemContentType = "application/problem+json"

// Problem is an RFC 9457 problem details object with the API's extensions.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	// Code is the stable, machine-readable error code.
	Code string `json:"code"`
	// Field names the offending request field for invalid_request: a string,
	// or null when the body as a whole is wrong. It is absent otherwise.
	Field any `json:"field,omitempty"`
}

// rule maps the errors that match to a problem.
type rule struct {
	match  func(error) bool
	status int
	code   string
	title  string
	// detail is the client-facing explanation; it may use err only where err
	// describes the client's own input.
	detail func(err error) string
	// header sets response headers (Retry-After).
	header func(h http.Header, err error)
	// log puts err's text in the request's log line, as for every 5xx.
	log bool
}

// rules is THE table from errors to problems, first match wins. Anything
// unmatched is a 500 internal_error.
var rules = []rule{
	{
		match: is(idempotency.ErrNoTenant), status: http.StatusUnauthorized, code: "unauthorized", title: "Unauthorized",
		detail: fixed("The request carries no authenticated tenant."),
	},
	{
		match: is(idempotency.ErrKeyMissing), status: http.StatusBadRequest, code: "idempotency_key_missing", title: "Idempotency-Key missing",
		detail: fixed("This request needs an Idempotency-Key header: a unique value per operation, reused only to retry it."),
	},
	{
		match: is(idempotency.ErrKeyInvalid), status: http.StatusBadRequest, code: "idempotency_key_invalid", title: "Idempotency-Key invalid",
		detail: func(err error) string {
			const base = "The Idempotency-Key header must be given once, as a token or a structured-field string of 1 to 255 characters in the range 0x21-0x7E"
			if reason, ok := strings.CutPrefix(err.Error(), idempotency.ErrKeyInvalid.Error()+": "); ok {
				return base + "; here " + reason + "."
			}
			return base + "."
		},
	},
	{
		match: is(idempotency.ErrKeyReused), status: http.StatusUnprocessableEntity, code: "idempotency_key_reused", title: "Idempotency-Key reused",
		detail: fixed("This Idempotency-Key was already used with a different request (method, route or body). Use a new key for a new request."),
	},
	{
		match: as[*idempotency.InProgressError], status: http.StatusConflict, code: "idempotency_request_in_progress", title: "Request in progress",
		detail: func(err error) string {
			var ip *idempotency.InProgressError
			errors.As(err, &ip)
			return fmt.Sprintf("A request with this Idempotency-Key is still being processed. Retry after %d seconds.", ip.RetryAfterSeconds())
		},
		header: func(h http.Header, err error) {
			var ip *idempotency.InProgressError
			errors.As(err, &ip)
			h.Set("Retry-After", idempotency.RetryAfterHeader(ip))
		},
	},
	{
		match: is(idempotency.ErrBodyTooLarge), status: http.StatusRequestEntityTooLarge, code: "payload_too_large", title: "Payload too large",
		detail: fixed(fmt.Sprintf("The request body must be at most %d KiB.", idempotency.DefaultMaxBody>>10)),
	},
	{
		match: as[*payments.ValidationError], status: http.StatusBadRequest, code: "invalid_request", title: "Invalid request",
		detail: func(err error) string {
			var v *payments.ValidationError
			errors.As(err, &v)
			return v.Detail()
		},
	},
	{
		match: is(idempotency.ErrBodyInvalid), status: http.StatusBadRequest, code: "invalid_request", title: "Invalid request",
		detail: fixed("The body is not a JSON document."),
	},
	{
		match: is(ErrUnsupportedMediaType), status: http.StatusUnsupportedMediaType, code: "unsupported_media_type", title: "Unsupported media type",
		detail: fixed("The request body must be sent as Content-Type: application/json (UTF-8)."),
	},
	{
		match: is(ErrNotFound, payments.ErrNotFound), status: http.StatusNotFound, code: "not_found", title: "Not found",
		detail: fixed("No such resource."),
	},
	{
		match: is(ErrMethodNotAllowed), status: http.StatusMethodNotAllowed, code: "method_not_allowed", title: "Method not allowed",
		detail: fixed("This resource does not support the request's method; see the Allow header."),
	},
	{
		match: is(idempotency.ErrUnavailable, payments.ErrUnavailable), status: http.StatusServiceUnavailable, code: "store_unavailable", title: "Store unavailable",
		detail: fixed("The data store did not answer in time. Retry with the same Idempotency-Key: the request then either runs or is replayed, never both."),
		header: func(h http.Header, _ error) { h.Set("Retry-After", "1") },
	},
	{
		match: as[*provider.DeclinedError], status: http.StatusPaymentRequired, code: "card_declined", title: "Card declined",
		detail: fixed("The payment provider declined the charge; nothing was charged. This answer is final for this Idempotency-Key: to try again, use a new key."),
	},
	{
		// Final, as a decline is: stored and replayed. The provider's own
		// message is never sent; it may echo the request (a card token).
		match: is(provider.ErrRejected), status: http.StatusUnprocessableEntity, code: "provider_rejected", title: "Provider rejected the request",
		detail: fixed("The payment provider rejected the request; nothing was charged. Retrying the same request will not help: " +
			"this answer is final for this Idempotency-Key. To try again, change the request and use a new key."),
		log: true,
	},
	{
		// A provable "not charged": the provider could not be reached or
		// said so (503, 429).
		match: is(provider.ErrNotCharged, ErrNoProvider), status: http.StatusServiceUnavailable, code: "provider_unavailable", title: "Provider unavailable",
		detail: fixed("The payment provider could not take the charge; nothing was charged. Retry with the same Idempotency-Key."),
		header: func(h http.Header, _ error) { h.Set("Retry-After", "1") },
	},
	{
		match: is(provider.ErrOutcomeUnknown), status: http.StatusGatewayTimeout, code: "provider_outcome_unknown", title: "Provider outcome unknown",
		detail: fixed("The payment provider did not answer in time: the charge may or may not have been made. Retry with the same Idempotency-Key " +
			"after Retry-After: once the outcome is known the retry gets it, and the card is never charged twice."),
		header: func(h http.Header, _ error) {
			h.Set("Retry-After", idempotency.RetryAfterHeader(&idempotency.InProgressError{RetryAfter: idempotency.DefaultUnknownRetryAfter}))
		},
	},
}

var internalRule = rule{
	status: http.StatusInternalServerError, code: "internal_error", title: "Internal error",
	detail: fixed("An internal error occurred. Retry with the same Idempotency-Key: the request then either runs or is replayed, never both."),
}

func is(targets ...error) func(error) bool {
	return func(err error) bool {
		for _, t := range targets {
			if errors.Is(err, t) {
				return true
			}
		}
		return false
	}
}

func as[T error](err error) bool {
	var target T
	return errors.As(err, &target)
}

func fixed(s string) func(error) string { return func(error) string { return s } }

func ruleFor(err error) rule {
	for _, r := range rules {
		if r.match(err) {
			return r
		}
	}
	return internalRule
}

// Status is the HTTP status WriteError answers err with.
func Status(err error) int { return ruleFor(err).status }

// ProblemFor returns the problem WriteError writes for err.
func ProblemFor(err error) Problem {
	r := ruleFor(err)
	p := Problem{Type: ProblemType + r.code, Title: r.title, Status: r.status, Detail: r.detail(err), Code: r.code}
	var v *payments.ValidationError
	switch {
	case r.code != "invalid_request":
	case errors.As(err, &v) && v.Field != "":
		p.Field = v.Field
	default:
		p.Field = json.RawMessage("null")
	}
	return p
}

// WriteError answers err as a problem. It is the idempotency middleware's
// Config.OnError. The text of an error that maps to a 5xx or to
// provider_rejected is never sent: it goes to the request's log line.
func WriteError(w http.ResponseWriter, r *http.Request, err error) {
	if rl := ruleFor(err); rl.status >= 500 || rl.log {
		noteError(r, err)
	}
	writeResponse(w, problemResponse(err))
}

// problemResponse is the complete answer for err: status, headers and body.
func problemResponse(err error) idempotency.Response {
	rl := ruleFor(err)
	p := ProblemFor(err)
	body, merr := json.Marshal(p)
	if merr != nil { // cannot happen: Problem holds strings and ints
		body = []byte(`{"type":"` + ProblemType + `internal_error","title":"Internal error","status":500,"code":"internal_error"}`)
	}
	h := http.Header{}
	if rl.header != nil {
		rl.header(h, err)
	}
	h.Set("Content-Type", ProblemContentType)
	header := make(map[string]string, len(h))
	for k := range h {
		header[k] = h.Get(k)
	}
	return idempotency.Response{Status: p.Status, Header: header, Body: body}
}

// writeResponse sends resp as it is.
func writeResponse(w http.ResponseWriter, resp idempotency.Response) {
	h := w.Header()
	for k, v := range resp.Header {
		h.Set(k, v)
	}
	h.Set("Content-Length", strconv.Itoa(len(resp.Body)))
	w.WriteHeader(resp.Status)
	_, _ = w.Write(resp.Body)
}

// noteError hands err to the request's log line, or logs it on its own when
// the request did not come through the handler's middleware.
func noteError(r *http.Request, err error) {
	if info := infoFrom(r.Context()); info != nil {
		info.err = err
		return
	}
	slog.Default().ErrorContext(r.Context(), "request failed", slog.String("error", err.Error()))
}
