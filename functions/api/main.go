// Command api is the payments API Lambda function, behind API Gateway (REST
// or HTTP API) with the authorizer function in front.
package main

import (
	"context"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/oncehq/once/idempotency/apigw"
	"github.com/oncehq/once/internal/api"
	"github.com/oncehq/once/internal/app"
	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/lambdamain"
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
	h, err := api.Handler(cfg, client, app.Options{Logger: app.Logger(os.Stdout, cfg.LogLevel), Metrics: os.Stdout})
	if err != nil {
		return err
	}
	lambda.StartWithOptions(apigw.NewLambda(h), lambda.WithContext(ctx))
	return nil
}
