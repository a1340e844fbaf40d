// Command sweeper is the sweeper Lambda function: triggered by the idempotency
// table's stream (REMOVEs of IN_PROGRESS records), it sweeps abandoned
// reservations and restores abandoned External ones as UNKNOWN.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/oncehq/once/internal/app"
	"github.com/oncehq/once/internal/sweeper"
)

func main() {
	if err := run(context.Background(), os.Getenv); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(ctx context.Context, getenv func(string) string) error {
	return app.StartStream(ctx, getenv, sweeper.Handler)
}
