// Command sweeper is the sweeper Lambda function: triggered by the idempotency
// table's stream (REMOVEs of IN_PROGRESS records), it sweeps abandoned
// reservations and restores abandoned External ones as UNKNOWN.
package main

import (
	"context"

	"github.com/oncehq/once/internal/app"
	"github.com/oncehq/once/internal/lambdamain"
	"github.com/oncehq/once/internal/sweeper"
)

func main() { lambdamain.Run(run) }

func run(ctx context.Context, getenv func(string) string) error {
	return app.StartStream(ctx, getenv, sweeper.Handler)
}
