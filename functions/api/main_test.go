package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncehq/once/internal/dynamotest"
	"github.com/oncehq/once/internal/lambdatest"
)

func TestMain(m *testing.M) { lambdatest.Main(m, main) }

func TestRunRefusesBadConfig(t *testing.T) {
	env := map[string]string{"ONCE_RETENTION": "forever", "ONCE_LEASE": "-1s"}
	err := run(t.Context(), func(k string) string { return env[k] })
	if err == nil {
		t.Fatal("run() with a bad configuration = nil, want an error")
	}
	for _, name := range []string{"ONCE_RETENTION", "ONCE_LEASE"} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("run() error = %q, want it to name %s", err, name)
		}
	}
}

// TestStartupFailureIsJSON runs main with a bad configuration: it exits
// with status 1 (Runtime.ExitError) after one JSON line saying why.
func TestStartupFailureIsJSON(t *testing.T) {
	lambdatest.CheckStartupFailure(t, map[string]string{"ONCE_RETENTION": "forever", "ONCE_LEASE": "-1s"},
		"ONCE_RETENTION", "ONCE_LEASE")
}

// apiEvent is a REST API proxy event (payload 1.0) for tenant, as API
// Gateway sends it after the authorizer allowed the request.
func apiEvent(method, path, tenant, body string, headers map[string]string) events.APIGatewayProxyRequest {
	var b [8]byte
	_, _ = rand.Read(b[:])
	multi := map[string][]string{}
	for k, v := range headers {
		multi[k] = []string{v}
	}
	return events.APIGatewayProxyRequest{
		Resource: path, Path: path, HTTPMethod: method, Headers: headers, MultiValueHeaders: multi, Body: body,
		RequestContext: events.APIGatewayProxyRequestContext{
			RequestID:  hex.EncodeToString(b[:]),
			Stage:      "prod",
			DomainName: "k3v9x2m7qa.execute-api.us-east-1.amazonaws.com",
			HTTPMethod: method,
			Authorizer: map[string]any{"principalId": tenant, "tenant": tenant},
		},
	}
}

type apiAnswer struct {
	status int
	body   map[string]any
}

func invokeAPI(t *testing.T, rt *lambdatest.RuntimeAPI, ev any) (apiAnswer, error) {
	payload, err := json.Marshal(ev)
	if err != nil {
		return apiAnswer{}, err
	}
	out, err := rt.Invoke(t.Context(), payload)
	if err != nil {
		return apiAnswer{}, err
	}
	var resp events.APIGatewayProxyResponse
	if err := json.Unmarshal(out, &resp); err != nil {
		return apiAnswer{}, fmt.Errorf("response %q: %w", out, err)
	}
	a := apiAnswer{status: resp.StatusCode}
	if err := json.Unmarshal([]byte(resp.Body), &a.body); err != nil {
		return apiAnswer{}, fmt.Errorf("body %q: %w", resp.Body, err)
	}
	return a, nil
}

// TestManagedInstancesConcurrency runs the api's main as Lambda Managed
// Instances run it: one process, aws-lambda-go's own runtime loop with
// AWS_LAMBDA_MAX_CONCURRENCY=8, fed by a Runtime API. Goroutines of three
// tenants create and read payments at once; every answer must be the
// caller's own. Hostile paths (as a REST API passes them, and decoded as an
// HTTP API passes them) are 404 not_found. Under -race a data race in the
// handler shows as a line that is not JSON, and every line the process
// writes must be JSON.
func TestManagedInstancesConcurrency(t *testing.T) {
	client := dynamotest.Client(t)
	names := dynamotest.Tables(t, client)
	rt := lambdatest.NewRuntimeAPI(t)
	// The table variables of template.yaml, naming the test's tables.
	env := names.Env()
	maps.Copy(env, map[string]string{
		"AWS_LAMBDA_RUNTIME_API":     rt.Addr(),
		"AWS_LAMBDA_MAX_CONCURRENCY": "8",
		"DYNAMODB_ENDPOINT":          dynamotest.Endpoint(t),
		"LOG_LEVEL":                  "info",
	})
	proc := lambdatest.StartFunction(t, env)

	tenants := []string{"acme", "globex", "initech"}
	const perTenant, goroutines, reads = 3, 24, 40
	type payment struct{ id, customer string }
	own := make([][]payment, len(tenants))
	var mu sync.Mutex
	var wrong atomic.Int64
	var examples []string
	failf := func(format string, args ...any) {
		wrong.Add(1)
		mu.Lock()
		defer mu.Unlock()
		if len(examples) < 10 {
			examples = append(examples, fmt.Sprintf(format, args...))
		}
	}

	// Create the payments, all at once.
	var wg sync.WaitGroup
	for ti, tenant := range tenants {
		for i := range perTenant {
			wg.Go(func() {
				customer := fmt.Sprintf("cus_%s_%d", tenant, i)
				body := fmt.Sprintf(`{"amount": %d, "currency": "eur", "customer": %q}`, 100*(ti+1)+i, customer)
				a, err := invokeAPI(t, rt, apiEvent("POST", "/v1/payments", tenant, body, map[string]string{
					"Content-Type": "application/json", "Idempotency-Key": "create-" + customer,
				}))
				if err != nil || a.status != 201 || a.body["customer"] != customer {
					failf("create %s = %d %v, %v", customer, a.status, a.body, err)
					return
				}
				mu.Lock()
				own[ti] = append(own[ti], payment{id: a.body["id"].(string), customer: customer})
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	if wrong.Load() > 0 {
		t.Fatalf("creating the payments failed: %v", examples)
	}

	// Read them, all at once, with hostile paths among the reads.
	hostile := []any{
		apiEvent("GET", "/v1/payments/%25zz", "acme", "", nil),
		apiEvent("GET", "/v1/payments/%00", "acme", "", nil),
		apiEvent("GET", `/v1/payments/x%0A%7B%22level%22:%22ERROR%22,%22msg%22:%22forged%22%7D`, "acme", "", nil),
		httpAPIEvent("/v1/payments/x\n{\"level\":\"ERROR\",\"msg\":\"forged\"}", "acme"),
		httpAPIEvent("/v1/payments/%zz", "acme"),
	}
	for g := range goroutines {
		wg.Go(func() {
			ti := g % len(tenants)
			for n := range reads {
				if n%10 == 0 {
					a, err := invokeAPI(t, rt, hostile[(g+n)%len(hostile)])
					if err != nil || a.status != 404 || a.body["code"] != "not_found" {
						failf("hostile path = %d %v, %v; want 404 not_found", a.status, a.body, err)
					}
					continue
				}
				p := own[ti][n%perTenant]
				a, err := invokeAPI(t, rt, apiEvent("GET", "/v1/payments/"+p.id, tenants[ti], "", nil))
				if err != nil || a.status != 200 || a.body["id"] != p.id || a.body["customer"] != p.customer {
					failf("%s GET %s = %d %v, %v; want its own payment (%s)", tenants[ti], p.id, a.status, a.body, err, p.customer)
				}
			}
		})
	}
	wg.Wait()
	if n := wrong.Load(); n > 0 {
		t.Errorf("%d of %d answers were not the caller's: %v", n, goroutines*reads, examples)
	}
	if n := rt.MaxInFlight(); n < 2 {
		t.Errorf("at most %d invocation ran at once, want several", n)
	}

	stdout, _ := proc.Stop(t)
	requests := 0
	for _, l := range stdout {
		if l["msg"] == "forged" {
			t.Errorf("a client forged a log line: %v", l)
		}
		if l["msg"] == "request" {
			requests++
		}
	}
	if want := len(tenants)*perTenant + goroutines*reads; requests != want {
		t.Errorf("%d request log lines, want %d", requests, want)
	}
}

// httpAPIEvent is an HTTP API event (payload 2.0) for a GET of path, which
// an HTTP API passes decoded.
func httpAPIEvent(path, tenant string) events.APIGatewayV2HTTPRequest {
	return events.APIGatewayV2HTTPRequest{
		Version: "2.0", RouteKey: "GET /v1/payments/{id}", RawPath: path,
		Headers: map[string]string{"accept": "application/json"},
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			RequestID:  "v2-hostile",
			DomainName: "abc123.execute-api.us-east-1.amazonaws.com",
			HTTP:       events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: "GET", Path: path},
			Authorizer: &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{Lambda: map[string]any{"tenant": tenant}},
		},
	}
}
