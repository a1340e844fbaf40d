// Command reconciler is the reconciler Lambda function: triggered by the
// idempotency table's stream (records that became UNKNOWN), it asks the
// payment provider what happened and finalises the record.
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
	h, err := app.Reconciler(cfg, client, app.Options{Logger: app.Logger(os.Stdout, cfg.LogLevel), Metrics: os.Stdout})
	if err != nil {
		return err
	}
	lambda.StartWithOptions(h, lambda.WithContext(ctx))
	return nil
}
