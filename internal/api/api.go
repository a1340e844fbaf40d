// Package api composes the api function: the idempotency middleware over the
// DynamoDB store, every endpoint of the demo domains on the public engine,
// and the router. It lists the routes in one place (routes): the api
// function serves them, and internal/reconciler's test holds the reconciler
// function's resolvers to the External routes among them (Resolvers).
package api

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/apigw"
	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/internal/app"
	"github.com/oncehq/once/internal/charges"
	"github.com/oncehq/once/internal/charges/chargeshttp"
	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/fault"
	"github.com/oncehq/once/internal/httpapi"
	"github.com/oncehq/once/internal/orders"
	"github.com/oncehq/once/internal/orders/ordershttp"
	"github.com/oncehq/once/internal/payments"
	"github.com/oncehq/once/internal/payments/paymentshttp"
	"github.com/oncehq/once/internal/provider"
	"github.com/oncehq/once/internal/refunds"
	"github.com/oncehq/once/internal/refunds/refundshttp"
)

// The bounds of the api function's replay cache (idempotency.Cache): a warm
// function answers a replay of a key it has seen completed without a
// DynamoDB call.
const (
	ReplayCacheEntries = 10_000
	ReplayCacheBytes   = 16 << 20
)

// Handler returns the api function's handler: the API over the idempotency
// engine, backed by DynamoDB through client. The charges, refunds and orders routes
// call the provider at cfg.ProviderURL, each call bounded by
// cfg.ProviderTimeout; without a ProviderURL they answer 503
// provider_unavailable.
func Handler(cfg config.Config, client *dynamodb.Client, opts app.Options) (http.Handler, error) {
	opts = opts.WithDefaults(cfg)
	var hook func(context.Context, string)
	if cfg.FaultInjection {
		hook = fault.Check
	}
	store := dynamo.New(client, cfg.Table("IdempotencyTable"))
	mw, err := idempotency.New(idempotency.Config{
		Store:       store,
		Tenant:      apigw.Tenant,
		Deliverable: apigw.Deliverable, // the api function answers through Lambda
		OnError:     httpapi.WriteError,
		Retention:   cfg.Retention,
		Lease:       cfg.Lease,
		Now:         opts.Now,
		Hook:        hook,
		Cache:       idempotency.NewCache(ReplayCacheEntries, ReplayCacheBytes),
		Logger:      opts.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("api: %w", err)
	}
	d, err := newDeps(cfg, client, store, opts)
	if err != nil {
		return nil, err
	}
	return httpapi.NewHandler(httpapi.Deps{
		Routes:  routes(mw, d),
		Tenant:  apigw.Tenant,
		Logger:  opts.Logger,
		Metrics: opts.Emitter("api"),
		Fault:   cfg.FaultInjection,
	}), nil
}

// Resolvers returns the resolvers the API's External routes are wrapped
// with, by route: the same routes the api function serves, wired the same
// way (only the middleware's own settings, which resolvers do not use,
// differ). The reconciler function builds its own from the domain packages
// (reconciler.Resolvers), without the HTTP layer; its test holds them to
// these.
func Resolvers(cfg config.Config, client *dynamodb.Client, opts app.Options) (idempotency.Resolvers, error) {
	store := dynamo.New(client, cfg.Table("IdempotencyTable"))
	mw, err := idempotency.New(idempotency.Config{Store: store, Tenant: apigw.Tenant})
	if err != nil {
		return nil, fmt.Errorf("api: %w", err)
	}
	d, err := newDeps(cfg, client, store, opts.WithDefaults(cfg))
	if err != nil {
		return nil, err
	}
	routes(mw, d)
	return mw.Resolvers(), nil
}

// deps are what the routes need besides the middleware. A route names its
// tables by their logical IDs in template.yaml (d.cfg.Table("RefundsTable")):
// a new table needs no field here, and internal/deploytest derives the
// variables and grants each function needs from those calls.
type deps struct {
	cfg      config.Config
	client   *dynamodb.Client
	store    idempotency.Store // the middleware's, for resolvers that resume phases
	provider *provider.Client
	now      func() time.Time
}

func newDeps(cfg config.Config, client *dynamodb.Client, store idempotency.Store, opts app.Options) (deps, error) {
	d := deps{cfg: cfg, client: client, store: store, now: opts.Now}
	// The provider signs its calls with the function's own credentials,
	// those of its DynamoDB client.
	o := client.Options()
	p, err := provider.FromConfig(cfg, o.Credentials, o.Region)
	if err != nil {
		return deps{}, fmt.Errorf("api: %w", err)
	}
	d.provider = p
	return d, nil
}

// routes lists every endpoint of the API.
func routes(mw *idempotency.Middleware, d deps) []httpapi.Route {
	var chargesProvider charges.Provider
	var refundsProvider refunds.Provider
	if d.provider != nil { // a nil *provider.Client would not be a nil interface
		chargesProvider, refundsProvider = d.provider, d.provider
	}
	timeout, paymentsTable, ordersTable := d.cfg.ProviderTimeout, d.cfg.Table("PaymentsTable"), d.cfg.Table("OrdersTable")
	var rs []httpapi.Route
	rs = append(rs, paymentshttp.Routes(mw, paymentsTable, payments.NewTable(d.client, paymentsTable), d.now)...)
	rs = append(rs, chargeshttp.Routes(mw, chargesProvider, timeout)...)
	rs = append(rs, refundshttp.Routes(mw, refundshttp.Config{
		Tables:   refunds.Tables{Refunds: d.cfg.Table("RefundsTable"), Payments: paymentsTable},
		DB:       d.client,
		Provider: refundsProvider,
		Timeout:  timeout,
	})...)
	od := ordershttp.Deps{
		Store: d.store, Orders: ordersTable, Outbox: d.cfg.Table("OutboxTable"),
		Timeout: timeout, KeyRetention: d.cfg.ProviderKeyRetention, Now: d.now,
	}
	if d.provider != nil {
		od.Provider = d.provider
	}
	if d.client != nil {
		od.Reader = orders.NewTable(d.client, ordersTable)
	}
	rs = append(rs, ordershttp.Routes(mw, od)...)
	return rs
}

// Patterns lists the ServeMux pattern of every route the API serves, in
// order: what API Gateway must forward to the api function (internal/
// deploytest holds template.yaml to it).
func Patterns() []string {
	// A Store that is never called (nothing is served): only the routes are
	// read. It has a client and a table name, as idempotency.New requires.
	idle := dynamo.New(dynamodb.New(dynamodb.Options{}), "patterns")
	mw, err := idempotency.New(idempotency.Config{Store: idle, Tenant: apigw.Tenant})
	if err != nil {
		panic(err) // unreachable: Store and Tenant are set
	}
	var out []string
	for _, rt := range routes(mw, deps{}) {
		out = append(out, rt.Pattern)
	}
	return out
}
