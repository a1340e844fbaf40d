// Command retrier is the retrier Lambda function: triggered by the worker's
// retry queue, it charges again the payments whose charge failed
// transiently, with backoff, until their retry window ends. See
// internal/worker.
package main

import (
	"context"

	"github.com/oncehq/once/internal/lambdamain"
	"github.com/oncehq/once/internal/queue"
	"github.com/oncehq/once/internal/worker"
)

func main() { lambdamain.Run(run) }

func run(ctx context.Context, getenv func(string) string) error {
	return queue.Start(ctx, getenv, worker.RetryHandler)
}
