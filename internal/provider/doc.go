// Package provider is the client of the external payment provider: a
// Stripe-like API that is idempotent per key (the simulator in
// provider/simulator implements it).
//
// Charge sends one charge request under an idempotency key (in once, the
// request's idempotency.Call.ForwardKey(): the scoped key and the request's
// fingerprint) and classifies every way it can end,
// because the crash-window logic depends on telling them apart:
//
//   - (Charge, nil): the provider charged (status succeeded).
//   - *DeclinedError: a final answer; the provider recorded a failed charge.
//   - ErrNotCharged: provably nothing happened. Either the request never
//     left (no connection could be made, or nothing of the request was
//     written: the client watches the write with net/http/httptrace, and
//     counts a cancellation or timeout once connected as written, since
//     HTTP/2 does not wait for its writer then), or the provider answered
//     503 or 429, which it documents as "not charged".
//   - ErrOutcomeUnknown: the request was (or may have been) written but no
//     usable answer came: a timeout, a reset connection, a 5xx other than 503,
//     a 3xx, an answer that does not parse. The charge may exist; Lookup by
//     the same key tells, or a retry with the same key replays it.
//   - ErrRejected, matched by a *StatusError of 400, 413 or 422: the
//     provider refused the request itself as wrong; nothing was charged by
//     it, and the same request would be refused again: a final answer.
//   - any other error (another 4xx, such as 401 or 404, as a *StatusError; an
//     unusable key or base URL): a bug or a misconfiguration on the caller's
//     side; nothing was charged by this request.
//
// A *StatusError's text is its status and code only, never the provider's
// message, which may echo request values (a card token).
//
// Errors are wrapped with context ("provider: charge: ..."); test them with
// errors.Is and errors.As. An ErrNotCharged or ErrOutcomeUnknown also wraps
// its cause.
//
// Lookup finds the charge made under a key (succeeded or failed), returning
// ErrNoCharge only when the provider itself says there is none (404
// resource_missing; any other 404, say from a wrong base URL, is a plain
// error). ErrNoCharge proves nothing was charged only once no request with the
// key can still be on its way to the provider: callers look up after the
// charge timeout has passed.
//
// Refund refunds (part of) a charge under its own idempotency key, with the
// outcomes of Charge but the decline, which refunds do not have:
// (Refund, nil) for a succeeded refund, ErrNotRefunded where Charge has
// ErrNotCharged, ErrOutcomeUnknown, ErrRejected (a *StatusError: an unknown
// charge, an amount above what is left of it) and other errors.
// LookupRefund finds the refund made under a key (ErrNoRefund: none, with
// Lookup's caveat), and Refunds lists a charge's refunds.
//
// The client never retries: callers decide, with the same key. (Go's
// http.Transport may itself resend a request carrying an Idempotency-Key once
// on a reused keep-alive connection that the server closed; with the same key
// that is harmless, and any write it made counts as written.) Every call is
// bounded by the http.Client's Timeout (DefaultTimeout when it has none) and
// by ctx; answers are read up to 1 MiB; redirects are not followed.
package provider
