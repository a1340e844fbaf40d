package app

import (
	"errors"
	"fmt"
	"net/http"
	"os"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/metrics"
	"github.com/oncehq/once/internal/payments"
	"github.com/oncehq/once/internal/provider"
	"github.com/oncehq/once/internal/stream"
	"github.com/oncehq/once/internal/worker"
)

// Worker returns the worker function's handler: it charges the pending
// payments of the payments table's stream through the provider at
// cfg.ProviderURL and settles them in cfg.PaymentsTable through client.
// opts.Now is not used. It is an error for cfg.ProviderURL to be empty.
func Worker(cfg config.Config, client *dynamodb.Client, opts Options) (stream.Handler, error) {
	if cfg.ProviderURL == "" {
		return nil, errors.New("app: worker: " + config.EnvProviderURL + " is not set")
	}
	if opts.Logger == nil {
		opts.Logger = Logger(os.Stdout, cfg.LogLevel)
	}
	if opts.Metrics == nil {
		opts.Metrics = os.Stdout
	}
	w, err := worker.New(worker.Config{
		Charger: provider.New(cfg.ProviderURL, &http.Client{Timeout: cfg.ProviderTimeout}),
		Settler: payments.NewTable(client, cfg.PaymentsTable),
		Logger:  opts.Logger,
		Metrics: metrics.New(opts.Metrics, MetricsNamespace, map[string]string{"Service": "worker"}),
	})
	if err != nil {
		return nil, fmt.Errorf("app: %w", err)
	}
	return w.Handle, nil
}
