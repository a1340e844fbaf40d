package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncehq/once/internal/auth"
	"github.com/oncehq/once/internal/dynamotest"
	"github.com/oncehq/once/internal/lambdatest"
)

func TestMain(m *testing.M) { lambdatest.Main(m, main) }

func TestRunBadConfig(t *testing.T) {
	env := map[string]string{"DYNAMODB_ENDPOINT": "localhost:8000", "LOG_LEVEL": "loud"}
	err := run(t.Context(), func(k string) string { return env[k] })
	if err == nil {
		t.Fatal("run = nil, want a configuration error")
	}
	for _, want := range []string{"DYNAMODB_ENDPOINT", "LOG_LEVEL"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("run error does not mention %s:\n%v", want, err)
		}
	}
}

// TestStartupFailureIsJSON runs main with a bad configuration: it exits
// with status 1 after one JSON line saying why.
func TestStartupFailureIsJSON(t *testing.T) {
	lambdatest.CheckStartupFailure(t, map[string]string{"DYNAMODB_ENDPOINT": "localhost:8000", "LOG_LEVEL": "loud"},
		"DYNAMODB_ENDPOINT", "LOG_LEVEL")
}

// TestManagedInstancesConcurrency runs the authorizer's main with
// AWS_LAMBDA_MAX_CONCURRENCY=8 behind a Runtime API, and authorizes the keys
// of three tenants (and unknown and missing keys) from many goroutines at
// once: every policy must name the tenant of the key it was asked about.
func TestManagedInstancesConcurrency(t *testing.T) {
	client := dynamotest.Client(t)
	names := dynamotest.Tables(t, client)
	pairs := []auth.Pair{{Tenant: "acme", Key: "sk_test_acme"}, {Tenant: "globex", Key: "sk_test_globex"}, {Tenant: "initech", Key: "sk_test_initech"}}
	if err := auth.Seed(t.Context(), client, names.ByLogicalID["ApiKeysTable"], pairs); err != nil {
		t.Fatal(err)
	}
	rt := lambdatest.NewRuntimeAPI(t)
	// The table variables of template.yaml, naming the test's tables.
	env := names.Env()
	maps.Copy(env, map[string]string{
		"AWS_LAMBDA_RUNTIME_API":     rt.Addr(),
		"AWS_LAMBDA_MAX_CONCURRENCY": "8",
		"DYNAMODB_ENDPOINT":          dynamotest.Endpoint(t),
	})
	proc := lambdatest.StartFunction(t, env)

	const goroutines, each = 24, 40
	var wrong atomic.Int64
	var mu sync.Mutex
	var examples []string
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for n := range each {
				var authorization, wantPrincipal string
				switch i := g*each + n; i % 8 {
				case 6:
					authorization, wantPrincipal = "Bearer sk_test_nobody", "unknown"
				case 7:
					authorization = "Basic c2s6"
				default:
					p := pairs[i%len(pairs)]
					authorization, wantPrincipal = "Bearer "+p.Key, p.Tenant
				}
				req := events.APIGatewayCustomAuthorizerRequestTypeRequest{
					Type:      "REQUEST",
					MethodArn: "arn:aws:execute-api:us-east-1:123456789012:abc123/prod/GET/v1/payments/pay_1",
					Headers:   map[string]string{"Authorization": authorization},
				}
				payload, _ := json.Marshal(req)
				out, err := rt.Invoke(t.Context(), payload)
				var resp events.APIGatewayCustomAuthorizerResponse
				if err == nil {
					err = json.Unmarshal(out, &resp)
				}
				ok := false
				switch {
				case wantPrincipal == "":
					var fe *lambdatest.FunctionError
					ok = errors.As(err, &fe) && fe.Message == "Unauthorized"
				case wantPrincipal == "unknown":
					ok = err == nil && resp.PrincipalID == "unknown" && resp.PolicyDocument.Statement[0].Effect == "Deny"
				default:
					ok = err == nil && resp.PrincipalID == wantPrincipal && resp.Context["tenant"] == wantPrincipal &&
						resp.PolicyDocument.Statement[0].Effect == "Allow"
				}
				if !ok {
					wrong.Add(1)
					mu.Lock()
					if len(examples) < 10 {
						examples = append(examples, fmt.Sprintf("%q: %+v, %v; want %q", authorization, resp, err, wantPrincipal))
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if n := wrong.Load(); n > 0 {
		t.Errorf("%d of %d answers were not for the key asked about: %v", n, goroutines*each, examples)
	}
	if n := rt.MaxInFlight(); n < 2 {
		t.Errorf("at most %d invocation ran at once, want several", n)
	}
	stdout, _ := proc.Stop(t)
	for _, l := range stdout {
		for _, p := range pairs {
			if strings.Contains(fmt.Sprint(l), p.Key) {
				t.Errorf("a log line holds an API key: %v", l)
			}
		}
	}
}
