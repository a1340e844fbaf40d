// Package httpapi is the payments API as one http.Handler: the routes, the
// mapping of errors to RFC 9457 problem details, and the per-request log line
// and metrics.
//
// # Routes
//
//	POST /v1/payments        create a payment (idempotent, Atomic mode)
//	GET  /v1/payments/{id}   read a payment of the caller's tenant
//	POST /v1/charges         charge the provider at once (idempotent, External mode)
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
// # Charging at once
//
// POST /v1/charges takes the same headers and body as a payment, except that
// source is required, and is checked the same way before anything is
// reserved. idempotency.Begin then reserves the key IN_PROGRESS under a lease,
// and the handler calls the provider under the key's forward key
// (idempotency.Call.ForwardKey), bounded by Deps.ProviderTimeout. What the
// provider answers decides the response:
//
//   - a charge: 201 and the charge, stored and replayed;
//   - a decline: 402 card_declined, stored and replayed;
//   - a refusal of the request itself (provider.ErrRejected: a 400, 413 or
//     422 from the provider): 422 provider_rejected, stored and replayed;
//     nothing was charged and the same request would be refused again;
//   - provably not charged (provider.ErrNotCharged): 503
//     provider_unavailable with Retry-After; the engine releases the key, so
//     a retry executes;
//   - no usable answer (provider.ErrOutcomeUnknown): 504
//     provider_outcome_unknown with Retry-After; the record goes to UNKNOWN
//     and retries get 409 until the reconciler finalises it;
//   - anything else (another 4xx from the provider, such as 401 for a wrong
//     API key): 500 internal_error; the key is released.
//
// The 201 and 402 answers are built by ChargeResponse from the reservation
// (idempotency.Call.Record: the scoped key, the canonical request, the
// creation time) and the provider's charge only: the charge ID is derived
// from the key (charges.ID) and created is the reservation's time, so the
// reconciler, which has the stored record and provider.Client.Lookup, stores
// exactly the bytes the original request would have sent.
//
// Without a Deps.Provider the route is still served and answers a valid
// request with 503 provider_unavailable, reserving nothing: a stack without
// ONCE_PROVIDER_URL serves payments and refuses charges.
//
// # Errors
//
// One table (rules, in problem.go) maps errors to a status, a problem code and
// a title, as benbjohnson/wtf's http.go does. The detail of a client error
// explains what to fix; the text of an internal error is never sent, only
// logged, and so is the provider's status and code behind a
// provider_rejected. A 5xx tells the client that retrying with the same key
// is safe: the engine never stores one.
//
// # Observability
//
// Every request writes one JSON log line (request id, tenant, method, route,
// status, outcome, the key's short hash, store calls and latency, duration,
// the number and latency of provider calls when there were any, and the error
// text of store, provider and internal errors; never the raw key, the API key
// or a body) and, for an idempotent request, one CloudWatch EMF metric
// document counting its outcome.
package httpapi
