// Package chargeshttp serves POST /v1/charges on the idempotency engine, in
// External mode: the provider is charged while the client waits, and an
// outcome that is not known is left to the reconciler. The domain itself
// (the request, the charge, the answers, the Resolver that rebuilds an
// answer from the provider's charge) is package charges, which the
// reconciler links without this package.
package chargeshttp
