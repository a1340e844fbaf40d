package worker

import (
	"context"
	"fmt"
	"time"

	"github.com/oncehq/once/idempotency/stream"
	"github.com/oncehq/once/internal/app"
	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/payments"
	"github.com/oncehq/once/internal/provider"
	"github.com/oncehq/once/internal/queue"
)

// Handler returns the worker function's handler: it charges the pending
// payments of the payments table's stream through the provider at
// cfg.ProviderURL, settles them in the PaymentsTable, and sends those whose
// charge fails transiently to cfg.WorkerRetryQueue. It is an error for
// cfg.ProviderURL to be empty.
func Handler(ctx context.Context, cfg config.Config, c queue.Clients, opts app.Options) (stream.Handler, error) {
	w, err := build(ctx, cfg, c, opts, "worker")
	if err != nil {
		return nil, err
	}
	return w.Handle, nil
}

// RetryHandler returns the retrier function's handler: it charges again the
// payments of cfg.WorkerRetryQueue, as Handler does the stream's, until
// their retry window (cfg.WorkerRetryWindow) ends, then looks their charges
// up, again while that fails, until the look-up horizon
// (cfg.WorkerLookUpHorizon).
func RetryHandler(ctx context.Context, cfg config.Config, c queue.Clients, opts app.Options) (queue.Handler, error) {
	w, err := build(ctx, cfg, c, opts, "retrier")
	if err != nil {
		return nil, err
	}
	return w.HandleRetries, nil
}

// build builds the Worker of the function name.
func build(ctx context.Context, cfg config.Config, c queue.Clients, opts app.Options, name string) (*Worker, error) {
	charger, err := provider.Require(cfg, c.DynamoDB.Options().Credentials, c.DynamoDB.Options().Region, name)
	if err != nil {
		return nil, err
	}
	retries, err := queue.Open(ctx, c, cfg.WorkerRetryQueue, config.EnvWorkerRetryQueue)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	opts = opts.WithDefaults(cfg)
	w, err := New(Config{
		Charger:       charger,
		Settler:       payments.NewTable(c.DynamoDB, cfg.Table("PaymentsTable")),
		Logger:        opts.Logger,
		Metrics:       opts.Emitter(name),
		Retries:       retries,
		RetryWindow:   cfg.WorkerRetryWindow,
		LookUpHorizon: cfg.WorkerLookUpHorizon,
		CallTimeout:   cfg.ProviderSettle,
		// One provider call, and the settle's DynamoDB write with the
		// SDK's bounded retries.
		Budget: cfg.ProviderTimeout + 2*time.Second,
		Now:    opts.Now,
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return w, nil
}
