package app

import (
	"context"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/oncehq/once/idempotency/stream"
	"github.com/oncehq/once/internal/config"
)

// StartStream runs a stream function, as its main does: it loads the
// configuration from getenv, builds the DynamoDB client, builds the handler
// with build (worker.Handler, sweeper.Handler or reconciler.Handler) under the default Options (JSON
// logs at cfg.LogLevel and metrics on stdout), and hands it to the Lambda
// runtime, which serves invocations until the process ends. It returns the
// error that kept the function from starting; nothing is started then.
func StartStream(ctx context.Context, getenv func(string) string, build func(config.Config, *dynamodb.Client, Options) (stream.Handler, error)) error {
	cfg, err := config.FromEnv(getenv)
	if err != nil {
		return err
	}
	client, err := DynamoDB(ctx, cfg)
	if err != nil {
		return err
	}
	h, err := build(cfg, client, Options{})
	if err != nil {
		return err
	}
	lambda.StartWithOptions(h, lambda.WithContext(ctx))
	return nil
}
