package receipts

import (
	"fmt"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/oncehq/once/idempotency/stream"
	"github.com/oncehq/once/internal/app"
	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/mail"
)

// Handler returns the receipts function's handler: a Sender of the receipt
// jobs of cfg.OutboxTable's stream through the mail API at cfg.MailURL,
// recording the sends in cfg.OutboxTable and cfg.OrdersTable through
// client. It is an error for cfg.MailURL to be empty.
func Handler(cfg config.Config, client *dynamodb.Client, opts app.Options) (stream.Handler, error) {
	if cfg.MailURL == "" {
		return nil, fmt.Errorf("receipts: %s is not set", config.EnvMailURL)
	}
	opts = opts.WithDefaults(cfg)
	s, err := New(Config{
		DB:      client,
		Outbox:  cfg.OutboxTable,
		Orders:  cfg.OrdersTable,
		Mail:    mail.New(cfg.MailURL, &http.Client{Timeout: mail.DefaultTimeout}),
		Logger:  opts.Logger,
		Metrics: opts.Emitter("receipts"),
		Now:     opts.Now,
	})
	if err != nil {
		return nil, err
	}
	return s.Handle, nil
}
