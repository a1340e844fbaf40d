// Package payments is the domain behind the demo API's payments: the
// create-payment request and its validation, the Payment and its two
// renderings (the PaymentsTable item and the JSON the API answers), payment
// IDs, and access to the payments table. It serves no HTTP: its endpoints
// are package paymentshttp's, so that the worker and the retrier, which read
// and settle payments, link neither the HTTP layer nor crash injection.
//
// A new payment is written with status pending, in the same DynamoDB
// transaction as the idempotency record that stores the 201 response (see
// paymentshttp.Effect). That item is the outbox: the worker picks it up from
// the table's stream, charges the provider and settles it with Table.Settle,
// which only moves a pending payment.
//
// Decode is strict, like Stripe's API: unknown fields, wrong types, duplicate
// object keys at any depth and out-of-range values are refused with a
// *problem.FieldError naming the offending field, so a client never has a
// payment created from a request it did not mean.
package payments
