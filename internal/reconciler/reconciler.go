package reconciler

import (
	"fmt"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/idempotency/recovery"
	"github.com/oncehq/once/idempotency/stream"
	"github.com/oncehq/once/internal/api"
	"github.com/oncehq/once/internal/app"
	"github.com/oncehq/once/internal/config"
)

// Handler returns the reconciler function's stream handler: the public
// recovery.Reconciler on the idempotency table, through client, with the
// resolvers of the API's External routes (api.Resolvers). Every External
// route calls the payment provider, so cfg must name it.
func Handler(cfg config.Config, client *dynamodb.Client, opts app.Options) (stream.Handler, error) {
	if cfg.ProviderURL == "" {
		return nil, fmt.Errorf("reconciler: %s is not set", config.EnvProviderURL)
	}
	opts = opts.WithDefaults(cfg)
	resolvers, err := api.Resolvers(cfg, client, opts)
	if err != nil {
		return nil, err
	}
	r, err := recovery.NewReconciler(recovery.ReconcilerConfig{
		Store:     dynamo.New(client, cfg.Table("IdempotencyTable")),
		Resolvers: resolvers,
		Settle:    cfg.ProviderSettle,
		Retention: cfg.Retention,
		Logger:    opts.Logger,
		Metrics:   opts.Emitter("reconciler"),
		Now:       opts.Now,
	})
	if err != nil {
		return nil, fmt.Errorf("reconciler: %w", err)
	}
	return r.Handle, nil
}
