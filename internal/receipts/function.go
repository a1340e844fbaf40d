package receipts

import (
	"context"
	"fmt"
	"net/http"

	"github.com/oncehq/once/idempotency/stream"
	"github.com/oncehq/once/internal/app"
	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/mail"
	"github.com/oncehq/once/internal/queue"
	"github.com/oncehq/once/internal/sigv4"
)

// Handler returns the receipts function's handler: a Sender of the receipt
// jobs of the OutboxTable's stream through the mail API at cfg.MailURL,
// recording the sends in the OutboxTable and the OrdersTable, and sending
// the jobs whose attempt did not send to cfg.ReceiptRetryQueue. With
// cfg.MailAuth config.ProviderAuthIAM every mail call is signed (SigV4,
// service lambda) with the DynamoDB client's credentials: the simulator's
// function URL. It is an error for cfg.MailURL to be empty.
func Handler(ctx context.Context, cfg config.Config, c queue.Clients, opts app.Options) (stream.Handler, error) {
	s, err := build(ctx, cfg, c, opts, "receipts", nil)
	if err != nil {
		return nil, err
	}
	return s.Handle, nil
}

// RetryHandler returns the resender function's handler: it tries the
// receipts of cfg.ReceiptRetryQueue again, as Handler does the stream's,
// until cfg.ReceiptAttempts attempts, then sends them to
// cfg.ReceiptRetryDLQ.
func RetryHandler(ctx context.Context, cfg config.Config, c queue.Clients, opts app.Options) (queue.Handler, error) {
	dead, err := queue.Open(ctx, c, cfg.ReceiptRetryDLQ, config.EnvReceiptRetryDLQ)
	if err != nil {
		return nil, fmt.Errorf("resender: %w", err)
	}
	s, err := build(ctx, cfg, c, opts, "resender", dead)
	if err != nil {
		return nil, err
	}
	return s.HandleRetries, nil
}

// build builds the Sender of the function name.
func build(ctx context.Context, cfg config.Config, c queue.Clients, opts app.Options, name string, dead Queue) (*Sender, error) {
	if cfg.MailURL == "" {
		return nil, fmt.Errorf("%s: %s is not set", name, config.EnvMailURL)
	}
	hc := &http.Client{Timeout: mail.DefaultTimeout}
	if cfg.MailAuth == config.ProviderAuthIAM {
		o := c.DynamoDB.Options()
		if o.Credentials == nil || o.Region == "" {
			return nil, fmt.Errorf("%s: %s=%s needs AWS credentials and a region", name, config.EnvMailAuth, cfg.MailAuth)
		}
		hc.Transport = sigv4.NewTransport(nil, o.Credentials, o.Region, sigv4.ServiceLambda)
	}
	retries, err := queue.Open(ctx, c, cfg.ReceiptRetryQueue, config.EnvReceiptRetryQueue)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	opts = opts.WithDefaults(cfg)
	s, err := New(Config{
		DB:          c.DynamoDB,
		Outbox:      cfg.Table("OutboxTable"),
		Orders:      cfg.Table("OrdersTable"),
		Mail:        mail.New(cfg.MailURL, hc),
		Retries:     retries,
		DeadLetters: dead,
		MaxAttempts: cfg.ReceiptAttempts,
		Logger:      opts.Logger,
		Metrics:     opts.Emitter(name),
		Now:         opts.Now,
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return s, nil
}
