// Package reconciler composes the reconciler function: the public
// recovery.Reconciler (see its documentation for how an UNKNOWN record is
// finalised) on the idempotency table, configured from the environment, with
// the resolvers of the API's External routes (Resolvers), built from the
// domain packages (charges, refunds, orders), which serve no HTTP: the
// function links neither the API's routes nor the HTTP layer.
package reconciler
