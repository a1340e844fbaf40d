// Package ordershttp serves the orders endpoints on the idempotency engine:
// POST /v1/orders, a multi-step request in External mode (the order is
// written with the reservation, then the phases of orders.Flow run; the
// handler crashes at fault.AfterProviderCall on request), and
// GET /v1/orders/{id}. The domain itself (the request, the order, the
// phases and their effects, and the Resolver that resumes an abandoned
// request) is package orders, which the reconciler links without this
// package.
package ordershttp
