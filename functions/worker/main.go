// Command worker is the outbox worker Lambda function: triggered by the
// payments table's stream (new pending payments), it charges each payment
// through the payment provider and settles it. See internal/worker.
package main

import (
	"context"

	"github.com/oncehq/once/internal/app"
	"github.com/oncehq/once/internal/lambdamain"
	"github.com/oncehq/once/internal/worker"
)

func main() { lambdamain.Run(run) }

func run(ctx context.Context, getenv func(string) string) error {
	return app.StartStream(ctx, getenv, worker.Handler)
}
