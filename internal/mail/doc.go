// Package mail is the client of the mail API the receipts are sent through
// (the provider simulator serves one: internal/provider/simulator).
//
// Like most mail APIs, it is not idempotent: every POST /v1/messages sends
// one message, so a caller that must not send twice deduplicates on its own
// side (see internal/receipts). Send tells the outcomes apart as the
// provider client does: sent; provably not sent (ErrNotSent: the API could
// not be reached, or answered 503 or 429), retry later; perhaps sent
// (ErrOutcomeUnknown: the request went out and no answer came back); refused
// (*StatusError: another 4xx, where sending the same message again will not
// help).
package mail
