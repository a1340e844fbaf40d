package worker

import (
	"fmt"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/oncehq/once/idempotency/stream"
	"github.com/oncehq/once/internal/app"
	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/payments"
	"github.com/oncehq/once/internal/provider"
)

// Handler returns the worker function's handler: it charges the pending
// payments of the payments table's stream through the provider at
// cfg.ProviderURL and settles them in cfg.PaymentsTable through client.
// opts.Now is not used. It is an error for cfg.ProviderURL to be empty.
func Handler(cfg config.Config, client *dynamodb.Client, opts app.Options) (stream.Handler, error) {
	charger, err := provider.Require(cfg, client.Options().Credentials, client.Options().Region, "worker")
	if err != nil {
		return nil, err
	}
	opts = opts.WithDefaults(cfg)
	w, err := New(Config{
		Charger: charger,
		Settler: payments.NewTable(client, cfg.PaymentsTable),
		Logger:  opts.Logger,
		Metrics: opts.Emitter("worker"),
	})
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	return w.Handle, nil
}
