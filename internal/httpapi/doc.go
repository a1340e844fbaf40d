// Package httpapi is the API's router and its shared HTTP helpers; it knows
// no domain. Each domain (payments, charges, refunds) serves its own routes
// (Route values) with these helpers, and internal/api lists them.
//
// NewHandler puts the routes behind one ServeMux (Go 1.22 patterns): any
// other path is a 404 and any other method on a known path a 405 with Allow,
// both as problems. The helpers are what every endpoint needs:
//
//   - DecodeJSON checks the Content-Type (415: application/json only, with
//     any parameters but a charset other than UTF-8; structured-syntax types
//     such as application/merge-patch+json announce other semantics) and
//     hands the body to the domain's decoder (400 invalid_request naming the
//     field). Its answers come before idempotency.Begin, so they are not
//     stored and a corrected request with the same key executes.
//   - WriteJSON, WriteResponse and WriteError answer. WriteError renders any
//     error as its problem (package idempotency/problem: each domain declares
//     its errors' answers where they are defined, so there is no central
//     table); the text of an internal error is never sent, only logged.
//   - Tenant, NoteRead, NoteStoreCall and NoteCall feed the request's log
//     line from the handlers.
//
// # Observability
//
// Every request writes one JSON log line (request id, tenant, method, route,
// status, outcome, the key's short hash, store calls and latency, duration,
// the number and latency of calls to other systems when there were any, and
// the error text of store, provider and internal errors; never the raw key,
// the API key or a body) and, for an idempotent request, one CloudWatch EMF
// metric document counting its outcome.
package httpapi
