// Package sweeper composes the sweeper function on the idempotency table's
// stream, configured from the environment: the public recovery.Scheduler,
// which schedules a recovery check (on the check queue) for every new
// reservation, and recovery.Sweeper, which restores the abandoned External
// reservations that DynamoDB's TTL deleted: legacy items only, written
// before External reservations lost their TTL attribute (one whose check is
// lost now waits for a retry or `oncectl reannounce -lost`). See the
// recovery package's documentation for both.
package sweeper
