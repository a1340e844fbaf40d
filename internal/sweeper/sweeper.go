package sweeper

import (
	"context"
	"fmt"

	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/idempotency/recovery"
	"github.com/oncehq/once/idempotency/stream"
	"github.com/oncehq/once/internal/app"
	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/queue"
)

// Handler returns the sweeper function's stream handler on the idempotency
// table: recovery.Scheduler, which sends every new reservation's check to
// cfg.CheckQueue, due when its lease runs out, and recovery.Sweeper, which
// restores the abandoned External reservations that TTL deleted (legacy
// items, written before External reservations lost their TTL attribute:
// nothing timed ends one written since whose check is lost). One function reads the stream for both: DynamoDB Streams serves
// at most two readers per shard without throttling, and the reconciler is
// the other.
func Handler(ctx context.Context, cfg config.Config, c queue.Clients, opts app.Options) (stream.Handler, error) {
	q, err := queue.Open(ctx, c, cfg.CheckQueue, config.EnvCheckQueue)
	if err != nil {
		return nil, fmt.Errorf("sweeper: %w", err)
	}
	opts = opts.WithDefaults(cfg)
	metrics := opts.Emitter("sweeper")
	sched, err := recovery.NewScheduler(recovery.SchedulerConfig{
		Queue:   q,
		Logger:  opts.Logger,
		Metrics: metrics,
		Now:     opts.Now,
	})
	if err != nil {
		return nil, fmt.Errorf("sweeper: %w", err)
	}
	s, err := recovery.NewSweeper(recovery.SweeperConfig{
		Store:     dynamo.New(c.DynamoDB, cfg.Table("IdempotencyTable")),
		Retention: cfg.Retention,
		Logger:    opts.Logger,
		Metrics:   metrics,
		Now:       opts.Now,
	})
	if err != nil {
		return nil, fmt.Errorf("sweeper: %w", err)
	}
	return stream.All(sched.Handle, s.Handle), nil
}
