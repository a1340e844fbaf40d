// Command reconciler is the reconciler Lambda function: triggered by the
// idempotency table's stream (records that became UNKNOWN), it asks the
// payment provider what happened and finalises the record.
package main

import (
	"context"

	"github.com/oncehq/once/internal/app"
	"github.com/oncehq/once/internal/lambdamain"
	"github.com/oncehq/once/internal/reconciler"
)

func main() { lambdamain.Run(run) }

func run(ctx context.Context, getenv func(string) string) error {
	return app.StartStream(ctx, getenv, reconciler.Handler)
}
