// Package problem lets each domain declare its errors together with their
// HTTP answer, and renders any of them as an RFC 9457 problem
// (application/problem+json) without a central table: an error that has a
// Problem method anywhere in its chain (errors.As) answers as that problem,
// and any other error as a 500 internal_error whose text is never sent.
//
// A domain declares sentinel errors with New, next to the code that returns
// them:
//
//	var ErrNotRefundable = problem.New(http.StatusBadRequest, "payment_not_refundable",
//		"Payment not refundable", "Only a succeeded payment can be refunded.")
//
// and wraps them freely (fmt.Errorf("refunds: %w", ErrNotRefundable)): the
// answer is the same. An error type with a dynamic answer (a Retry-After, a
// detail naming a field) implements Problem itself. Invalid builds the
// invalid_request error that names the offending field of a request body.
package problem

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
)

// ContentType is the media type of a problem answer.
const ContentType = "application/problem+json"

// DefaultTypeBase is the base of a problem's type URI when the Renderer names
// none: the code is appended as the fragment, so that each code links to its
// description. It is once's README, which describes once's codes (and its
// demo API's), not yours: an API with codes of its own renders with a
// Renderer naming its own TypeBase, in its handlers and as the middleware's
// idempotency.Config.OnError (Renderer{TypeBase: base}.Write), and documents
// the middleware's codes there too.
const DefaultTypeBase = "https://github.com/oncehq/once/blob/main/README.md#"

// Details is the answer to an error.
type Details struct {
	// Status is the HTTP status code.
	Status int
	// Code is the stable, machine-readable error code ("payment_not_refundable").
	Code string
	// Title is a short, fixed summary of the code.
	Title string
	// Detail explains this occurrence to the client. It must never carry
	// internal error text.
	Detail string
	// HasField says the problem names a request field: Field, or null when
	// Field is empty (the body as a whole). The "field" member is left out
	// otherwise.
	HasField bool
	// Field is the offending request field as a dotted path ("metadata.order").
	Field string
	// Header holds response headers to send with the problem (Retry-After).
	Header map[string]string
	// Log says the error's own text belongs in the request's log line, as it
	// always does for a 5xx.
	Log bool
}

// Problem is implemented by errors that answer as a problem.
type Problem interface {
	// Problem returns the answer to the error.
	Problem() Details
}

// Internal is the answer to an error without a Problem in its chain.
var Internal = Details{
	Status: http.StatusInternalServerError,
	Code:   "internal_error",
	Title:  "Internal error",
	Detail: "An internal error occurred. Retry with the same Idempotency-Key: the request then either runs or is replayed, never both.",
	Log:    true,
}

// For returns the answer to err: the Details of the first error in its chain
// that implements Problem, or Internal when there is none.
func For(err error) Details {
	var p Problem
	if err != nil && errors.As(err, &p) {
		return p.Problem()
	}
	return Internal
}

// Logged reports whether err's text belongs in a log line rather than only
// its answer: a 5xx, or a problem marked Log.
func Logged(err error) bool {
	d := For(err)
	return d.Log || d.Status >= 500
}

// Error is a problem with a fixed answer, for a domain's sentinel errors.
// Compare with errors.Is: wrapping keeps the answer.
type Error struct {
	details Details
}

// New returns an error answering with status, code, title and detail.
func New(status int, code, title, detail string) *Error {
	return &Error{details: Details{Status: status, Code: code, Title: title, Detail: detail}}
}

// WithHeader returns e with a response header added. It is meant for
// package-level declarations (a Retry-After on a 503); the result is a new
// sentinel, not e.
func (e *Error) WithHeader(name, value string) *Error {
	d := e.details
	d.Header = make(map[string]string, len(e.details.Header)+1)
	for k, v := range e.details.Header {
		d.Header[k] = v
	}
	d.Header[http.CanonicalHeaderKey(name)] = value
	return &Error{details: d}
}

// Logged returns e marked Log: its text, and that of an error wrapping it,
// goes to the request's log line although its status is not a 5xx.
func (e *Error) Logged() *Error {
	d := e.details
	d.Log = true
	return &Error{details: d}
}

// Error is the code: short, for the log lines of errors that wrap it
// ("provider_rejected: provider: charge: status 400").
func (e *Error) Error() string { return e.details.Code }

// Problem returns the error's answer.
func (e *Error) Problem() Details {
	d := e.details
	if d.Header != nil {
		h := make(map[string]string, len(d.Header))
		for k, v := range d.Header {
			h[k] = v
		}
		d.Header = h
	}
	return d
}

// FieldError reports an invalid request body: the field that is wrong and
// why. It answers 400 invalid_request, naming the field.
type FieldError struct {
	// Field is the offending field as a dotted path ("amount",
	// "metadata.order"), empty for the body as a whole.
	Field string
	// Reason says what is wrong, as a sentence fragment ("must be at least 1").
	Reason string
}

// Invalid returns a *FieldError for field with the reason formatted from
// format and args.
func Invalid(field, format string, args ...any) error {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// Error describes the problem.
func (e *FieldError) Error() string {
	if e.Field == "" {
		return "invalid request: " + e.Reason
	}
	return fmt.Sprintf("invalid request: %s: %s", e.Field, e.Reason)
}

// Detail is the sentence shown to the client.
func (e *FieldError) Detail() string {
	if e.Field == "" {
		return upperFirst(e.Reason) + "."
	}
	return fmt.Sprintf("%s %s.", e.Field, e.Reason)
}

// Problem answers 400 invalid_request, naming the field.
func (e *FieldError) Problem() Details {
	return Details{
		Status: http.StatusBadRequest, Code: "invalid_request", Title: "Invalid request",
		Detail: e.Detail(), HasField: true, Field: e.Field,
	}
}

func upperFirst(s string) string {
	if s == "" || s[0] < 'a' || s[0] > 'z' {
		return s
	}
	return string(s[0]-'a'+'A') + s[1:]
}

// Renderer renders problems. Its zero value uses DefaultTypeBase.
type Renderer struct {
	// TypeBase is prefixed to the code to make the type URI.
	TypeBase string
}

// body is the JSON rendering, in a fixed member order.
type body struct {
	Type   string          `json:"type"`
	Title  string          `json:"title"`
	Status int             `json:"status"`
	Detail string          `json:"detail"`
	Code   string          `json:"code"`
	Field  json.RawMessage `json:"field,omitempty"`
}

// Body is the JSON body of d.
func (rd Renderer) Body(d Details) []byte {
	base := rd.TypeBase
	if base == "" {
		base = DefaultTypeBase
	}
	b := body{Type: base + d.Code, Title: d.Title, Status: d.Status, Detail: d.Detail, Code: d.Code}
	if d.HasField {
		b.Field = json.RawMessage("null")
		if d.Field != "" {
			f, _ := json.Marshal(d.Field) // a string always marshals
			b.Field = f
		}
	}
	out, err := json.Marshal(b)
	if err != nil { // cannot happen: strings and an int
		return []byte(`{"type":"` + base + `internal_error","title":"Internal error","status":500,"code":"internal_error"}`)
	}
	return out
}

// Header is the response header set of d: its own headers and the
// Content-Type.
func (rd Renderer) Header(d Details) map[string]string {
	h := make(map[string]string, len(d.Header)+1)
	for k, v := range d.Header {
		h[k] = v
	}
	h["Content-Type"] = ContentType
	return h
}

// Write answers err as its problem: status, headers, Content-Length and
// body. It logs nothing; a caller that keeps a request log notes err there
// when Logged(err).
func (rd Renderer) Write(w http.ResponseWriter, _ *http.Request, err error) {
	d := For(err)
	b := rd.Body(d)
	h := w.Header()
	for k, v := range rd.Header(d) {
		h.Set(k, v)
	}
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(d.Status)
	_, _ = w.Write(b)
}

// Write answers err as its problem with the zero Renderer.
func Write(w http.ResponseWriter, r *http.Request, err error) { Renderer{}.Write(w, r, err) }
