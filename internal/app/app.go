package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/dynamoclient"
	"github.com/oncehq/once/internal/fault"
	"github.com/oncehq/once/internal/gateway"
	"github.com/oncehq/once/internal/httpapi"
	"github.com/oncehq/once/internal/metrics"
	"github.com/oncehq/once/internal/payments"
	"github.com/oncehq/once/internal/provider"
)

// MetricsNamespace is the CloudWatch namespace of every metric.
const MetricsNamespace = "once"

// Options are the process-level dependencies of a handler.
type Options struct {
	// Logger receives the request log lines (a JSON logger on stdout at
	// cfg.LogLevel when nil).
	Logger *slog.Logger
	// Metrics receives the EMF metric lines (stdout when nil).
	Metrics io.Writer
	// Now returns the current time (time.Now when nil); tests move it to
	// expire records.
	Now func() time.Time
}

// withDefaults returns o with its nil fields set: a JSON logger on stdout at
// cfg.LogLevel, metrics on stdout, time.Now.
func (o Options) withDefaults(cfg config.Config) Options {
	if o.Logger == nil {
		o.Logger = Logger(os.Stdout, cfg.LogLevel)
	}
	if o.Metrics == nil {
		o.Metrics = os.Stdout
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// emitter returns the metrics emitter of the function service, on o.Metrics.
func (o Options) emitter(service string) *metrics.Emitter {
	return metrics.New(o.Metrics, MetricsNamespace, map[string]string{"Service": service})
}

// newProvider returns the client of the provider at cfg.ProviderURL, each
// call bounded by cfg.ProviderTimeout.
func newProvider(cfg config.Config) *provider.Client {
	return provider.New(cfg.ProviderURL, &http.Client{Timeout: cfg.ProviderTimeout})
}

// requireProvider returns newProvider(cfg) for function, which cannot run
// without a provider: an error when cfg.ProviderURL is not set.
func requireProvider(cfg config.Config, function string) (*provider.Client, error) {
	if cfg.ProviderURL == "" {
		return nil, fmt.Errorf("app: %s: %s is not set", function, config.EnvProviderURL)
	}
	return newProvider(cfg), nil
}

// DynamoDB returns the DynamoDB client for cfg.
func DynamoDB(ctx context.Context, cfg config.Config) (*dynamodb.Client, error) {
	awsCfg, err := dynamoclient.Config(ctx, dynamoclient.Options{Endpoint: cfg.DynamoDBEndpoint, Region: cfg.Region})
	if err != nil {
		return nil, err
	}
	return dynamoclient.New(awsCfg, cfg.DynamoDBEndpoint), nil
}

// Logger returns the JSON logger the functions use, on w at level.
func Logger(w io.Writer, level slog.Level) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level}))
}

// API returns the api function's handler: the payments API over the
// idempotency engine, backed by DynamoDB through client. POST /v1/charges
// calls the provider at cfg.ProviderURL, each call bounded by
// cfg.ProviderTimeout; without a ProviderURL it answers 503
// provider_unavailable.
func API(cfg config.Config, client *dynamodb.Client, opts Options) (http.Handler, error) {
	opts = opts.withDefaults(cfg)
	var hook func(context.Context, string)
	if cfg.FaultInjection {
		hook = fault.Check
	}
	mw, err := idempotency.New(idempotency.Config{
		Store:     dynamo.New(client, cfg.IdempotencyTable),
		Tenant:    gateway.Tenant,
		OnError:   httpapi.WriteError,
		Retention: cfg.Retention,
		Lease:     cfg.Lease,
		Now:       opts.Now,
		Hook:      hook,
	})
	if err != nil {
		return nil, fmt.Errorf("app: %w", err)
	}
	var charger httpapi.Provider // a nil *provider.Client would not be a nil Provider
	if cfg.ProviderURL != "" {
		charger = newProvider(cfg)
	}
	return httpapi.NewHandler(httpapi.Deps{
		Middleware:      mw,
		Payments:        payments.NewTable(client, cfg.PaymentsTable),
		PaymentsTable:   cfg.PaymentsTable,
		Logger:          opts.Logger,
		Metrics:         opts.emitter("api"),
		Now:             opts.Now,
		Provider:        charger,
		ProviderTimeout: cfg.ProviderTimeout,
		Fault:           cfg.FaultInjection,
	}), nil
}
