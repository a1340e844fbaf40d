package audit

import (
	"time"

	"github.com/oncehq/once/internal/app"
	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/dynamoclient"
)

// Function returns the auditor function's Auditor, as functions/auditor
// builds it (and the event tests): on cfg's IdempotencyTable through db,
// with the package's defaults, logging and emitting its metrics
// (Service=auditor) as opts says.
func Function(cfg config.Config, db Scanner, opts app.Options) (*Auditor, error) {
	opts = opts.WithDefaults(cfg)
	return New(Config{
		DB:        db,
		TableName: cfg.Table("IdempotencyTable"),
		Logger:    opts.Logger,
		Metrics:   opts.Emitter("auditor"),
		Now:       opts.Now,
	})
}

// The DynamoDB client's options of the auditor function (ClientOptions).
// A Scan page reads up to 1 MB, and may take seconds under load or
// throttling: the api's defaults (2 s an attempt, 3 attempts, 200 ms of
// backoff), made to answer a client within its function's timeout, would
// fail the run on one slow page. A run has minutes, and its last page,
// started with Margin left, must end (CallBound, 58 s) before the deadline.
const (
	ClientTimeout     = 10 * time.Second
	ClientMaxAttempts = 5
	ClientMaxBackoff  = 2 * time.Second
)

// ClientOptions returns the auditor function's DynamoDB client options
// (ClientTimeout, ClientMaxAttempts, ClientMaxBackoff), as functions/auditor
// builds its client; TestAuditorOptions checks that
// a page started with Margin left ends within it.
func ClientOptions() dynamoclient.Options {
	return dynamoclient.Options{Timeout: ClientTimeout, MaxAttempts: ClientMaxAttempts, MaxBackoff: ClientMaxBackoff}
}
