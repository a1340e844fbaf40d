package audit

import (
	"github.com/oncehq/once/internal/app"
	"github.com/oncehq/once/internal/config"
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
