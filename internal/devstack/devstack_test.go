package devstack_test

import (
	"context"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/oncehq/once/idempotency/problem"
	"github.com/oncehq/once/internal/devstack"
	"github.com/oncehq/once/internal/dynamotest"
	"github.com/oncehq/once/internal/gateway"
	"github.com/oncehq/once/internal/lambdatest"
)

// testEnv returns an environment for a stack on the test DynamoDB endpoint,
// on a free port, with tables of its own that are deleted when the test ends.
func testEnv(t *testing.T) map[string]string {
	t.Helper()
	endpoint := dynamotest.Endpoint(t)
	client := dynamotest.Client(t)
	// Tables of the test's own, which the stack creates.
	env := dynamotest.FreshNames(t, client).Env()
	maps.Copy(env, map[string]string{
		"DYNAMODB_ENDPOINT": endpoint,
		"PORT":              "0",
		"PROVIDER_PORT":     "0",
		"SQS_PORT":          "0",
		"LOG_LEVEL":         "debug",
	})
	return env
}

func start(t *testing.T, env map[string]string, out io.Writer) *devstack.Stack {
	t.Helper()
	return startWrapped(t, env, out, nil)
}

// startWrapped starts a stack as start does, the provider simulator's
// handler wrapped by wrap (devstack.Options.WrapProvider) unless it is nil.
func startWrapped(t *testing.T, env map[string]string, out io.Writer, wrap func(http.Handler) http.Handler) *devstack.Stack {
	t.Helper()
	stack, err := devstack.Start(t.Context(), devstack.Options{
		Getenv:       func(k string) string { return env[k] },
		Output:       out,
		TemplatePath: dynamotest.TemplatePath(t),
		StateDir:     t.TempDir(),
		WrapProvider: wrap,
	})
	if err != nil {
		t.Fatalf("Start = %v", err)
	}
	t.Cleanup(func() {
		if err := stack.Close(); err != nil {
			t.Errorf("Close = %v", err)
		}
	})
	return stack
}

type response struct {
	status int
	header http.Header
	body   string
}

func call(t *testing.T, method, url, apiKey, idemKey, body string) response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+apiKey)
	}
	if idemKey != "" {
		req.Header.Set("Idempotency-Key", idemKey)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

const order = `{"amount": 2500, "currency": "EUR", "customer": "cus_42", "description": "Order 1001"}`

// TestDevstack drives a whole stack over real HTTP: API Gateway emulator,
// authorizer, api function, DynamoDB.
func TestDevstack(t *testing.T) {
	env := testEnv(t)
	var out lambdatest.Buffer
	stack := start(t, env, &out)
	api := stack.URL() + "/v1/payments"

	created := call(t, "POST", api, "sk_test_acme", "order-1001", order)
	if created.status != http.StatusCreated {
		t.Fatalf("create = %d %s, want 201", created.status, created.body)
	}
	var payment struct {
		ID, Currency, Status string
		Amount               int64
	}
	if err := json.Unmarshal([]byte(created.body), &payment); err != nil {
		t.Fatalf("create body %q: %v", created.body, err)
	}
	if !strings.HasPrefix(payment.ID, "pay_") || payment.Amount != 2500 || payment.Currency != "eur" {
		t.Errorf("created payment = %+v, want pay_..., 2500 eur", payment)
	}
	if created.header.Get("Idempotent-Replayed") != "" {
		t.Errorf("first response has Idempotent-Replayed: %q", created.header.Get("Idempotent-Replayed"))
	}
	if created.header.Get("X-Amzn-Requestid") == "" {
		t.Error("response has no x-amzn-RequestId from the gateway")
	}

	t.Run("replay", func(t *testing.T) {
		again := call(t, "POST", api, "sk_test_acme", "order-1001", order)
		if again.status != http.StatusCreated || again.body != created.body {
			t.Errorf("replay = %d %s, want 201 %s", again.status, again.body, created.body)
		}
		if got := again.header.Get("Idempotent-Replayed"); got != "true" {
			t.Errorf("replay Idempotent-Replayed = %q, want true", got)
		}
	})
	t.Run("key reused", func(t *testing.T) {
		r := call(t, "POST", api, "sk_test_acme", "order-1001", `{"amount": 9900, "currency": "EUR", "customer": "cus_42"}`)
		if r.status != http.StatusUnprocessableEntity {
			t.Errorf("same key, other body = %d %s, want 422", r.status, r.body)
		}
	})
	t.Run("tenants are separate", func(t *testing.T) {
		r := call(t, "POST", api, "sk_test_globex", "order-1001", order)
		if r.status != http.StatusCreated || r.body == created.body {
			t.Errorf("globex with acme's key = %d %s, want 201 with another payment", r.status, r.body)
		}
		if r := call(t, "GET", api+"/"+payment.ID, "sk_test_globex", "", ""); r.status != http.StatusNotFound {
			t.Errorf("globex GET acme's payment = %d %s, want 404", r.status, r.body)
		}
	})
	t.Run("get", func(t *testing.T) {
		r := call(t, "GET", api+"/"+payment.ID, "sk_test_acme", "", "")
		if r.status != http.StatusOK || !strings.Contains(r.body, `"id":"`+payment.ID+`"`) {
			t.Errorf("GET = %d %s, want 200 with id %s", r.status, r.body, payment.ID)
		}
	})
	// API Gateway's own answers are the template's gateway responses:
	// problem+json with a code, never reaching the function.
	t.Run("no authorization", func(t *testing.T) {
		r := call(t, "POST", api, "", "order-1002", order)
		wantProblem(t, r, http.StatusUnauthorized, "unauthenticated")
		if got := r.header.Get("WWW-Authenticate"); got != "Bearer" {
			t.Errorf("no Authorization: WWW-Authenticate = %q, want Bearer", got)
		}
	})
	t.Run("not bearer", func(t *testing.T) {
		req, _ := http.NewRequestWithContext(t.Context(), "GET", api+"/"+payment.ID, nil)
		req.Header.Set("Authorization", "Basic c2tfdGVzdF9hY21lOg==")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		wantProblem(t, response{status: resp.StatusCode, header: resp.Header, body: string(b)}, http.StatusUnauthorized, "unauthenticated")
	})
	t.Run("unknown key", func(t *testing.T) {
		r := call(t, "POST", api, "sk_test_nobody", "order-1002", order)
		wantProblem(t, r, http.StatusForbidden, "forbidden")
		// Cached deny, other route: still 403.
		wantProblem(t, call(t, "GET", api+"/"+payment.ID, "sk_test_nobody", "", ""), http.StatusForbidden, "forbidden")
	})
	t.Run("no route", func(t *testing.T) {
		wantProblem(t, call(t, "DELETE", api+"/"+payment.ID, "sk_test_acme", "", ""), http.StatusNotFound, "route_not_found")
		wantProblem(t, call(t, "GET", stack.URL()+"/v2/nothing", "", "", ""), http.StatusNotFound, "route_not_found")
	})
	t.Run("body over the function's limit", func(t *testing.T) {
		// The function's own 413 (64 KiB), same code as the gateway's.
		big := `{"amount": 2500, "currency": "EUR", "description": "` + strings.Repeat("x", 70<<10) + `"}`
		r := call(t, "POST", api, "sk_test_acme", "order-big", big)
		if r.status != http.StatusRequestEntityTooLarge || !strings.Contains(r.body, `"code":"payload_too_large"`) {
			t.Errorf("70 KiB body = %d %s, want the function's 413 payload_too_large", r.status, r.body)
		}
	})
	t.Run("body over API Gateway's limit", func(t *testing.T) {
		r := call(t, "POST", api, "sk_test_acme", "order-huge", strings.Repeat("x", gateway.MaxPayload+1))
		p := wantProblem(t, r, http.StatusRequestEntityTooLarge, "payload_too_large")
		if detail, _ := p["detail"].(string); !strings.Contains(detail, "10 MB") {
			t.Errorf("detail = %q, want API Gateway's 10 MB named", detail)
		}
	})

	logs := out.String()
	for _, secret := range []string{"sk_test_acme", "sk_test_globex", "sk_test_nobody"} {
		if strings.Contains(logs, secret) {
			t.Errorf("the stack's output contains the API key %q", secret)
		}
	}
	for _, want := range []string{`"msg":"devstack: ready"`, `"function":"authorizer"`, `"component":"gateway"`, `"tenant":"acme"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("the stack's output lacks %s", want)
		}
	}

	// A second stack on the same tables starts (tables and keys exist) and
	// serves the same records.
	t.Run("restart", func(t *testing.T) {
		second := start(t, env, io.Discard)
		r := call(t, "POST", second.URL()+"/v1/payments", "sk_test_acme", "order-1001", order)
		if r.status != http.StatusCreated || r.body != created.body || r.header.Get("Idempotent-Replayed") != "true" {
			t.Errorf("replay through a second stack = %d %s, want the stored 201", r.status, r.body)
		}
	})
}

// TestDevstackClose checks that Close stops serving and can be called twice.
func TestDevstackClose(t *testing.T) {
	env := testEnv(t)
	stack, err := devstack.Start(t.Context(), devstack.Options{
		Getenv:       func(k string) string { return env[k] },
		TemplatePath: dynamotest.TemplatePath(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	if r := call(t, "GET", stack.URL()+"/v1/payments/pay_x", "", "", ""); r.status != http.StatusUnauthorized {
		t.Errorf("before Close: %d, want 401", r.status)
	}
	if err := stack.Close(); err != nil {
		t.Fatalf("Close = %v", err)
	}
	if err := stack.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
	if _, err := http.Get(stack.URL() + "/v1/payments/pay_x"); err == nil {
		t.Error("the gateway still answers after Close")
	}
}

func TestStartBadEnvironment(t *testing.T) {
	env := map[string]string{
		"PORT":                "http",
		"ONCE_DEV_API_KEYS":   "Acme:sekrit_value",
		"ONCE_RETENTION":      "forever",
		"DYNAMODB_ENDPOINT":   "http://127.0.0.1:1",
		"ONCE_API_KEYS_TABLE": "x",
	}
	_, err := devstack.Start(t.Context(), devstack.Options{Getenv: func(k string) string { return env[k] }})
	if err == nil {
		t.Fatal("Start = nil error, want one")
	}
	for _, want := range []string{"PORT", "ONCE_DEV_API_KEYS", "ONCE_RETENTION", "ONCE_API_KEYS_TABLE"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Start error does not mention %s:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "sekrit_value") {
		t.Errorf("Start error shows the API key:\n%v", err)
	}
}

func TestStartUnreachableDynamoDB(t *testing.T) {
	env := map[string]string{"DYNAMODB_ENDPOINT": "http://127.0.0.1:1", "PORT": "0"}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	_, err := devstack.Start(ctx, devstack.Options{
		Getenv:       func(k string) string { return env[k] },
		TemplatePath: dynamotest.TemplatePath(t),
	})
	if err == nil || !strings.Contains(err.Error(), "devstack: tables") {
		t.Errorf("Start against a closed port = %v, want a tables error", err)
	}
}

// TestPaymentSettlementShown creates payments the worker settles each way
// and checks that GET shows what the README promises once settled:
// provider_charge_id for a charge, failure_code for a failure, null for
// what there is not.
func TestPaymentSettlementShown(t *testing.T) {
	env := testEnv(t)
	stack := start(t, env, io.Discard)
	api := stack.URL() + "/v1/payments"
	type view struct {
		ID               string  `json:"id"`
		Status           string  `json:"status"`
		ProviderChargeID *string `json:"provider_charge_id"`
		FailureCode      *string `json:"failure_code"`
	}
	tests := []struct {
		source, status, failure string
		charged                 bool
	}{
		{"tok_visa", "succeeded", "", true},
		{"tok_chargeDeclined", "failed", "card_declined", true},
		{"tok_nosuchtoken", "failed", "provider_rejected", false},
	}
	for _, tt := range tests {
		t.Run(tt.source, func(t *testing.T) {
			body := `{"amount": 2500, "currency": "EUR", "customer": "cus_42", "source": "` + tt.source + `"}`
			r := call(t, "POST", api, "sk_test_acme", "settle-"+tt.source, body)
			var created view
			if r.status != http.StatusCreated || json.Unmarshal([]byte(r.body), &created) != nil {
				t.Fatalf("create = %d %s, want 201", r.status, r.body)
			}
			if created.Status != "pending" || created.ProviderChargeID != nil || created.FailureCode != nil ||
				!strings.Contains(r.body, `"provider_charge_id":null,"failure_code":null`) {
				t.Errorf("created = %s, want pending with provider_charge_id and failure_code null", r.body)
			}
			var got view
			var last response
			lambdatest.WaitFor(t, 30*time.Second, "the worker to settle "+created.ID, func() bool {
				last = call(t, "GET", api+"/"+created.ID, "sk_test_acme", "", "")
				return json.Unmarshal([]byte(last.body), &got) == nil && got.Status != "pending"
			})
			if got.Status != tt.status {
				t.Errorf("GET = %s, want status %s", last.body, tt.status)
			}
			if charged := got.ProviderChargeID != nil && strings.HasPrefix(*got.ProviderChargeID, "prch_"); charged != tt.charged {
				t.Errorf("GET = %s, want a provider_charge_id: %v", last.body, tt.charged)
			}
			if (tt.failure == "") != (got.FailureCode == nil) || got.FailureCode != nil && *got.FailureCode != tt.failure {
				t.Errorf("GET = %s, want failure_code %q (null when empty)", last.body, tt.failure)
			}
		})
	}
}

// wantProblem checks that r is a gateway response of template.yaml: status,
// problem+json, code, and the request ID of the X-Amzn-Requestid header. It
// returns the body's members.
func wantProblem(t *testing.T, r response, status int, code string) map[string]any {
	t.Helper()
	var p map[string]any
	if err := json.Unmarshal([]byte(r.body), &p); err != nil {
		t.Errorf("answer %d %s is not JSON: %v", r.status, r.body, err)
		return p
	}
	want := map[string]any{
		"type": problem.DefaultTypeBase + code, "title": p["title"], "status": float64(status), "detail": p["detail"],
		"code": code, "request_id": r.header.Get("X-Amzn-Requestid"),
	}
	if r.status != status || !maps.Equal(p, want) || p["title"] == "" || p["detail"] == "" || want["request_id"] == "" {
		t.Errorf("answer = %d %v, want %d %v", r.status, p, status, want)
	}
	if got := r.header.Get("Content-Type"); got != problem.ContentType {
		t.Errorf("Content-Type = %q, want %q", got, problem.ContentType)
	}
	return p
}
