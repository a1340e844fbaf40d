// Command worker is the outbox worker Lambda function: triggered by the
// payments table's stream (new pending payments), it charges each payment
// through the payment provider and settles it. See internal/worker.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/oncehq/once/internal/app"
	"github.com/oncehq/once/internal/config"
)

func main() {
	if err := run(context.Background(), os.Getenv); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(ctx context.Context, getenv func(string) string) error {
	cfg, err := config.FromEnv(getenv)
	if err != nil {
		return err
	}
	client, err := app.DynamoDB(ctx, cfg)
	if err != nil {
		return err
	}
	h, err := app.Worker(cfg, client, app.Options{Logger: app.Logger(os.Stdout, cfg.LogLevel), Metrics: os.Stdout})
	if err != nil {
		return err
	}
	lambda.StartWithOptions(h, lambda.WithContext(ctx))
	return nil
}
