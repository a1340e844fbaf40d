// Package sweeper composes the sweeper function on the idempotency table's
// stream, configured from the environment: the public recovery.Scheduler,
// which schedules a recovery check (on the check queue) for every new
// reservation, and recovery.Sweeper, the TTL backstop, which restores the
// abandoned External reservations that DynamoDB's TTL deleted. See the
// recovery package's documentation for both.
package sweeper
