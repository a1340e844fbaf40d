// Command worker is the outbox worker Lambda function: triggered by the
// payments table's stream (new pending payments), it charges each payment
// through the payment provider and settles it. See internal/worker.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/oncehq/once/internal/app"
	"github.com/oncehq/once/internal/worker"
)

func main() {
	if err := run(context.Background(), os.Getenv); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(ctx context.Context, getenv func(string) string) error {
	return app.StartStream(ctx, getenv, worker.Handler)
}
