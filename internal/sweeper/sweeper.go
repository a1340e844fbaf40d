package sweeper

import (
	"fmt"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/idempotency/recovery"
	"github.com/oncehq/once/idempotency/stream"
	"github.com/oncehq/once/internal/app"
	"github.com/oncehq/once/internal/config"
)

// Handler returns the sweeper function's stream handler: recovery.Sweeper on
// the idempotency table, through client.
func Handler(cfg config.Config, client *dynamodb.Client, opts app.Options) (stream.Handler, error) {
	opts = opts.WithDefaults(cfg)
	s, err := recovery.NewSweeper(recovery.SweeperConfig{
		Store:     dynamo.New(client, cfg.IdempotencyTable),
		Retention: cfg.Retention,
		Logger:    opts.Logger,
		Metrics:   opts.Emitter("sweeper"),
		Now:       opts.Now,
	})
	if err != nil {
		return nil, fmt.Errorf("sweeper: %w", err)
	}
	return s.Handle, nil
}
