package app

import (
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/httpapi"
	"github.com/oncehq/once/internal/metrics"
	"github.com/oncehq/once/internal/provider"
	"github.com/oncehq/once/internal/reconciler"
	"github.com/oncehq/once/internal/store/dynamo"
	"github.com/oncehq/once/internal/stream"
)

// Reconciler returns the reconciler function's stream handler: UNKNOWN
// records of the idempotency table, through client, resolved with the
// provider at cfg.ProviderURL.
func Reconciler(cfg config.Config, client *dynamodb.Client, opts Options) (stream.Handler, error) {
	if cfg.ProviderURL == "" {
		return nil, fmt.Errorf("app: reconciler: %s is not set", config.EnvProviderURL)
	}
	if opts.Logger == nil {
		opts.Logger = Logger(os.Stdout, cfg.LogLevel)
	}
	if opts.Metrics == nil {
		opts.Metrics = os.Stdout
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	r, err := reconciler.New(reconciler.Config{
		Store:           dynamo.New(client, cfg.IdempotencyTable),
		Provider:        provider.New(cfg.ProviderURL, &http.Client{Timeout: cfg.ProviderTimeout}),
		Rebuild:         httpapi.ChargeResponse,
		ProviderTimeout: cfg.ProviderTimeout,
		Retention:       cfg.Retention,
		Logger:          opts.Logger,
		Metrics:         metrics.New(opts.Metrics, MetricsNamespace, map[string]string{"Service": "reconciler"}),
		Now:             opts.Now,
	})
	if err != nil {
		return nil, fmt.Errorf("app: %w", err)
	}
	return r.Handle, nil
}
