package app

import (
	"fmt"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/payments"
	"github.com/oncehq/once/internal/stream"
	"github.com/oncehq/once/internal/worker"
)

// Worker returns the worker function's handler: it charges the pending
// payments of the payments table's stream through the provider at
// cfg.ProviderURL and settles them in cfg.PaymentsTable through client.
// opts.Now is not used. It is an error for cfg.ProviderURL to be empty.
func Worker(cfg config.Config, client *dynamodb.Client, opts Options) (stream.Handler, error) {
	charger, err := requireProvider(cfg, "worker")
	if err != nil {
		return nil, err
	}
	opts = opts.withDefaults(cfg)
	w, err := worker.New(worker.Config{
		Charger: charger,
		Settler: payments.NewTable(client, cfg.PaymentsTable),
		Logger:  opts.Logger,
		Metrics: opts.emitter("worker"),
	})
	if err != nil {
		return nil, fmt.Errorf("app: %w", err)
	}
	return w.Handle, nil
}
