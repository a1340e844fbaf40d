package app

import (
	"fmt"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/stream"
	"github.com/oncehq/once/internal/sweeper"
)

// Sweeper returns the sweeper function's stream handler: abandoned
// reservations of the idempotency table, through client.
func Sweeper(cfg config.Config, client *dynamodb.Client, opts Options) (stream.Handler, error) {
	opts = opts.withDefaults(cfg)
	s, err := sweeper.New(sweeper.Config{
		Store:     dynamo.New(client, cfg.IdempotencyTable),
		Retention: cfg.Retention,
		Logger:    opts.Logger,
		Metrics:   opts.emitter("sweeper"),
		Now:       opts.Now,
	})
	if err != nil {
		return nil, fmt.Errorf("app: %w", err)
	}
	return s.Handle, nil
}
