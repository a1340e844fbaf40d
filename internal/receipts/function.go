package receipts

import (
	"fmt"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/oncehq/once/idempotency/stream"
	"github.com/oncehq/once/internal/app"
	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/mail"
	"github.com/oncehq/once/internal/sigv4"
)

// Handler returns the receipts function's handler: a Sender of the receipt
// jobs of the OutboxTable's stream through the mail API at cfg.MailURL,
// recording the sends in the OutboxTable and the OrdersTable through
// client. With cfg.MailAuth config.ProviderAuthIAM every mail call is
// signed (SigV4, service lambda) with client's credentials: the simulator's
// function URL. It is an error for cfg.MailURL to be empty.
func Handler(cfg config.Config, client *dynamodb.Client, opts app.Options) (stream.Handler, error) {
	if cfg.MailURL == "" {
		return nil, fmt.Errorf("receipts: %s is not set", config.EnvMailURL)
	}
	hc := &http.Client{Timeout: mail.DefaultTimeout}
	if cfg.MailAuth == config.ProviderAuthIAM {
		o := client.Options()
		if o.Credentials == nil || o.Region == "" {
			return nil, fmt.Errorf("receipts: %s=%s needs AWS credentials and a region", config.EnvMailAuth, cfg.MailAuth)
		}
		hc.Transport = sigv4.NewTransport(nil, o.Credentials, o.Region, sigv4.ServiceLambda)
	}
	opts = opts.WithDefaults(cfg)
	s, err := New(Config{
		DB:      client,
		Outbox:  cfg.Table("OutboxTable"),
		Orders:  cfg.Table("OrdersTable"),
		Mail:    mail.New(cfg.MailURL, hc),
		Logger:  opts.Logger,
		Metrics: opts.Emitter("receipts"),
		Now:     opts.Now,
	})
	if err != nil {
		return nil, err
	}
	return s.Handle, nil
}
