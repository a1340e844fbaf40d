// Package charges is the domain of POST /v1/charges, the endpoint that charges
// the payment provider while the client waits: the request (a create-payment
// request that must name its source, validated by package payments), the
// charge's deterministic ID (one per provider charge), and the JSON the API
// answers with.
//
// Everything in a charge's rendering is derived from what the idempotency
// record keeps (the scoped key, the canonical request, the creation time) and
// from the provider's charge, so that a reconciler that learns the outcome of
// an ambiguous call later rebuilds, byte for byte, the answer the original
// request would have given (Response, used by the handler and the
// Resolver alike).
//
// It serves no HTTP: POST /v1/charges is package chargeshttp's, so that the
// reconciler links the Resolver without the HTTP layer.
package charges
