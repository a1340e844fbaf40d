// Package httpapi is the payments API as one http.Handler: the routes, the
// mapping of errors to RFC 9457 problem details, and the per-request log line
// and metrics.
//
// # Routes
//
//	POST /v1/payments        create a payment (idempotent, Atomic mode)
//	GET  /v1/payments/{id}   read a payment of the caller's tenant
//
// Any other path is a 404 and any other method on a known path a 405, both
// as problem details.
//
// # Creating a payment
//
// The idempotency middleware checks, in order, the tenant (401), the
// Idempotency-Key header (400) and the body size (413). The handler then
// checks the Content-Type (415) and decodes and validates the body (400
// invalid_request, naming the field); these answers are written before
// idempotency.Begin, so they are not stored and a corrected request with the
// same key executes. After Begin the payment, status pending, is added as an
// effect: the engine commits it, the idempotency record and the 201 response
// in one DynamoDB transaction.
//
// The Content-Type must be application/json, with any parameters except a
// charset other than UTF-8 (JSON is UTF-8, RFC 8259). Structured-syntax
// types (application/*+json) are refused with 415: a type such as
// application/merge-patch+json announces other semantics than a create.
//
// # Errors
//
// One table (rules, in problem.go) maps errors to a status, a problem code and
// a title, as benbjohnson/wtf's http.go does. The detail of a client error
// explains what to fix; the text of an internal error is never sent, only
// logged. A 5xx tells the client that retrying with the same key is safe: the
// engine never stores one.
//
// # Observability
//
// Every request writes one JSON log line (request id, tenant, method, route,
// status, outcome, the key's short hash, store calls and latency, duration,
// and the error text of store and internal errors; never the raw key, the API
// key or a body) and, for an idempotent request, one CloudWatch EMF metric
// document counting its outcome.
package httpapi
