package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oncehq/once/idempotency/apigw"
	apifn "github.com/oncehq/once/internal/api"
	"github.com/oncehq/once/internal/fault"
	"github.com/oncehq/once/internal/lambdaenv"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/internal/app"
	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/dynamotest"
	"github.com/oncehq/once/internal/lambdatest"
	"github.com/oncehq/once/internal/payments"
	"github.com/oncehq/once/internal/provider"
	"github.com/oncehq/once/internal/provider/simulator"
)

// stack is the api function wired as in production (app.API), served through
// the Lambda adapter, against per-test DynamoDB Local tables, with the
// provider simulator (on the test's ProviderTable) behind ONCE_PROVIDER_URL.
type stack struct {
	names  dynamotest.Names
	client *dynamodb.Client // uncounted, for the tests' own reads
	calls  *opCounter       // DynamoDB operations made by the function
	// mu guards invoke, which restart replaces.
	mu     sync.Mutex
	invoke func(context.Context, json.RawMessage) (json.RawMessage, error)
	// restart replaces the function with a new instance (a cold start: an
	// empty replay cache), on the same tables. A crash does it too: the
	// runtime ends the process after a panic.
	restart func()
	logs    *lambdatest.Buffer
	metrics *lambdatest.Buffer
	clock   *clock
	cfg     config.Config
	// sim is the provider simulator the function charges, over HTTP;
	// provider is a client of it for the tests' own lookups.
	sim      *simulator.Server
	provider *provider.Client
}

type stackOption func(*stackSetup)

type stackSetup struct {
	cfg  config.Config
	wrap func(s *stack, api http.Handler) http.Handler
	// client, when set, replaces the function's DynamoDB client.
	client func(t testing.TB, base *dynamodb.Client) *dynamodb.Client
	// sim configures the provider simulator.
	sim simulator.Options
	// simWrap, when set, wraps the simulator's handler.
	simWrap func(http.Handler) http.Handler
}

func withConfig(f func(*config.Config)) stackOption {
	return func(s *stackSetup) { f(&s.cfg) }
}

func newStack(t testing.TB, opts ...stackOption) *stack {
	t.Helper()
	base := dynamotest.Client(t)
	names := dynamotest.Tables(t, base)
	env := names.Env()
	env[config.EnvDynamoDBEndpoint] = dynamotest.Endpoint(t)
	cfg, err := config.FromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	setup := stackSetup{cfg: cfg, sim: simulator.Options{SlowDelay: 300 * time.Millisecond, HoldFor: 10 * time.Second}}
	for _, o := range opts {
		o(&setup)
	}
	setup.sim.DB, setup.sim.Table = base, names.ByLogicalID["ProviderTable"]
	sim := simulator.New(setup.sim)
	var simHandler http.Handler = sim
	if setup.simWrap != nil {
		simHandler = setup.simWrap(sim)
	}
	srv := httptest.NewServer(simHandler)
	t.Cleanup(srv.Close)
	setup.cfg.ProviderURL = srv.URL
	s := &stack{
		names:    names,
		client:   base,
		calls:    &opCounter{ops: map[string]int{}},
		logs:     &lambdatest.Buffer{},
		metrics:  &lambdatest.Buffer{},
		clock:    &clock{t: time.Now()},
		cfg:      setup.cfg,
		sim:      sim,
		provider: provider.New(srv.URL, nil),
	}
	fnClient := base
	if setup.client != nil {
		fnClient = setup.client(t, base)
	}
	fnClient = s.calls.wrap(fnClient)
	s.restart = func() {
		api, err := apifn.Handler(setup.cfg, fnClient, app.Options{
			Logger:  app.Logger(s.logs, setup.cfg.LogLevel),
			Metrics: s.metrics,
			Now:     s.clock.Now,
		})
		if err != nil {
			t.Fatal(err)
		}
		if setup.wrap != nil {
			api = setup.wrap(s, api)
		}
		// Its runtime: a panic is the invocation's function error, as
		// aws-lambda-go reports it. Every environment serves this instance,
		// so that concurrent invocations share its replay cache.
		fn := lambdaenv.New("api", func() (any, error) { return apigw.NewLambda(api), nil })
		s.mu.Lock()
		defer s.mu.Unlock()
		s.invoke = func(ctx context.Context, payload json.RawMessage) (json.RawMessage, error) {
			return fn.Invoke(ctx, payload)
		}
	}
	s.restart()
	return s
}

// clock is a settable time source; it starts at the real time.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// opCounter counts DynamoDB operations at the HTTP transport, by X-Amz-Target,
// so SDK retries count too.
type opCounter struct {
	mu  sync.Mutex
	ops map[string]int
}

func (c *opCounter) wrap(client *dynamodb.Client) *dynamodb.Client {
	return dynamodb.New(client.Options(), func(o *dynamodb.Options) {
		o.HTTPClient = countingDoer{next: o.HTTPClient, c: c}
	})
}

type countingDoer struct {
	next interface {
		Do(*http.Request) (*http.Response, error)
	}
	c *opCounter
}

func (d countingDoer) Do(r *http.Request) (*http.Response, error) {
	op := r.Header.Get("X-Amz-Target")
	op = op[strings.LastIndexByte(op, '.')+1:]
	d.c.mu.Lock()
	d.c.ops[op]++
	d.c.mu.Unlock()
	return d.next.Do(r)
}

// take returns the operations counted since the last take, and their total.
func (c *opCounter) take() (map[string]int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ops, n := c.ops, 0
	for _, v := range ops {
		n += v
	}
	c.ops = map[string]int{}
	return ops, n
}

// request is one API call, turned into a proxy event of either version.
type request struct {
	v2     bool
	method string // POST when empty
	path   string // /v1/payments when empty
	tenant string // authorizer context tenant; none when empty
	keys   []string
	ct     *string // Content-Type; application/json when nil
	body   string
	header map[string][]string
}

func ptr[T any](v T) *T { return &v }

// response is a proxy response, decoded, or the function error of an
// invocation that crashed.
type response struct {
	status int
	header http.Header
	body   []byte
	raw    json.RawMessage
	// crash is the function error of a crashed invocation (no proxy
	// response: API Gateway answers it with its DEFAULT_5XX gateway
	// response, 502 function_failed, which internal/devstack's tests check).
	crash *lambdaenv.FunctionError
}

func (s *stack) do(t testing.TB, rq request) response {
	t.Helper()
	payload := s.event(t, rq)
	s.mu.Lock()
	invoke := s.invoke
	s.mu.Unlock()
	out, err := invoke(t.Context(), payload)
	if crash, ok := errors.AsType[*lambdaenv.FunctionError](err); ok && crash.Exit {
		// The process is gone: the next invocation runs in a new instance.
		s.restart()
		return response{header: http.Header{}, crash: crash}
	}
	if err != nil {
		t.Fatalf("invoke: %v", err)
	}
	var r struct {
		StatusCode        int                 `json:"statusCode"`
		Headers           map[string]string   `json:"headers"`
		MultiValueHeaders map[string][]string `json:"multiValueHeaders"`
		Body              string              `json:"body"`
		IsBase64Encoded   bool                `json:"isBase64Encoded"`
	}
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("response %s: %v", out, err)
	}
	resp := response{status: r.StatusCode, header: http.Header{}, body: []byte(r.Body), raw: out}
	for k, v := range r.Headers {
		resp.header.Set(k, v)
	}
	for k, vs := range r.MultiValueHeaders {
		resp.header.Del(k)
		for _, v := range vs {
			resp.header.Add(k, v)
		}
	}
	if r.IsBase64Encoded {
		if resp.body, err = base64.StdEncoding.DecodeString(r.Body); err != nil {
			t.Fatal(err)
		}
	}
	return resp
}

func (s *stack) event(t testing.TB, rq request) json.RawMessage {
	t.Helper()
	if rq.method == "" {
		rq.method = http.MethodPost
	}
	if rq.path == "" {
		rq.path = "/v1/payments"
	}
	headers := http.Header{}
	headers.Set("Accept", "application/json")
	headers.Set("Authorization", "Bearer sk_test_"+rq.tenant)
	if rq.method == http.MethodPost {
		ct := "application/json"
		if rq.ct != nil {
			ct = *rq.ct
		}
		if ct != "" {
			headers.Set("Content-Type", ct)
		}
	}
	for _, k := range rq.keys {
		headers.Add("Idempotency-Key", k)
	}
	for k, vs := range rq.header {
		for _, v := range vs {
			headers.Add(k, v)
		}
	}
	if rq.v2 {
		var ev events.APIGatewayV2HTTPRequest
		load(t, "testdata/http-v2-post-payment.json", &ev)
		ev.RawPath, ev.RequestContext.HTTP.Path, ev.RequestContext.HTTP.Method = rq.path, rq.path, rq.method
		ev.RouteKey = "$default"
		ev.RequestContext.RouteKey = "$default"
		ev.RequestContext.RequestID = fmt.Sprintf("v2-%d", time.Now().UnixNano())
		ev.Body = rq.body
		// HTTP API lower-cases header names and joins repeated ones with commas.
		ev.Headers = map[string]string{}
		for k, vs := range headers {
			ev.Headers[strings.ToLower(k)] = strings.Join(vs, ",")
		}
		ev.RequestContext.Authorizer = nil
		if rq.tenant != "" {
			ev.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
				Lambda: map[string]any{"tenant": rq.tenant},
			}
		}
		return marshal(t, ev)
	}
	var ev events.APIGatewayProxyRequest
	load(t, "testdata/rest-v1-post-payment.json", &ev)
	ev.HTTPMethod, ev.Path, ev.RequestContext.HTTPMethod = rq.method, rq.path, rq.method
	ev.Resource, ev.RequestContext.ResourcePath = "/{proxy+}", "/{proxy+}"
	ev.RequestContext.RequestID = fmt.Sprintf("v1-%d", time.Now().UnixNano())
	ev.Body = rq.body
	// REST APIs send both maps; headers holds the last value of each.
	ev.MultiValueHeaders = headers
	ev.Headers = map[string]string{}
	for k, vs := range headers {
		ev.Headers[k] = vs[len(vs)-1]
	}
	ev.RequestContext.Authorizer = nil
	if rq.tenant != "" {
		ev.RequestContext.Authorizer = map[string]any{"principalId": rq.tenant, "tenant": rq.tenant, "integrationLatency": 14}
	}
	return marshal(t, ev)
}

var fixtures sync.Map // path -> []byte

// load decodes the event fixture at path into v.
func load(t testing.TB, path string, v any) {
	t.Helper()
	b, ok := fixtures.Load(path)
	if !ok {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ = fixtures.LoadOrStore(path, raw)
	}
	if err := json.Unmarshal(b.([]byte), v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func marshal(t testing.TB, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// payments returns every item of the payments table.
func (s *stack) payments(t testing.TB) []payments.Payment {
	t.Helper()
	var out []payments.Payment
	p := dynamodb.NewScanPaginator(s.client, &dynamodb.ScanInput{TableName: aws.String(s.names.ByLogicalID["PaymentsTable"]), ConsistentRead: aws.Bool(true)})
	for p.HasMorePages() {
		page, err := p.NextPage(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		var ps []payments.Payment
		if err := attributevalue.UnmarshalListOfMaps(page.Items, &ps); err != nil {
			t.Fatal(err)
		}
		out = append(out, ps...)
	}
	return out
}

// problem decodes a problem response, checking its media type.
func problem(t testing.TB, r response) map[string]any {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type = %q, want application/problem+json (status %d, body %s)", ct, r.status, r.body)
	}
	var p map[string]any
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatalf("problem %s: %v", r.body, err)
	}
	return p
}

func decode(t testing.TB, r response) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("body %s: %v", r.body, err)
	}
	return m
}

// wantReplay checks that r replays first byte for byte.
func wantReplay(t testing.TB, r, first response) {
	t.Helper()
	if r.status != first.status || string(r.body) != string(first.body) {
		t.Errorf("replay = %d %s, want %d %s", r.status, r.body, first.status, first.body)
	}
	if got := r.header.Get("Idempotent-Replayed"); got != "true" {
		t.Errorf("replay Idempotent-Replayed = %q, want true", got)
	}
	for _, h := range []string{"Content-Type", "Content-Length"} {
		if got, want := r.header.Get(h), first.header.Get(h); got != want {
			t.Errorf("replay %s = %q, want %q", h, got, want)
		}
	}
}

// wantCrash checks that r is the function error of a crash injected at
// point, as aws-lambda-go reports the panic (errorType Crash).
func wantCrash(t testing.TB, r response, point string) {
	t.Helper()
	want := &lambdaenv.FunctionError{Function: "api", Type: "Crash", Message: fault.Crash{Point: point}.Error(), Exit: true}
	if diff := cmp.Diff(want, r.crash); diff != "" {
		t.Fatalf("crashed POST = %d %s, want the function error of a crash (-want +got):\n%s", r.status, r.body, diff)
	}
}
