// Package once wires the idempotency engine for the common case: an
// http.Handler behind API Gateway on AWS Lambda, with its idempotency
// records in DynamoDB. It is all a function needs besides the engine
// (package idempotency), its DynamoDB effects (idempotency/dynamo) and the
// problem answers (idempotency/problem):
//
//	client, _ := once.DynamoDB(ctx)                                   // AWS_REGION, DYNAMODB_ENDPOINT
//	mw, _ := once.Middleware(client, "my-idempotency", idempotency.Config{}) // Tenant from the authorizer
//	mux.Handle("POST /v1/notes", mw.Atomic("POST /v1/notes", notes))
//	once.Start(mux)
//
// The module's packages:
//
//   - idempotency: the engine (keys, fingerprints, records, the Store
//     interface, the Middleware and its modes, effects, resolvers, phases).
//   - idempotency/dynamo: the DynamoDB store and its effects.
//   - idempotency/memory, idempotency/storetest: an in-memory store and the
//     conformance suite every store passes.
//   - idempotency/problem: errors that carry their HTTP answer (RFC 9457).
//   - idempotency/apigw: API Gateway proxy events to http.Handler, and the
//     tenant from the authorizer.
//   - idempotency/recovery, idempotency/stream: the stream- and
//     queue-triggered functions that leave no key stuck (sweeper,
//     reconciler, scheduled lease checks).
//   - idempotency/recovery/sqsqueue: the lease checks' queue on SQS.
package once

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/apigw"
	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/internal/dynamoclient"
)

// DefaultCacheEntries and DefaultCacheBytes bound the replay cache
// Middleware gives a Config without one.
const (
	DefaultCacheEntries = 10_000
	DefaultCacheBytes   = 16 << 20
)

// DynamoDB returns a DynamoDB client configured from the environment as the
// AWS SDK does (AWS_REGION, the function's role), with bounded retries and
// timeouts so that a request fails in time rather than outlive its lease,
// and the SDK's own log lines (rare warnings) written as structured lines:
// to slog's default logger when the program has set one, else as JSON on
// stderr.
// DYNAMODB_ENDPOINT, when set, points it at DynamoDB Local or LocalStack,
// with dummy credentials (and us-east-1 without AWS_REGION, at a loopback
// address, localhost, localstack or host.docker.internal), or at an AWS
// endpoint (a host under amazonaws.com, api.aws, ...: a VPC or FIPS
// endpoint) with the usual ones and the environment's region. A
// DYNAMODB_ENDPOINT that is not an absolute http(s) URL, or no region at
// all, is an error naming the variables.
func DynamoDB(ctx context.Context) (*dynamodb.Client, error) {
	endpoint, region := os.Getenv("DYNAMODB_ENDPOINT"), os.Getenv("AWS_REGION")
	cfg, err := dynamoclient.Config(ctx, dynamoclient.Options{Endpoint: endpoint, Region: region})
	if err != nil {
		return nil, fmt.Errorf("once: DynamoDB client (DYNAMODB_ENDPOINT=%q, AWS_REGION=%q): %w", endpoint, region, err)
	}
	return dynamoclient.New(cfg, endpoint), nil
}

// Middleware returns the idempotency middleware for cfg with its records in
// the DynamoDB table through client (cfg.Store is replaced), the caller's
// tenant read from the API Gateway authorizer's context when cfg.Tenant is
// nil (apigw.Tenant), answers Lambda cannot return refused before they are
// stored when cfg.Deliverable is nil (apigw.Deliverable: Start serves the
// handler through Lambda; a handler served some other way and not bound by
// Lambda's 6 MB sets its own, func(idempotency.Response) error { return nil }
// for none), and a replay cache when cfg.Cache is nil. A nil client
// or an empty table name (an environment variable not set) is an error, at
// start-up rather than at every request.
func Middleware(client *dynamodb.Client, table string, cfg idempotency.Config) (*idempotency.Middleware, error) {
	var errs []error
	if client == nil {
		errs = append(errs, errors.New("once: Middleware: the DynamoDB client is nil"))
	}
	if table == "" {
		errs = append(errs, errors.New("once: Middleware: the idempotency table name is empty"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	cfg.Store = dynamo.New(client, table)
	if cfg.Tenant == nil {
		cfg.Tenant = apigw.Tenant
	}
	if cfg.Deliverable == nil {
		cfg.Deliverable = apigw.Deliverable
	}
	if cfg.Cache == nil {
		cfg.Cache = idempotency.NewCache(DefaultCacheEntries, DefaultCacheBytes)
	}
	return idempotency.New(cfg)
}

// Start serves h for API Gateway (REST API and HTTP API proxy events, and
// function URLs) in the Lambda runtime; it returns only when the runtime
// ends the process.
func Start(h http.Handler) { lambda.Start(apigw.NewLambda(h)) }
