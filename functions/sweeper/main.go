// Command sweeper is the sweeper Lambda function: triggered by the idempotency
// table's stream, it schedules a recovery check for each new IN_PROGRESS
// reservation (on the check queue, due when its lease runs out), and sweeps
// the IN_PROGRESS reservations TTL removed, restoring abandoned External ones
// as UNKNOWN: legacy items only, written before External reservations lost
// their TTL attribute (one whose check is lost now waits for a retry or
// `oncectl reannounce -lost`).
package main

import (
	"context"

	"github.com/oncehq/once/internal/lambdamain"
	"github.com/oncehq/once/internal/queue"
	"github.com/oncehq/once/internal/sweeper"
)

func main() { lambdamain.Run(run) }

func run(ctx context.Context, getenv func(string) string) error {
	return queue.Start(ctx, getenv, sweeper.Handler)
}
