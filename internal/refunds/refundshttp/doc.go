// Package refundshttp serves the refunds endpoints on the idempotency
// engine: POST /v1/refunds in External mode (the hold on the payment is
// taken with the reservation, the provider refunds under the forwarded key,
// the completion or the release is written with the answer) and
// GET /v1/refunds/{id}. The domain itself (the request, the refund, the
// holds and their effects, the answers, and the Resolver that rebuilds an
// answer from the provider's refund) is package refunds, which the
// reconciler links without this package.
package refundshttp
