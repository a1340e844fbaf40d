// Command auditor is the auditor Lambda function: run every hour by an
// EventBridge schedule, it scans one of 23 segments of the idempotency
// table and counts the records recovery left behind (an UNKNOWN record or
// External reservation whose check was lost, a legacy item still carrying
// the TTL attribute): abandoned_records, which AbandonedRecordsAlarm
// watches. See internal/audit.
package main

import (
	"context"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/oncehq/once/internal/app"
	"github.com/oncehq/once/internal/audit"
	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/lambdamain"
)

func main() { lambdamain.Run(run) }

func run(ctx context.Context, getenv func(string) string) error {
	cfg, err := config.FromEnv(getenv)
	if err != nil {
		return err
	}
	client, err := app.DynamoDBWith(ctx, cfg, audit.ClientOptions())
	if err != nil {
		return err
	}
	a, err := audit.Function(cfg, client, app.Options{})
	if err != nil {
		return err
	}
	lambda.StartWithOptions(a.Handle, lambda.WithContext(ctx))
	return nil
}
