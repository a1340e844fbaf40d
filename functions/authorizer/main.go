// Command authorizer is the API Gateway REQUEST authorizer Lambda: it maps
// "Authorization: Bearer <key>" to a tenant through the ApiKeysTable.
package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/oncehq/once/internal/auth"
	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/dynamoclient"
	"github.com/oncehq/once/internal/lambdamain"
)

func main() { lambdamain.Run(run) }

func run(ctx context.Context, getenv func(string) string) error {
	cfg, err := config.FromEnv(getenv)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewJSONHandler(os.Stdout, &slog.HandlerOptions{Level: cfg.LogLevel}))
	awsCfg, err := dynamoclient.Config(ctx, dynamoclient.Options{Endpoint: cfg.DynamoDBEndpoint, Region: cfg.Region})
	if err != nil {
		return err
	}
	client := dynamoclient.New(awsCfg, cfg.DynamoDBEndpoint)
	authorizer := auth.NewAuthorizer(auth.NewKeys(client, cfg.Table("ApiKeysTable")), logger)
	lambda.StartWithOptions(authorizer.Handle, lambda.WithContext(ctx))
	return nil
}
