package app

import (
	"context"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/dynamoclient"
	"github.com/oncehq/once/internal/metrics"
)

// MetricsNamespace is the CloudWatch namespace of every metric.
const MetricsNamespace = "once"

// Options are the process-level dependencies of a handler.
type Options struct {
	// Logger receives the log lines (a JSON logger on stdout at cfg.LogLevel
	// when nil).
	Logger *slog.Logger
	// Metrics receives the EMF metric lines (stdout when nil).
	Metrics io.Writer
	// Now returns the current time (time.Now when nil); tests move it to
	// expire records.
	Now func() time.Time
}

// WithDefaults returns o with its nil fields set: a JSON logger on stdout at
// cfg.LogLevel, metrics on stdout, time.Now.
func (o Options) WithDefaults(cfg config.Config) Options {
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

// Emitter returns the metrics emitter of the function service, on o.Metrics.
func (o Options) Emitter(service string) *metrics.Emitter {
	return metrics.New(o.Metrics, MetricsNamespace, map[string]string{"Service": service})
}

// DynamoDB returns the DynamoDB client for cfg, with dynamoclient's
// default timeout and retries (the api's: a call fails within 6.4 s).
func DynamoDB(ctx context.Context, cfg config.Config) (*dynamodb.Client, error) {
	return DynamoDBWith(ctx, cfg, dynamoclient.Options{})
}

// DynamoDBWith returns the DynamoDB client for cfg with opts' timeout and
// retries (its endpoint and region are cfg's).
func DynamoDBWith(ctx context.Context, cfg config.Config, opts dynamoclient.Options) (*dynamodb.Client, error) {
	opts.Endpoint, opts.Region = cfg.DynamoDBEndpoint, cfg.Region
	awsCfg, err := dynamoclient.Config(ctx, opts)
	if err != nil {
		return nil, err
	}
	return dynamoclient.New(awsCfg, cfg.DynamoDBEndpoint), nil
}

// Logger returns the JSON logger the functions use, on w at level.
func Logger(w io.Writer, level slog.Level) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level}))
}
