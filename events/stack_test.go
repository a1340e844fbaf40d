package events_test

import (
	"bytes"
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"

	apifn "github.com/oncehq/once/internal/api"
	"github.com/oncehq/once/internal/audit"
	"github.com/oncehq/once/internal/checker"
	"github.com/oncehq/once/internal/provider/simulator"
	"github.com/oncehq/once/internal/receipts"
	"github.com/oncehq/once/internal/reconciler"
	"github.com/oncehq/once/internal/sweeper"
	"github.com/oncehq/once/internal/worker"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/oncehq/once/idempotency/apigw"
	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/idempotency/stream"
	"github.com/oncehq/once/internal/app"
	"github.com/oncehq/once/internal/auth"
	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/dynamoclient"
	"github.com/oncehq/once/internal/dynamotest"
	"github.com/oncehq/once/internal/lambdatest"
	"github.com/oncehq/once/internal/payments"
	"github.com/oncehq/once/internal/provider"
	"github.com/oncehq/once/internal/queue"
	"github.com/oncehq/once/internal/sqstest"
)

// Logical IDs of the functions in template.yaml.
const (
	apiFunction        = "ApiFunction"
	authorizerFunction = "AuthorizerFunction"
	workerFunction     = "WorkerFunction"
	sweeperFunction    = "SweeperFunction"
	reconcilerFunction = "ReconcilerFunction"
	checkerFunction    = "CheckerFunction"
	retrierFunction    = "RetrierFunction"
	receiptsFunction   = "ReceiptsFunction"
	resenderFunction   = "ResenderFunction"
	providerFunction   = "ProviderFunction"
	auditorFunction    = "AuditorFunction"
)

// stack is every function's handler, built as its functions/<name>/main.go
// builds it and wrapped as lambda.Start wraps it, on per-test DynamoDB Local
// tables, with the provider simulator behind ONCE_PROVIDER_URL and
// ONCE_MAIL_URL.
type stack struct {
	names  dynamotest.Names
	client *dynamodb.Client // the test's own, for setup and checks
	// provider is a client of the simulator, for the test's own charges and
	// lookups; simURL is the simulator's base URL.
	provider *provider.Client
	simURL   string
	// sqs reaches the functions' queues; checkQueue is the check queue's URL,
	// receiptRetries and receiptDLQ the receipt retry queue's and its
	// dead-letter queue's.
	sqs                           *sqs.Client
	checkQueue                    string
	receiptRetryQueue, receiptDLQ string
	// handlers and metrics are by function logical ID.
	handlers map[string]lambda.Handler
	metrics  map[string]*lambdatest.Buffer
}

func newStack(t *testing.T) *stack {
	t.Helper()
	client := dynamotest.Client(t)
	names := dynamotest.Tables(t, client)
	srv := httptest.NewServer(simulator.New(simulator.Options{DB: client, Table: names.ByLogicalID["ProviderTable"]}))
	t.Cleanup(srv.Close)
	env := names.Env()
	maps.Copy(env, map[string]string{
		config.EnvProviderURL:      srv.URL,
		config.EnvMailURL:          srv.URL,
		config.EnvProviderTimeout:  "2s",
		config.EnvProviderSettle:   "2s",
		config.EnvDynamoDBEndpoint: dynamotest.Endpoint(t),
		config.EnvSQSEndpoint:      sqstest.Endpoint(t),
		config.EnvLogLevel:         "debug",
		// The payments of the worker's events were created at a fixed
		// time: a window that still holds them (the worker charges
		// nothing after it).
		config.EnvWorkerRetryWindow: "876000h",
		// The order of reconciler-unknown-order.json was created at a
		// fixed time too: a provider that remembers its key that long (the
		// simulator never forgets one), or the orders Resolver would leave
		// it to an operator (orders.ErrKeyRetention, which internal/e2e's
		// TestOrdersKeyRetention covers).
		config.EnvProviderKeyRetention: "876000h",
	})
	cfg, err := config.FromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	s := &stack{
		names:    names,
		client:   client,
		provider: provider.New(srv.URL, nil),
		simURL:   srv.URL,
		handlers: map[string]lambda.Handler{},
		metrics:  map[string]*lambdatest.Buffer{},
	}
	logger := app.Logger(t.Output(), cfg.LogLevel)
	opts := func(fn string) app.Options {
		s.metrics[fn] = &lambdatest.Buffer{}
		return app.Options{Logger: logger.With("function", fn), Metrics: s.metrics[fn]}
	}

	// functions/api, functions/reconciler.
	fnClient, err := app.DynamoDB(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	api, err := apifn.Handler(cfg, fnClient, opts(apiFunction))
	if err != nil {
		t.Fatal(err)
	}
	s.handlers[apiFunction] = apigw.NewLambda(api)
	reconcile, err := reconciler.Handler(cfg, fnClient, opts(reconcilerFunction))
	if err != nil {
		t.Fatalf("%s: %v", reconcilerFunction, err)
	}
	s.handlers[reconcilerFunction] = lambda.NewHandler(reconcile)
	// functions/checker, functions/retrier and functions/resender; worker,
	// sweeper and receipts send to queues too.
	clients := queue.Clients{DynamoDB: fnClient, SQS: sqstest.Client(t, cfg.SQSEndpoint)}
	for _, q := range []string{cfg.CheckQueue, cfg.WorkerRetryQueue, cfg.ReceiptRetryQueue, cfg.ReceiptRetryDLQ} {
		sqstest.Queue(t, clients.SQS, q, nil)
	}
	s.sqs = clients.SQS
	for v, q := range map[*string]string{&s.checkQueue: cfg.CheckQueue, &s.receiptRetryQueue: cfg.ReceiptRetryQueue, &s.receiptDLQ: cfg.ReceiptRetryDLQ} {
		if *v, err = queue.Resolve(t.Context(), clients.SQS, q); err != nil {
			t.Fatal(err)
		}
	}
	for fn, build := range map[string]queue.Builder[stream.Handler]{
		workerFunction:   worker.Handler,
		sweeperFunction:  sweeper.Handler,
		receiptsFunction: receipts.Handler,
	} {
		h, err := build(t.Context(), cfg, clients, opts(fn))
		if err != nil {
			t.Fatalf("%s: %v", fn, err)
		}
		s.handlers[fn] = lambda.NewHandler(h)
	}
	for fn, build := range map[string]queue.Builder[queue.Handler]{
		checkerFunction:  checker.Handler,
		retrierFunction:  worker.RetryHandler,
		resenderFunction: receipts.RetryHandler,
	} {
		h, err := build(t.Context(), cfg, clients, opts(fn))
		if err != nil {
			t.Fatalf("%s: %v", fn, err)
		}
		s.handlers[fn] = lambda.NewHandler(h)
	}

	// functions/auditor.
	auditor, err := audit.Function(cfg, fnClient, opts(auditorFunction))
	if err != nil {
		t.Fatalf("%s: %v", auditorFunction, err)
	}
	s.handlers[auditorFunction] = lambda.NewHandler(auditor.Handle)

	// functions/provider.
	s.handlers[providerFunction] = apigw.NewLambda(simulator.Handler(cfg, fnClient, opts(providerFunction)))

	// functions/authorizer.
	awsCfg, err := dynamoclient.Config(t.Context(), dynamoclient.Options{Endpoint: cfg.DynamoDBEndpoint, Region: cfg.Region})
	if err != nil {
		t.Fatal(err)
	}
	keys := auth.NewKeys(dynamoclient.New(awsCfg, cfg.DynamoDBEndpoint), cfg.Table("ApiKeysTable"))
	s.handlers[authorizerFunction] = lambda.NewHandler(auth.NewAuthorizer(keys, logger.With("function", authorizerFunction)).Handle)
	return s
}

// invoke feeds the event file to fn's handler as the Lambda runtime does and
// returns the response payload.
func (s *stack) invoke(t *testing.T, fn, file string) ([]byte, error) {
	t.Helper()
	out, err := s.handlers[fn].Invoke(t.Context(), readFile(t, file))
	// The runtime reuses its output buffer on the next invocation.
	return bytes.Clone(out), err
}

// proxyResponse is an API Gateway proxy integration response of either
// payload version.
type proxyResponse struct {
	StatusCode        int                 `json:"statusCode"`
	Headers           map[string]string   `json:"headers"`
	MultiValueHeaders map[string][]string `json:"multiValueHeaders"`
	Body              string              `json:"body"`
	IsBase64Encoded   bool                `json:"isBase64Encoded"`
}

// header returns the response's value of the named header.
func (r proxyResponse) header(name string) string {
	for k, v := range r.Headers {
		if strings.EqualFold(k, name) {
			return v
		}
	}
	for k, vs := range r.MultiValueHeaders {
		if strings.EqualFold(k, name) && len(vs) > 0 {
			return vs[0]
		}
	}
	return ""
}

// problemCode returns the code of a problem+json body.
func (r proxyResponse) problemCode(t *testing.T) string {
	t.Helper()
	if ct := r.header("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type = %q, want application/problem+json", ct)
	}
	var p struct {
		Code string `json:"code"`
	}
	if err := json.Unmarshal([]byte(r.Body), &p); err != nil {
		t.Fatalf("problem body %q: %v", r.Body, err)
	}
	return p.Code
}

// api feeds the API Gateway event file to the api function.
func (s *stack) api(t *testing.T, file string) proxyResponse {
	t.Helper()
	out, err := s.invoke(t, apiFunction, file)
	if err != nil {
		t.Fatalf("%s: invoke error = %v, want a response", file, err)
	}
	var r proxyResponse
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("%s: response %s: %v", file, out, err)
	}
	if r.IsBase64Encoded {
		t.Fatalf("%s: response body is base64; the API only writes JSON", file)
	}
	return r
}

// functionURL feeds the function URL event file to the provider function.
func (s *stack) functionURL(t *testing.T, file string) proxyResponse {
	t.Helper()
	out, err := s.invoke(t, providerFunction, file)
	if err != nil {
		t.Fatalf("%s: invoke error = %v, want a response", file, err)
	}
	var r proxyResponse
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("%s: response %s: %v", file, out, err)
	}
	return r
}

// authorize feeds the authorizer event file to the authorizer function.
func (s *stack) authorize(t *testing.T, file string) (events.APIGatewayCustomAuthorizerResponse, error) {
	t.Helper()
	out, err := s.invoke(t, authorizerFunction, file)
	if err != nil {
		return events.APIGatewayCustomAuthorizerResponse{}, err
	}
	var r events.APIGatewayCustomAuthorizerResponse
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("%s: response %s: %v", file, out, err)
	}
	return r, nil
}

// sqsEvent feeds the SQS event file to fn and returns its response.
func (s *stack) sqsEvent(t *testing.T, fn, file string) events.SQSEventResponse {
	t.Helper()
	out, err := s.invoke(t, fn, file)
	if err != nil {
		t.Fatalf("%s: invoke error = %v, want nil (failures are per message)", file, err)
	}
	var r events.SQSEventResponse
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("%s: response %s: %v", file, out, err)
	}
	return r
}

// stream writes the state the stream event file leaves its table in (each
// record's new image; a removed item stays absent), then feeds the file to
// fn, checking that the handler returns no error: stream handlers report
// failures per record.
func (s *stack) stream(t *testing.T, fn, file string) events.DynamoDBEventResponse {
	t.Helper()
	table := map[string]string{
		workerFunction:     s.names.ByLogicalID["PaymentsTable"],
		sweeperFunction:    s.names.ByLogicalID["IdempotencyTable"],
		reconcilerFunction: s.names.ByLogicalID["IdempotencyTable"],
		receiptsFunction:   s.names.ByLogicalID["OutboxTable"],
	}[fn]
	for _, rec := range streamEvent(t, file).Records {
		if rec.Change.NewImage == nil {
			continue
		}
		if _, err := s.client.PutItem(t.Context(), &dynamodb.PutItemInput{
			TableName: aws.String(table),
			Item:      stream.ToSDK(rec.Change.NewImage),
		}); err != nil {
			t.Fatalf("%s: write the new image of %s: %v", file, rec.EventID, err)
		}
	}
	out, err := s.invoke(t, fn, file)
	if err != nil {
		t.Fatalf("%s: invoke error = %v, want nil (failures are per record)", file, err)
	}
	var r events.DynamoDBEventResponse
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("%s: response %s: %v", file, out, err)
	}
	return r
}

// count returns the number of items in table.
func (s *stack) count(t *testing.T, table string) int32 {
	t.Helper()
	out, err := s.client.Scan(t.Context(), &dynamodb.ScanInput{
		TableName:      aws.String(table),
		Select:         "COUNT",
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		t.Fatal(err)
	}
	return out.Count
}

// charges returns how many charges the simulator made under key.
func (s *stack) charges(t *testing.T, key string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet,
		s.simURL+"/v1/_test/charges?idempotency_key="+url.QueryEscape(key), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Count int `json:"count"`
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("simulator count(%q): status %d", key, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	return body.Count
}

// payment returns tenant's payment id as stored.
func (s *stack) payment(t *testing.T, tenant, id string) payments.Payment {
	t.Helper()
	p, err := payments.NewTable(s.client, s.names.ByLogicalID["PaymentsTable"]).Get(t.Context(), tenant, id)
	if err != nil {
		t.Fatalf("payment %s of %s: %v", id, tenant, err)
	}
	return p
}

// store is the idempotency store on the test's table.
func (s *stack) store() *dynamo.Store {
	return dynamo.New(s.client, s.names.ByLogicalID["IdempotencyTable"])
}

// seedKeys stores the devstack's API keys (auth.DefaultDevAPIKeys).
func (s *stack) seedKeys(t *testing.T) {
	t.Helper()
	pairs, err := auth.ParsePairs(auth.DefaultDevAPIKeys)
	if err != nil {
		t.Fatal(err)
	}
	if err := auth.Seed(t.Context(), s.client, s.names.ByLogicalID["ApiKeysTable"], pairs); err != nil {
		t.Fatal(err)
	}
}

// readFile returns the content of an event file.
func readFile(t *testing.T, file string) []byte {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// streamEvent decodes a stream event file as Lambda's runtime would.
func streamEvent(t *testing.T, file string) events.DynamoDBEvent {
	t.Helper()
	var ev events.DynamoDBEvent
	if err := json.Unmarshal(readFile(t, file), &ev); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return ev
}
