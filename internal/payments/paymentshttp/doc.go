// Package paymentshttp serves the payments endpoints on the idempotency
// engine: POST /v1/payments in Atomic mode (the payment, pending, is
// inserted with the stored 201 in one transaction: Effect) and
// GET /v1/payments/{id}. The domain itself (validation, the Payment, the
// table) is package payments, which the background functions link without
// this package.
package paymentshttp
