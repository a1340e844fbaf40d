// Command receipts is the receipts Lambda function: triggered by the outbox
// table's stream (each order's receipt job), it sends the receipt through
// the mail API once, deduplicating redeliveries by the job's ID. See
// internal/receipts.
package main

import (
	"context"

	"github.com/oncehq/once/internal/app"
	"github.com/oncehq/once/internal/lambdamain"
	"github.com/oncehq/once/internal/receipts"
)

func main() { lambdamain.Run(run) }

func run(ctx context.Context, getenv func(string) string) error {
	return app.StartStream(ctx, getenv, receipts.Handler)
}
