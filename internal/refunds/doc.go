// Package refunds is the domain of POST /v1/refunds and GET
// /v1/refunds/{id}: refunding a succeeded payment at the payment provider,
// built on the public idempotency engine as any user of it would build an
// External endpoint.
//
// A refund must never take more than is left of its payment, counting the
// refunds still in flight, however many run at once. So the payment item
// keeps what is left (payments.Payment.Refundable) and the amounts held by
// refunds in flight (Holds, by idempotency key), and a refund takes its
// amount when it starts: the hold is a conditional update of the payment
// passed to idempotency.Begin, written in the transaction that reserves the
// key. A hold that cannot be taken (no such payment for the tenant, a
// payment that has not succeeded, too little left) is the request's
// business answer (404 not_found, 400 payment_not_refundable, 400
// amount_exceeds_refundable): the engine stores it and replays it. Nothing
// is read before Begin, so a retry replays rather than re-deciding against a
// state that the first request changed, and a replay costs one round trip.
//
// Once the provider has refunded, the completion writes the refund item and
// moves the hold into the payment's amount_refunded; when provably nothing
// was refunded (the provider is unavailable, or the reconciler finds no
// refund), the release gives the hold back; an unknown outcome keeps it until
// the reconciler, looking the refund up under the forwarded key (Resolver),
// does one or the other with the same effects and the same answer, byte for
// byte (Response), as the live request would have.
//
// It serves no HTTP: the endpoints are package refundshttp's, so that the
// reconciler links the Resolver without the HTTP layer.
package refunds
