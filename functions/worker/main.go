// Command worker is the outbox worker Lambda function: triggered by the
// payments table's stream (new pending payments), it charges each payment
// through the payment provider and settles it, handing the ones whose charge
// fails transiently to the retry queue. See internal/worker.
package main

import (
	"context"

	"github.com/oncehq/once/internal/lambdamain"
	"github.com/oncehq/once/internal/queue"
	"github.com/oncehq/once/internal/worker"
)

func main() { lambdamain.Run(run) }

func run(ctx context.Context, getenv func(string) string) error {
	return queue.Start(ctx, getenv, worker.Handler)
}
