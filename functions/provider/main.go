// Command provider is the payment provider simulator (provider/simulator) as
// a Lambda function behind its function URL (payload 2.0 events; API
// Gateway's proxy events are served too), for demo stacks. Its state lives in
// ONCE_PROVIDER_TABLE.
package main

import (
	"context"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/oncehq/once/idempotency/apigw"
	"github.com/oncehq/once/internal/app"
	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/lambdamain"
	"github.com/oncehq/once/internal/provider/simulator"
)

func main() { lambdamain.Run(run) }

func run(ctx context.Context, getenv func(string) string) error {
	cfg, err := config.FromEnv(getenv)
	if err != nil {
		return err
	}
	client, err := app.DynamoDB(ctx, cfg)
	if err != nil {
		return err
	}
	h := simulator.Handler(cfg, client, app.Options{})
	lambda.StartWithOptions(apigw.NewLambda(h), lambda.WithContext(ctx))
	return nil
}
