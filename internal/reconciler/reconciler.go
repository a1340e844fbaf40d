package reconciler

import (
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/idempotency/recovery"
	"github.com/oncehq/once/idempotency/stream"
	"github.com/oncehq/once/internal/app"
	"github.com/oncehq/once/internal/charges"
	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/dynamoclient"
	"github.com/oncehq/once/internal/orders"
	"github.com/oncehq/once/internal/provider"
	"github.com/oncehq/once/internal/refunds"
)

// StoreCallBound is the longest one call of the reconciler's DynamoDB
// client (app.DynamoDB, dynamoclient's defaults) can take to fail, every
// attempt running out its timeout, with the longest backoff between them:
// dynamoclient.CallBound, 3 x 2 s + 2 x 200 ms = 6.4 s (its test holds the
// two equal). A call that succeeds ends sooner.
const StoreCallBound = time.Duration(dynamoclient.DefaultMaxAttempts)*dynamoclient.DefaultTimeout +
	time.Duration(dynamoclient.DefaultMaxAttempts-1)*dynamoclient.DefaultMaxBackoff

// ResolveStoreCalls is the most DynamoDB calls one resolution makes, one
// after another, besides its provider call: an order resumed at
// order_created (orders.Resolver) reads the order before its charge
// (orders.Flow.Reader), commits the phase charge_created after it
// (idempotency.Steps.Advance), and the reconciler then completes the
// record. A charge's or a refund's look-up is followed by one, the write
// that completes or releases the record. (A write refused as too large,
// which the reconciler follows with a smaller one, is refused at once.)
const ResolveStoreCalls = 3

// ResolveTime is the reconciler's recovery.ReconcilerConfig.ResolveTime for
// cfg, the longest one resolution takes: one provider call
// (cfg.ProviderTimeout) and ResolveStoreCalls DynamoDB calls of at most
// StoreCallBound each (5 s + 3 x 6.4 s = 24.2 s with the defaults). A
// record waiting for cfg.ProviderSettle leaves its invocation this much, so
// ResolveTime must stay well under the function's Timeout (60 s in
// template.yaml): at or above it, every delivery of a record waiting for
// the settle defers at once (reconcile_deferred), with no time to wait.
func ResolveTime(cfg config.Config) time.Duration {
	return cfg.ProviderTimeout + ResolveStoreCalls*StoreCallBound
}

// Handler returns the reconciler function's stream handler: the public
// recovery.Reconciler on the idempotency table, through client, with the
// resolvers of the API's External routes (Resolvers). Every External route
// calls the payment provider, so cfg must name it.
func Handler(cfg config.Config, client *dynamodb.Client, opts app.Options) (stream.Handler, error) {
	if cfg.ProviderURL == "" {
		return nil, fmt.Errorf("reconciler: %s is not set", config.EnvProviderURL)
	}
	opts = opts.WithDefaults(cfg)
	resolvers, err := Resolvers(cfg, client, opts)
	if err != nil {
		return nil, err
	}
	r, err := recovery.NewReconciler(recovery.ReconcilerConfig{
		Store:       dynamo.New(client, cfg.Table("IdempotencyTable")),
		Resolvers:   resolvers,
		Settle:      cfg.ProviderSettle,
		ResolveTime: ResolveTime(cfg),
		// No Deliverable: this function links no HTTP adapter
		// (apigw.Deliverable), and every answer its Resolvers rebuild is
		// small (a payment, charge, refund or order, bounded by its
		// request's bounds: kilobytes), far under Lambda's 6 MB.
		Retention: cfg.Retention,
		Logger:    opts.Logger,
		Metrics:   opts.Emitter("reconciler"),
		Now:       opts.Now,
	})
	if err != nil {
		return nil, fmt.Errorf("reconciler: %w", err)
	}
	return r.Handle, nil
}

// Resolvers returns the resolver of each of the API's External routes, by
// route, built from the domain packages with the tables and the provider
// that internal/api gives the routes themselves (its test holds the two to
// the same routes and resolvers). Without cfg.ProviderURL the resolvers
// have no provider and fail to resolve.
func Resolvers(cfg config.Config, client *dynamodb.Client, opts app.Options) (idempotency.Resolvers, error) {
	opts = opts.WithDefaults(cfg)
	// The provider signs its calls with the function's own credentials,
	// those of its DynamoDB client.
	o := client.Options()
	p, err := provider.FromConfig(cfg, o.Credentials, o.Region)
	if err != nil {
		return nil, fmt.Errorf("reconciler: %w", err)
	}
	var chargesProvider charges.Provider
	var refundsProvider refunds.Provider
	var ordersProvider orders.Charger
	if p != nil { // a nil *provider.Client would not be a nil interface
		chargesProvider, refundsProvider, ordersProvider = p, p, p
	}
	timeout, store := cfg.ProviderTimeout, dynamo.New(client, cfg.Table("IdempotencyTable"))
	return idempotency.Resolvers{
		charges.Route: charges.NewResolver(chargesProvider),
		refunds.RouteCreate: refunds.NewResolver(refunds.Tables{
			Refunds:  cfg.Table("RefundsTable"),
			Payments: cfg.Table("PaymentsTable"),
		}, refundsProvider),
		orders.RouteCreate: orders.NewResolver(store, orders.Flow{
			Provider: ordersProvider,
			// The order is read before its charge: one that holds it
			// already is not charged again.
			Reader:  orders.NewTable(client, cfg.Table("OrdersTable")),
			Orders:  cfg.Table("OrdersTable"),
			Outbox:  cfg.Table("OutboxTable"),
			Timeout: timeout,
			// An order too old for the provider to remember its key is
			// left UNKNOWN (orders.ErrKeyRetention), never charged again.
			KeyRetention: cfg.ProviderKeyRetention,
		}, opts.Now),
	}, nil
}
