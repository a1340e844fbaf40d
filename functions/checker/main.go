// Command checker is the checker Lambda function: triggered by the check
// queue, it recovers the reservations whose lease ran out (External ones to
// UNKNOWN, for the reconciler; others released). See idempotency/recovery.
package main

import (
	"context"

	"github.com/oncehq/once/internal/checker"
	"github.com/oncehq/once/internal/lambdamain"
	"github.com/oncehq/once/internal/queue"
)

func main() { lambdamain.Run(run) }

func run(ctx context.Context, getenv func(string) string) error {
	return queue.Start(ctx, getenv, checker.Handler)
}
