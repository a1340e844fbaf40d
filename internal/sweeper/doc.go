// Package sweeper composes the sweeper function: the public
// recovery.Sweeper (see its documentation for what it does with an abandoned
// reservation) on the idempotency table, configured from the environment.
package sweeper
