package simulator

import (
	"net/http"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/oncehq/once/internal/app"
	"github.com/oncehq/once/internal/config"
)

// Handler returns the provider function's handler: the simulator, keeping
// its state in the ProviderTable through client. Serve it with
// apigw.NewLambda, as functions/provider does: it takes the function URL's
// events (payload 2.0) as well as API Gateway's. opts.Metrics and opts.Now
// are not used.
func Handler(cfg config.Config, client *dynamodb.Client, opts app.Options) http.Handler {
	opts = opts.WithDefaults(cfg)
	return New(Options{DB: client, Table: cfg.Table("ProviderTable"), Logger: opts.Logger})
}
