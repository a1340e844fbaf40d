package gateway

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/internal/fault"
)

// echo answers with what the handler saw of the request.
var echo = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	tenant, ok := Tenant(r)
	id, _ := RequestID(r)
	body, _ := io.ReadAll(r.Body)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/v1/things/1")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"tenant": tenant, "has_tenant": ok, "request_id": id,
		"method": r.Method, "path": r.URL.Path, "body": string(body),
		"keys": r.Header.Values("Idempotency-Key"),
	})
})

func v1Event(authorizer map[string]any, headers map[string][]string, body string) events.APIGatewayProxyRequest {
	return events.APIGatewayProxyRequest{
		Resource:          "/v1/payments",
		Path:              "/v1/payments",
		HTTPMethod:        "POST",
		MultiValueHeaders: headers,
		Body:              body,
		RequestContext: events.APIGatewayProxyRequestContext{
			RequestID:  "req-v1",
			Authorizer: authorizer,
			DomainName: "api.example.com",
		},
	}
}

func v2Event(authorizer map[string]any, headers map[string]string, body string) events.APIGatewayV2HTTPRequest {
	ev := events.APIGatewayV2HTTPRequest{
		Version:  "2.0",
		RouteKey: "POST /v1/payments",
		RawPath:  "/v1/payments",
		Headers:  headers,
		Body:     body,
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			RequestID:  "req-v2",
			DomainName: "api.example.com",
			HTTP:       events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: "POST", Path: "/v1/payments"},
		},
	}
	if authorizer != nil {
		ev.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{Lambda: authorizer}
	}
	return ev
}

func invoke(t *testing.T, h http.Handler, ev any) map[string]any {
	t.Helper()
	payload, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	out, err := NewLambdaHandler(h)(t.Context(), payload)
	if err != nil {
		t.Fatalf("handler error = %v", err)
	}
	var resp struct {
		StatusCode int    `json:"statusCode"`
		Body       string `json:"body"`
	}
	if err := json.Unmarshal(out, &resp); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("statusCode = %d, want 201 (%s)", resp.StatusCode, out)
	}
	var seen map[string]any
	if err := json.Unmarshal([]byte(resp.Body), &seen); err != nil {
		t.Fatalf("body %q: %v", resp.Body, err)
	}
	return seen
}

func TestTenantAndDispatch(t *testing.T) {
	tests := []struct {
		name       string
		event      any
		wantTenant string
		wantOK     bool
		wantID     string
	}{
		{"v1 with tenant", v1Event(map[string]any{"tenant": "acme", "principalId": "x"}, nil, "{}"), "acme", true, "req-v1"},
		{"v1 without authorizer", v1Event(nil, nil, "{}"), "", false, "req-v1"},
		{"v1 with a non-string tenant", v1Event(map[string]any{"tenant": 42}, nil, "{}"), "", false, "req-v1"},
		{"v1 with an empty tenant", v1Event(map[string]any{"tenant": ""}, nil, "{}"), "", false, "req-v1"},
		{"v2 with tenant", v2Event(map[string]any{"tenant": "globex"}, nil, "{}"), "globex", true, "req-v2"},
		{"v2 without authorizer", v2Event(nil, nil, "{}"), "", false, "req-v2"},
		{"v2 with other authorizer keys", v2Event(map[string]any{"sub": "acme"}, nil, "{}"), "", false, "req-v2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			seen := invoke(t, echo, tt.event)
			if seen["tenant"] != tt.wantTenant || seen["has_tenant"] != tt.wantOK {
				t.Errorf("Tenant() = %v, %v, want %q, %v", seen["tenant"], seen["has_tenant"], tt.wantTenant, tt.wantOK)
			}
			if seen["request_id"] != tt.wantID {
				t.Errorf("RequestID() = %v, want %q", seen["request_id"], tt.wantID)
			}
			if seen["method"] != "POST" || seen["path"] != "/v1/payments" || seen["body"] != "{}" {
				t.Errorf("request = %v %v %q, want POST /v1/payments {}", seen["method"], seen["path"], seen["body"])
			}
		})
	}
}

func TestTenantIgnoresHeaders(t *testing.T) {
	r, _ := http.NewRequest("POST", "/v1/payments", nil)
	r.Header.Set("X-Tenant", "acme")
	r.Header.Set("X-GoLambdaProxy-ApiGw-Context", `{"authorizer":{"tenant":"acme"}}`)
	if got, ok := Tenant(r); ok {
		t.Errorf("Tenant(request with forged headers) = %q, true; want false", got)
	}
}

func TestHeaders(t *testing.T) {
	t.Run("v1 repeated header stays repeated", func(t *testing.T) {
		seen := invoke(t, echo, v1Event(map[string]any{"tenant": "acme"},
			map[string][]string{"Idempotency-Key": {"a", "b"}}, "{}"))
		if diff := cmp.Diff([]any{"a", "b"}, seen["keys"]); diff != "" {
			t.Errorf("keys (-want +got):\n%s", diff)
		}
	})
	t.Run("v1 single-value headers", func(t *testing.T) {
		ev := v1Event(map[string]any{"tenant": "acme"}, nil, "{}")
		ev.Headers = map[string]string{"Idempotency-Key": `"k,1"`}
		seen := invoke(t, echo, ev)
		if diff := cmp.Diff([]any{`"k,1"`}, seen["keys"]); diff != "" {
			t.Errorf("keys (-want +got):\n%s", diff)
		}
	})
	t.Run("v2 comma-joined header splits", func(t *testing.T) {
		seen := invoke(t, echo, v2Event(map[string]any{"tenant": "acme"}, map[string]string{"idempotency-key": "a,b"}, "{}"))
		if diff := cmp.Diff([]any{"a", "b"}, seen["keys"]); diff != "" {
			t.Errorf("keys (-want +got):\n%s", diff)
		}
	})
	t.Run("base64 request body", func(t *testing.T) {
		ev := v1Event(map[string]any{"tenant": "acme"}, nil, base64.StdEncoding.EncodeToString([]byte(`{"a":1}`)))
		ev.IsBase64Encoded = true
		if seen := invoke(t, echo, ev); seen["body"] != `{"a":1}` {
			t.Errorf("body = %q, want the decoded body", seen["body"])
		}
	})
}

func TestResponseBodies(t *testing.T) {
	tests := []struct {
		name       string
		body       []byte
		wantBase64 bool
	}{
		{"JSON goes out as text", []byte(`{"id":"pay_1","description":"café"}`), false},
		{"invalid UTF-8 goes out as base64", []byte{0xff, 0xfe, 'x'}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusCreated)
				_, _ = w.Write(tt.body)
			})
			l := NewLambda(h)
			r1, err := l.ProxyV1(t.Context(), v1Event(nil, nil, ""))
			if err != nil {
				t.Fatal(err)
			}
			r2, err := l.ProxyV2(t.Context(), v2Event(nil, nil, ""))
			if err != nil {
				t.Fatal(err)
			}
			for _, got := range []struct {
				body   string
				base64 bool
			}{{r1.Body, r1.IsBase64Encoded}, {r2.Body, r2.IsBase64Encoded}} {
				if got.base64 != tt.wantBase64 {
					t.Errorf("IsBase64Encoded = %v, want %v", got.base64, tt.wantBase64)
				}
				raw := []byte(got.body)
				if got.base64 {
					raw, _ = base64.StdEncoding.DecodeString(got.body)
				}
				if string(raw) != string(tt.body) {
					t.Errorf("body = %q, want %q", raw, tt.body)
				}
			}
		})
	}
}

func TestCrash(t *testing.T) {
	crash := http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic(fault.Crash{Point: fault.AfterComplete}) })
	for _, ev := range []any{v1Event(nil, nil, ""), v2Event(nil, nil, "")} {
		payload, _ := json.Marshal(ev)
		out, err := NewLambdaHandler(crash)(t.Context(), payload)
		if err != nil {
			t.Fatalf("handler error = %v, want a 500 response", err)
		}
		var resp struct {
			StatusCode int               `json:"statusCode"`
			Headers    map[string]string `json:"headers"`
			Body       string            `json:"body"`
		}
		if err := json.Unmarshal(out, &resp); err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 500 || resp.Body != `{"message":"Internal Server Error"}` || resp.Headers["Content-Type"] != "application/json" {
			t.Errorf("crash response = %s, want 500 application/json {\"message\":\"Internal Server Error\"}", out)
		}
	}
}

func TestOtherPanicsGoOn(t *testing.T) {
	boom := http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") })
	for _, ev := range []any{v1Event(nil, nil, ""), v2Event(nil, nil, "")} {
		t.Run(fmt.Sprintf("%T", ev), func(t *testing.T) {
			defer func() {
				if v := recover(); v != "boom" {
					t.Errorf("recovered %v, want the handler's panic", v)
				}
			}()
			payload, _ := json.Marshal(ev)
			_, _ = NewLambdaHandler(boom)(t.Context(), payload)
			t.Errorf("handler returned, want a panic")
		})
	}
}

func TestNotAnEvent(t *testing.T) {
	if _, err := NewLambdaHandler(echo)(t.Context(), json.RawMessage(`[1,2]`)); err == nil {
		t.Errorf("handler([1,2]) error = nil, want an error")
	}
}
