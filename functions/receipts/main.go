// Command receipts is the receipts Lambda function: triggered by the outbox
// table's stream (each order's receipt job), it sends the receipt through
// the mail API once, deduplicating redeliveries by the job's ID; a receipt
// whose mail fails goes to the receipt retry queue (the resender's). See
// internal/receipts.
package main

import (
	"context"

	"github.com/oncehq/once/internal/lambdamain"
	"github.com/oncehq/once/internal/queue"
	"github.com/oncehq/once/internal/receipts"
)

func main() { lambdamain.Run(run) }

func run(ctx context.Context, getenv func(string) string) error {
	return queue.Start(ctx, getenv, receipts.Handler)
}
