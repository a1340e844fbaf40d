// Package checker composes the checker function: recovery.Checker on the
// check queue, recovering abandoned reservations of the idempotency table.
package checker

import (
	"context"
	"fmt"

	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/idempotency/recovery"
	"github.com/oncehq/once/internal/app"
	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/queue"
)

// Handler returns the checker function's handler: recovery.Checker on
// the IdempotencyTable, sending early checks on through cfg.CheckQueue.
func Handler(ctx context.Context, cfg config.Config, c queue.Clients, opts app.Options) (queue.Handler, error) {
	q, err := queue.Open(ctx, c, cfg.CheckQueue, config.EnvCheckQueue)
	if err != nil {
		return nil, fmt.Errorf("checker: %w", err)
	}
	opts = opts.WithDefaults(cfg)
	ch, err := recovery.NewChecker(recovery.CheckerConfig{
		Store:     dynamo.New(c.DynamoDB, cfg.Table("IdempotencyTable")),
		Queue:     q,
		Retention: cfg.Retention,
		Logger:    opts.Logger,
		Metrics:   opts.Emitter("checker"),
		Now:       opts.Now,
	})
	if err != nil {
		return nil, fmt.Errorf("checker: %w", err)
	}
	return ch.Handle, nil
}
