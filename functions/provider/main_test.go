package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncehq/once/internal/dynamotest"
	"github.com/oncehq/once/internal/lambdatest"
)

func TestMain(m *testing.M) { lambdatest.Main(m, main) }

// TestStartupFailureIsJSON runs main with a bad configuration: it exits
// with status 1 after one JSON line saying why.
func TestStartupFailureIsJSON(t *testing.T) {
	lambdatest.CheckStartupFailure(t, map[string]string{"DYNAMODB_ENDPOINT": "localhost:8000"}, "DYNAMODB_ENDPOINT")
}

// functionURLCharge is a function URL event (payload 2.0) charging amount
// under key.
func functionURLCharge(key string, amount int) events.APIGatewayV2HTTPRequest {
	return events.APIGatewayV2HTTPRequest{
		Version: "2.0", RouteKey: "$default", RawPath: "/v1/charges",
		Headers: map[string]string{"content-type": "application/json", "idempotency-key": key},
		Body:    fmt.Sprintf(`{"amount":%d,"currency":"usd","customer":"cus_42","source":"tok_visa"}`, amount),
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			RequestID:  key,
			DomainName: "a1b2c3d4e5f6g7h8i9j0k1l2m3n4o5p6.lambda-url.us-east-1.on.aws",
			HTTP:       events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: "POST", Path: "/v1/charges"},
		},
	}
}

// TestManagedInstancesConcurrency runs the simulator's main with
// AWS_LAMBDA_MAX_CONCURRENCY=8 behind a Runtime API and charges from many
// goroutines at once, each under its own key and amount: every answer must
// be the charge of its own request.
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
	})
	proc := lambdatest.StartFunction(t, env)
	const goroutines, each = 16, 25
	var wrong atomic.Int64
	var mu sync.Mutex
	ids := map[string]bool{}
	var examples []string
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for n := range each {
				key, amount := fmt.Sprintf("key-%d-%d", g, n), 100+g*each+n
				payload, _ := json.Marshal(functionURLCharge(key, amount))
				out, err := rt.Invoke(t.Context(), payload)
				var resp events.APIGatewayV2HTTPResponse
				var charge struct {
					ID     string `json:"id"`
					Amount int    `json:"amount"`
				}
				if err == nil {
					err = json.Unmarshal(out, &resp)
				}
				if err == nil {
					err = json.Unmarshal([]byte(resp.Body), &charge)
				}
				mu.Lock()
				if err != nil || resp.StatusCode != 201 && resp.StatusCode != 200 || charge.Amount != amount || ids[charge.ID] {
					wrong.Add(1)
					if len(examples) < 10 {
						examples = append(examples, fmt.Sprintf("%s (%d) = %d %s, %v", key, amount, resp.StatusCode, resp.Body, err))
					}
				}
				ids[charge.ID] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if n := wrong.Load(); n > 0 {
		t.Errorf("%d of %d charges were answered with another request's charge: %v", n, goroutines*each, examples)
	}
	if n := rt.MaxInFlight(); n < 2 {
		t.Errorf("at most %d invocation ran at once, want several", n)
	}
	proc.Stop(t)
}
