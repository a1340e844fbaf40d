// Command resender is the resender Lambda function: triggered by the
// receipt retry queue, it tries again, with backoff, the receipts whose mail
// failed, deduplicated as the receipts function does, and sends those it
// gives up on to the retry queue's dead-letter queue. See internal/receipts.
package main

import (
	"context"

	"github.com/oncehq/once/internal/lambdamain"
	"github.com/oncehq/once/internal/queue"
	"github.com/oncehq/once/internal/receipts"
)

func main() { lambdamain.Run(run) }

func run(ctx context.Context, getenv func(string) string) error {
	return queue.Start(ctx, getenv, receipts.RetryHandler)
}
