package app

import (
	"net/http"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/provider/simulator"
)

// ProviderSimulator returns the provider function's handler: the payment provider
// simulator, keeping its state in cfg.ProviderTable through client. Serve it
// with gateway.NewLambdaHandler, which takes the function URL's events
// (payload 2.0) as well as API Gateway's. opts.Metrics and opts.Now are not
// used.
func ProviderSimulator(cfg config.Config, client *dynamodb.Client, opts Options) http.Handler {
	opts = opts.withDefaults(cfg)
	return simulator.New(simulator.Options{DB: client, Table: cfg.ProviderTable, Logger: opts.Logger})
}
