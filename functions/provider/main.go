// Command provider is the payment provider simulator (provider/simulator) as
// a Lambda function behind API Gateway (REST API proxy integration, v1
// events), for demo stacks. Its state lives in ONCE_PROVIDER_TABLE.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/awslabs/aws-lambda-go-api-proxy/httpadapter"

	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/dynamoclient"
	"github.com/oncehq/once/internal/provider/simulator"
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
	log := slog.New(slog.NewJSONHandler(os.Stdout, &slog.HandlerOptions{Level: cfg.LogLevel}))
	awsCfg, err := dynamoclient.Config(ctx, dynamoclient.Options{Endpoint: cfg.DynamoDBEndpoint, Region: cfg.Region})
	if err != nil {
		return err
	}
	sim := simulator.New(simulator.Options{
		DB:     dynamoclient.New(awsCfg, cfg.DynamoDBEndpoint),
		Table:  cfg.ProviderTable,
		Logger: log,
	})
	lambda.StartWithOptions(httpadapter.New(sim).ProxyWithContext, lambda.WithContext(ctx))
	return nil
}
