package app

import (
	"fmt"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/httpapi"
	"github.com/oncehq/once/internal/reconciler"
	"github.com/oncehq/once/internal/stream"
)

// Reconciler returns the reconciler function's stream handler: UNKNOWN
// records of the idempotency table, through client, resolved with the
// provider at cfg.ProviderURL.
func Reconciler(cfg config.Config, client *dynamodb.Client, opts Options) (stream.Handler, error) {
	looker, err := requireProvider(cfg, "reconciler")
	if err != nil {
		return nil, err
	}
	opts = opts.withDefaults(cfg)
	r, err := reconciler.New(reconciler.Config{
		Store:           dynamo.New(client, cfg.IdempotencyTable),
		Provider:        looker,
		Rebuild:         httpapi.ChargeResponse,
		ProviderTimeout: cfg.ProviderTimeout,
		Retention:       cfg.Retention,
		Logger:          opts.Logger,
		Metrics:         opts.emitter("reconciler"),
		Now:             opts.Now,
	})
	if err != nil {
		return nil, fmt.Errorf("app: %w", err)
	}
	return r.Handle, nil
}
