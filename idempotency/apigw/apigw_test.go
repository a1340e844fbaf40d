package apigw

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/memory"
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
		"method": r.Method, "path": r.URL.Path, "query": r.URL.RawQuery, "host": r.Host, "body": string(body),
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
	t.Run("base64 request body", func(t *testing.T) {
		ev := v1Event(map[string]any{"tenant": "acme"}, nil, base64.StdEncoding.EncodeToString([]byte(`{"a":1}`)))
		ev.IsBase64Encoded = true
		if seen := invoke(t, echo, ev); seen["body"] != `{"a":1}` {
			t.Errorf("body = %q, want the decoded body", seen["body"])
		}
	})
}

// TestV2CommaJoinedHeaders checks how an HTTP API's header values (payload
// 2.0: a repeated header's values joined with commas) reach the handler: one
// value per comma outside a quoted string, so that an sf-string key holding
// a comma is one key and a key sent twice is two.
func TestV2CommaJoinedHeaders(t *testing.T) {
	tests := []struct {
		name    string
		value   string // the event's idempotency-key
		want    []string
		wantKey string // idempotency.ParseKey of what the handler saw; "" for an error
	}{
		{"bare key", "k-1", []string{"k-1"}, "k-1"},
		{"sf-string key", `"k-1"`, []string{`"k-1"`}, "k-1"},
		{"sf-string key holding a comma", `"a,b"`, []string{`"a,b"`}, "a,b"},
		{"sf-string key holding an escaped quote and a comma", `"a\",b"`, []string{`"a\",b"`}, `a",b`},
		{"bare key sent twice", "a,b", []string{"a", "b"}, ""},
		{"sf-string key sent twice", `"a", "b"`, []string{`"a"`, `"b"`}, ""},
		{"sf-string keys holding commas sent twice", `"a,b","c,d"`, []string{`"a,b"`, `"c,d"`}, ""},
		{"unterminated quote", `"a,b`, []string{`"a,b`}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			seen := invoke(t, echo, v2Event(map[string]any{"tenant": "acme"}, map[string]string{"idempotency-key": tt.value}, "{}"))
			var got []string
			for _, v := range seen["keys"].([]any) {
				got = append(got, v.(string))
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Idempotency-Key values (-want +got):\n%s", diff)
			}
			key, err := idempotency.ParseKey(got)
			if tt.wantKey == "" && err == nil || tt.wantKey != "" && key != tt.wantKey {
				t.Errorf("ParseKey(%q) = %q, %v; want %q", got, key, err, tt.wantKey)
			}
		})
	}
	t.Run("other headers", func(t *testing.T) {
		var got http.Header
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got = r.Header.Clone() })
		ev := v2Event(nil, map[string]string{
			"if-match":   `"x,y", "z"`,
			"accept":     "application/json, text/plain",
			"user-agent": `client "a,b"`,
		}, "{}")
		ev.Cookies = []string{"s=1", `t="u,v"`}
		if _, err := NewLambda(h).ProxyV2(t.Context(), ev); err != nil {
			t.Fatal(err)
		}
		want := map[string][]string{
			"If-Match":   {`"x,y"`, `"z"`},
			"Accept":     {"application/json", "text/plain"},
			"User-Agent": {`client "a,b"`},
			"Cookie":     {"s=1", `t="u,v"`},
		}
		for k, w := range want {
			if diff := cmp.Diff(w, got.Values(k)); diff != "" {
				t.Errorf("%s (-want +got):\n%s", k, diff)
			}
		}
	})
}

// TestResponseAsNetHTTP checks that a handler's response goes out through
// both payload versions with the status and body net/http gives it: a
// handler that writes nothing answers 200 (not an error of the proxy, which
// API Gateway would answer 502), and the first status written stays.
func TestResponseAsNetHTTP(t *testing.T) {
	tests := []struct {
		name       string
		h          http.HandlerFunc
		wantStatus int
		wantBody   string
	}{
		{"writes nothing", func(http.ResponseWriter, *http.Request) {}, 200, ""},
		{"only a header", func(w http.ResponseWriter, _ *http.Request) { w.Header().Set("X-A", "1") }, 200, ""},
		{"body without a status", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "{}") }, 200, "{}"},
		{"status twice", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusCreated)
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = io.WriteString(w, "{}")
		}, 201, "{}"},
		{"status after the body", func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, "{}")
			w.WriteHeader(http.StatusInternalServerError)
		}, 200, "{}"},
		{"early hints first", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusEarlyHints)
			w.WriteHeader(http.StatusAccepted)
		}, 202, ""},
		{"no content", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }, 204, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(tt.h)
			defer srv.Close()
			res, err := srv.Client().Post(srv.URL+"/v1/payments", "application/json", strings.NewReader("{}"))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != tt.wantStatus || string(body) != tt.wantBody {
				t.Fatalf("net/http answered %d %q, want %d %q", res.StatusCode, body, tt.wantStatus, tt.wantBody)
			}
			l := NewLambda(tt.h)
			r1, err := l.ProxyV1(t.Context(), v1Event(nil, nil, "{}"))
			if err != nil || r1.StatusCode != tt.wantStatus || r1.Body != tt.wantBody {
				t.Errorf("ProxyV1 = %d %q, %v; want %d %q, nil", r1.StatusCode, r1.Body, err, tt.wantStatus, tt.wantBody)
			}
			r2, err := l.ProxyV2(t.Context(), v2Event(nil, nil, "{}"))
			if err != nil || r2.StatusCode != tt.wantStatus || r2.Body != tt.wantBody {
				t.Errorf("ProxyV2 = %d %q, %v; want %d %q, nil", r2.StatusCode, r2.Body, err, tt.wantStatus, tt.wantBody)
			}
		})
	}
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

// TestPanicsGoOn checks that a panic of the handler reaches whatever runs
// the Lambda, with its value, whichever way it is run: the adapter answers
// nothing for it, so that aws-lambda-go reports it as the invocation's error
// (and API Gateway answers as for any function error).
func TestPanicsGoOn(t *testing.T) {
	type crash struct{ point string }
	tests := []struct {
		name  string
		value any
		event any
		run   func(ctx context.Context, h http.Handler, payload []byte) error
	}{
		{"string, REST API, Invoke", "boom", v1Event(nil, nil, ""), invokeLambda},
		{"string, HTTP API, Invoke", "boom", v2Event(nil, nil, ""), invokeLambda},
		{"value, REST API, NewLambdaHandler", crash{"after-reserve"}, v1Event(nil, nil, ""), invokeHandler},
		{"value, HTTP API, NewLambdaHandler", crash{"after-reserve"}, v2Event(nil, nil, ""), invokeHandler},
		{"value, REST API, lambda.NewHandler", crash{"after-complete"}, v1Event(nil, nil, ""), invokeRuntime},
		{"value, HTTP API, lambda.NewHandler", crash{"after-complete"}, v2Event(nil, nil, ""), invokeRuntime},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic(tt.value) })
			payload, err := json.Marshal(tt.event)
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if got := recover(); got != tt.value {
					t.Errorf("recovered %v, want the handler's panic %v", got, tt.value)
				}
			}()
			err = tt.run(t.Context(), h, payload)
			t.Errorf("the Lambda returned (error %v), want the handler's panic", err)
		})
	}
}

func invokeLambda(ctx context.Context, h http.Handler, payload []byte) error {
	_, err := NewLambda(h).Invoke(ctx, payload)
	return err
}

func invokeHandler(ctx context.Context, h http.Handler, payload []byte) error {
	_, err := NewLambdaHandler(h)(ctx, payload)
	return err
}

func invokeRuntime(ctx context.Context, h http.Handler, payload []byte) error {
	_, err := lambda.NewHandler(NewLambda(h)).Invoke(ctx, payload)
	return err
}

func TestNotAnEvent(t *testing.T) {
	if _, err := NewLambdaHandler(echo)(t.Context(), json.RawMessage(`[1,2]`)); err == nil {
		t.Errorf("handler([1,2]) error = nil, want an error")
	}
}

// TestHostileURLParts feeds the adapter paths, queries and domain names that
// aws-lambda-go-api-proxy cannot parse as they are: each must reach the
// handler (which answers its own 404 to a path it does not serve), never be
// an error of the adapter, which would also print the raw path.
func TestHostileURLParts(t *testing.T) {
	tests := []struct {
		name                string
		path                string // the event's path (v1) or rawPath (v2)
		query               string // v2 rawQueryString
		domain              string
		wantPath, wantQuery string
		wantHost            string
	}{
		{name: "encoded percent", path: "/v1/payments/%25zz", wantPath: "/v1/payments/%zz"},
		{name: "encoded NUL", path: "/v1/payments/%00", wantPath: "/v1/payments/\x00"},
		{name: "encoded newline", path: "/v1/payments/x%0A{\"level\":\"ERROR\"}", wantPath: "/v1/payments/x\n{\"level\":\"ERROR\"}"},
		{name: "decoded bad escape", path: "/v1/payments/%zz", wantPath: "/v1/payments/%zz"},
		{name: "decoded percent at the end", path: "/v1/payments/50%", wantPath: "/v1/payments/50%"},
		{name: "decoded newline and NUL", path: "/v1/payments/x\n\x00y", wantPath: "/v1/payments/x\n\x00y"},
		{name: "decoded DEL and space", path: "/v1/payments/a\x7f b", wantPath: "/v1/payments/a\x7f b"},
		{name: "decoded question mark and hash", path: "/v1/payments/a?b#c", wantPath: "/v1/payments/a?b#c"},
		{name: "decoded non-ASCII", path: "/v1/payments/café", wantPath: "/v1/payments/café"},
		{name: "no leading slash", path: "v1/payments", wantPath: "/v1/payments"},
		{name: "bad query", path: "/v1/payments", query: "a=%zz&b=x y\n#z", wantPath: "/v1/payments", wantQuery: "a=%25zz&b=x%20y%0A%23z"},
		{name: "domain with an escape", path: "/v1/payments", domain: "a%zz", wantPath: "/v1/payments", wantHost: "unknown.invalid"},
		{name: "domain with a path", path: "/v1/payments", domain: "evil.example/x", wantPath: "/v1/payments", wantHost: "unknown.invalid"},
		{name: "domain with user info", path: "/v1/payments", domain: "user@evil.example", wantPath: "/v1/payments", wantHost: "unknown.invalid"},
		{name: "domain with a space", path: "/v1/payments", domain: "a b", wantPath: "/v1/payments", wantHost: "unknown.invalid"},
		{name: "domain with a port", path: "/v1/payments", domain: "localhost:3000", wantPath: "/v1/payments", wantHost: "localhost:3000"},
	}
	for _, tt := range tests {
		if tt.domain == "" {
			tt.domain, tt.wantHost = "api.example.com", "api.example.com"
		}
		t.Run(tt.name+" v1", func(t *testing.T) {
			ev := v1Event(nil, nil, "{}")
			ev.Path, ev.RequestContext.DomainName = tt.path, tt.domain
			seen := invoke(t, echo, ev)
			if seen["path"] != tt.wantPath || seen["host"] != tt.wantHost {
				t.Errorf("handler saw path %q on %q, want %q on %q", seen["path"], seen["host"], tt.wantPath, tt.wantHost)
			}
		})
		t.Run(tt.name+" v2", func(t *testing.T) {
			ev := v2Event(nil, nil, "{}")
			ev.RawPath, ev.RawQueryString, ev.RequestContext.DomainName = tt.path, tt.query, tt.domain
			ev.RequestContext.HTTP.Path = tt.path
			seen := invoke(t, echo, ev)
			if seen["path"] != tt.wantPath || seen["query"] != tt.wantQuery || seen["host"] != tt.wantHost {
				t.Errorf("handler saw path %q, query %q on %q; want %q, %q on %q",
					seen["path"], seen["query"], seen["host"], tt.wantPath, tt.wantQuery, tt.wantHost)
			}
		})
	}
	t.Run("v2 without rawPath", func(t *testing.T) {
		ev := v2Event(nil, nil, "{}")
		ev.RawPath, ev.RequestContext.HTTP.Path = "", "/v1/payments/%zz"
		if seen := invoke(t, echo, ev); seen["path"] != "/v1/payments/%zz" {
			t.Errorf("handler saw path %q, want requestContext.http.path", seen["path"])
		}
	})
}

// TestV2StagePrefix checks that the handler sees an HTTP API's path without
// the named stage that the execute-api endpoint puts in rawPath and
// requestContext.http.path (/dev/v1/payments for stage dev), or in the path
// of its payload 1.0, and any other path as it is.
func TestV2StagePrefix(t *testing.T) {
	const apiDomain = "r3pmxmplak.execute-api.us-east-1.amazonaws.com"
	tests := []struct {
		name, stage, domain, path string
		wantPath                  string
	}{
		{"named stage", "dev", apiDomain, "/dev/v1/payments", "/v1/payments"},
		{"named stage, root", "dev", apiDomain, "/dev", "/"},
		{"named stage, root with a slash", "dev", apiDomain, "/dev/", "/"},
		{"default stage", "$default", apiDomain, "/dev/v1/payments", "/dev/v1/payments"},
		{"a segment that starts with the stage", "dev", apiDomain, "/devices/1", "/devices/1"},
		{"a path without the stage", "dev", apiDomain, "/v1/payments", "/v1/payments"},
		{"custom domain", "prod", "api.example.com", "/prod/v1/payments", "/prod/v1/payments"},
		{"function URL", "$default", "abcdefg.lambda-url.us-east-1.on.aws", "/v1/payments", "/v1/payments"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev := v2Event(nil, nil, "{}")
			ev.RawPath, ev.RequestContext.HTTP.Path = tt.path, tt.path
			ev.RequestContext.Stage, ev.RequestContext.DomainName = tt.stage, tt.domain
			if seen := invoke(t, echo, ev); seen["path"] != tt.wantPath {
				t.Errorf("2.0: handler saw path %q, want %q", seen["path"], tt.wantPath)
			}
		})
		t.Run(tt.name+", HTTP API payload 1.0", func(t *testing.T) {
			ev := restEvent{Version: "1.0", APIGatewayProxyRequest: v1Event(nil, nil, "{}")}
			ev.Path, ev.RequestContext.Path = tt.path, tt.path
			ev.RequestContext.Stage, ev.RequestContext.DomainName = tt.stage, tt.domain
			if seen := invoke(t, echo, ev); seen["path"] != tt.wantPath {
				t.Errorf("1.0: handler saw path %q, want %q", seen["path"], tt.wantPath)
			}
		})
	}
	// A REST API's path never holds the stage, even one named as its first
	// segment: stage v1, resource /v1/payments.
	ev := v1Event(nil, nil, "{}")
	ev.RequestContext.Stage, ev.RequestContext.DomainName = "v1", apiDomain
	if seen := invoke(t, echo, ev); seen["path"] != "/v1/payments" {
		t.Errorf("REST API: handler saw path %q, want /v1/payments", seen["path"])
	}
}

// TestMalformedEvents checks what no API Gateway sends: an error, before the
// proxy sees (and prints) anything.
func TestMalformedEvents(t *testing.T) {
	badMethod := v1Event(nil, nil, "{}")
	badMethod.HTTPMethod = "GET /x"
	badBody := v1Event(nil, nil, "not base64!")
	badBody.IsBase64Encoded = true
	badMethodV2 := v2Event(nil, nil, "{}")
	badMethodV2.RequestContext.HTTP.Method = ""
	badBodyV2 := v2Event(nil, nil, "%%%")
	badBodyV2.IsBase64Encoded = true
	for name, ev := range map[string]any{"v1 method": badMethod, "v1 body": badBody, "v2 method": badMethodV2, "v2 body": badBodyV2} {
		payload, _ := json.Marshal(ev)
		if out, err := NewLambdaHandler(echo)(t.Context(), payload); err == nil || !strings.HasPrefix(err.Error(), "gateway: ") {
			t.Errorf("%s: handler = %s, %v; want a gateway error", name, out, err)
		}
	}
}

// FuzzEvent feeds events of both payload versions with arbitrary paths,
// hosts, queries, methods, header values and bodies to the adapter: it
// never panics, never answers an error for an event API Gateway can send
// (an HTTP token method, a well-formed body), and the handler always gets
// the tenant from the authorizer, the body byte for byte, the method and
// the Idempotency-Key.
func FuzzEvent(f *testing.F) {
	f.Add(true, "POST", "/v1/payments/%25zz", "api.example.com", "a=1&b=%zz", "k-1", `{"a":1}`, false)
	f.Add(false, "GET", "/v1/payments/x\n{\"msg\":\"forged\"}", "a%zz", "", "\x00", "", false)
	f.Add(true, "PUT", "/%00/../..", "", "?#", "\"k\"", "aGVsbG8=", true)
	f.Fuzz(func(t *testing.T, v2 bool, method, path, host, query, key, body string, base64Body bool) {
		var payload []byte
		if v2 {
			ev := v2Event(map[string]any{"tenant": "acme"}, map[string]string{"idempotency-key": key}, body)
			ev.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{Lambda: map[string]any{"tenant": "acme"}}
			ev.RawPath, ev.RawQueryString, ev.RequestContext.DomainName, ev.IsBase64Encoded = path, query, host, base64Body
			ev.RequestContext.HTTP.Method, ev.RequestContext.HTTP.Path = method, path
			payload, _ = json.Marshal(ev)
		} else {
			ev := v1Event(map[string]any{"tenant": "acme"}, map[string][]string{"Idempotency-Key": {key}}, body)
			ev.HTTPMethod, ev.Path, ev.RequestContext.DomainName, ev.IsBase64Encoded = method, path, host, base64Body
			ev.MultiValueQueryStringParameters = map[string][]string{"q": {query}}
			payload, _ = json.Marshal(ev)
		}
		out, err := NewLambdaHandler(echo)(t.Context(), payload)
		token := method != "" && strings.IndexFunc(method, notToken) < 0
		decoded := []byte(body)
		if base64Body {
			var derr error
			decoded, derr = base64.StdEncoding.DecodeString(body)
			token = token && derr == nil
		}
		switch {
		case err != nil && token:
			t.Fatalf("event %s: error %v, want an answer", payload, err)
		case err != nil:
			return
		}
		var resp struct {
			StatusCode      int    `json:"statusCode"`
			Body            string `json:"body"`
			IsBase64Encoded bool   `json:"isBase64Encoded"`
		}
		if err := json.Unmarshal(out, &resp); err != nil || resp.StatusCode != http.StatusCreated {
			t.Fatalf("event %s: answer %s (%v), want the handler's 201", payload, out, err)
		}
		b := []byte(resp.Body)
		if resp.IsBase64Encoded {
			b, _ = base64.StdEncoding.DecodeString(resp.Body)
		}
		var got map[string]any
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("handler answer %q: %v", b, err)
		}
		if got["tenant"] != "acme" || got["body"] != jsonText(string(decoded)) {
			t.Fatalf("event %s: the handler saw tenant %v body %q, want acme and %q", payload, got["tenant"], got["body"], decoded)
		}
		// The method arrives as sent, upper-cased (as aws-lambda-go-api-proxy
		// does for both versions).
		if wantMethod := strings.ToUpper(method); got["method"] != wantMethod {
			t.Fatalf("event %s: the handler saw method %q, want %q", payload, got["method"], wantMethod)
		}
		// The key arrives as sent: a REST API's multi-value header as it is,
		// an HTTP API's (one comma-joined value) as the one value it is
		// when it holds no comma.
		var keys []string
		sent, _ := got["keys"].([]any)
		for _, k := range sent {
			keys = append(keys, k.(string))
		}
		switch wantKey := jsonText(key); {
		case !v2 && !slices.Equal(keys, []string{wantKey}):
			t.Fatalf("event %s: the handler saw Idempotency-Key %q, want [%q]", payload, keys, wantKey)
		case v2 && !strings.Contains(key, ",") && !slices.Equal(keys, []string{strings.Trim(wantKey, " \t")}):
			t.Fatalf("event %s: the handler saw Idempotency-Key %q, want [%q]", payload, keys, strings.Trim(wantKey, " \t"))
		}
	})
}

// jsonText is s as JSON carries text: one U+FFFD per invalid byte.
func jsonText(s string) string {
	var b strings.Builder
	for _, r := range s {
		b.WriteRune(r)
	}
	return b.String()
}

// invokeTwoDecodes is Invoke as it was before it decoded an event once: the
// version first, then the event of that version.
func invokeTwoDecodes(l *Lambda, payload []byte) ([]byte, error) {
	var probe struct {
		Version string `json:"version"`
	}
	if err := json.Unmarshal(payload, &probe); err != nil {
		return nil, fmt.Errorf("gateway: not an API Gateway proxy event: %w", err)
	}
	var resp any
	var err error
	if probe.Version == "2.0" {
		var ev events.APIGatewayV2HTTPRequest
		if err := json.Unmarshal(payload, &ev); err != nil {
			return nil, fmt.Errorf("gateway: decode HTTP API event: %w", err)
		}
		resp, err = l.ProxyV2(context.Background(), ev)
	} else {
		var ev events.APIGatewayProxyRequest
		if err := json.Unmarshal(payload, &ev); err != nil {
			return nil, fmt.Errorf("gateway: decode REST API event: %w", err)
		}
		resp, err = l.ProxyV1(context.Background(), httpAPIv1(probe.Version, ev))
	}
	if err != nil {
		return nil, err
	}
	return json.Marshal(resp)
}

// FuzzInvokeDecodesAsBefore checks that Invoke, which decodes an event once,
// answers every payload (events of both versions, versions spelt in other
// cases or of other types, payloads that are no event) as decoding the
// version first and then the event did: the same response, or the same
// error.
func FuzzInvokeDecodesAsBefore(f *testing.F) {
	v1, _ := json.Marshal(v1Event(map[string]any{"tenant": "acme"}, map[string][]string{"Idempotency-Key": {"k"}}, `{"a":"2.0"}`))
	v2, _ := json.Marshal(v2Event(map[string]any{"tenant": "acme"}, map[string]string{"idempotency-key": "k"}, "{}"))
	f.Add(v1)
	f.Add(v2)
	f.Add(bytes.Replace(v2, []byte(`"version"`), []byte(`"VERSION"`), 1))
	f.Add(bytes.Replace(v2, []byte(`"version"`), []byte(`"verſion"`), 1))
	f.Add(bytes.Replace(v2, []byte(`"2.0"`), []byte(`"1.0"`), 1))
	f.Add(bytes.Replace(v2, []byte(`"2.0"`), []byte(`2`), 1))
	f.Add(bytes.Replace(v2, []byte(`"2.0"`), []byte(`"\u0032.0"`), 1))
	f.Add(append([]byte(`{"version":"2.0",`), v1[1:]...))
	f.Add(append([]byte(`{"version":"1.0","x":"2.0",`), v1[1:]...))
	f.Add(append([]byte(`{"version":null,`), v1[1:]...))
	f.Add(append([]byte(`{"version":{},`), v1[1:]...))
	f.Add(append([]byte(`{"headers":[1],`), v2[1:]...))
	f.Add(append([]byte(`{"cookies":"2.0",`), v1[1:]...))
	f.Add([]byte(`[1,2]`))
	f.Add([]byte(`{"version":"2.0"`))
	f.Fuzz(func(t *testing.T, payload []byte) {
		l := NewLambda(echo)
		got, gotErr := l.Invoke(t.Context(), payload)
		want, wantErr := invokeTwoDecodes(l, payload)
		if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
			t.Fatalf("Invoke(%s) error = %v, want %v", payload, gotErr, wantErr)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("Invoke(%s) = %s, want %s", payload, got, want)
		}
	})
}

// TestLambdaHandlerAnswersAsTheFunction checks that the runtime, handed a
// Lambda, answers each event with the bytes it answers when handed the
// function NewLambdaHandler returns (which it decodes and encodes again).
func TestLambdaHandlerAnswersAsTheFunction(t *testing.T) {
	var _ lambda.Handler = (*Lambda)(nil)
	v1, _ := json.Marshal(v1Event(map[string]any{"tenant": "acme"}, map[string][]string{"Idempotency-Key": {"k"}}, `{"a":"<&>"}`))
	v2, _ := json.Marshal(v2Event(map[string]any{"tenant": "acme"}, map[string]string{"idempotency-key": "k"}, "{}"))
	direct, viaFunc := lambda.NewHandler(NewLambda(echo)), lambda.NewHandler(NewLambdaHandler(echo))
	for name, payload := range map[string][]byte{"v1": v1, "v2": v2, "spaced": append(append([]byte(" \n"), v1...), '\n')} {
		got, err := direct.Invoke(t.Context(), payload)
		if err != nil {
			t.Fatalf("%s: Invoke = %v", name, err)
		}
		want, err := viaFunc.Invoke(t.Context(), payload)
		if err != nil {
			t.Fatalf("%s: Invoke of the function = %v", name, err)
		}
		if diff := cmp.Diff(string(want), string(got)); diff != "" {
			t.Errorf("%s: answer differs from the function's (-want +got):\n%s", name, diff)
		}
	}
}

// BenchmarkInvoke measures the adapter's work for a REST API event as the
// devstack's gateway builds it for the peers harness's payment, with a
// handler that answers 201 at once: the event decoded, the request built,
// the proxy response encoded.
func BenchmarkInvoke(b *testing.B) {
	headers := map[string]string{
		"Accept-Encoding": "gzip", "Authorization": "Bearer test-token", "Content-Length": "56",
		"Content-Type": "application/json", "Host": "localapi01.execute-api.us-east-1.amazonaws.com",
		"Idempotency-Key": "k-0001", "User-Agent": "Go-http-client/1.1", "X-Forwarded-For": "127.0.0.1",
		"X-Forwarded-Port": "18090", "X-Forwarded-Proto": "http",
	}
	multi := map[string][]string{}
	for k, v := range headers {
		multi[k] = []string{v}
	}
	payload, err := json.Marshal(events.APIGatewayProxyRequest{
		Resource: "/v1/payments", Path: "/v1/payments", HTTPMethod: http.MethodPost,
		Headers: headers, MultiValueHeaders: multi,
		Body: `{"amount": 1234, "currency": "usd", "customer": "cus_1"}`,
		RequestContext: events.APIGatewayProxyRequestContext{
			AccountID: "000000000000", ResourceID: "a1b2c3", Stage: "prod",
			DomainName: "localapi01.execute-api.us-east-1.amazonaws.com", DomainPrefix: "localapi01",
			RequestID: "7d2b5c4e-1f0a-4c3b-9e8d-6a5b4c3d2e1f", ExtendedRequestID: "AAECAwQFBgcICQoL", Protocol: "HTTP/1.1",
			Identity:     events.APIGatewayRequestIdentity{SourceIP: "127.0.0.1", UserAgent: "Go-http-client/1.1"},
			ResourcePath: "/v1/payments", Path: "/prod/v1/payments", HTTPMethod: http.MethodPost,
			RequestTime: "25/Nov/2026:00:00:00 +0000", RequestTimeEpoch: 1795564800000, APIID: "localapi01",
			Authorizer: map[string]any{"principalId": "acme", "integrationLatency": 0, "tenant": "acme"},
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	l := NewLambda(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "/v1/payments/pay_1")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":"pay_1","status":"pending"}`)
	}))
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := l.Invoke(ctx, payload); err != nil {
			b.Fatal(err)
		}
	}
}

// TestInvalidTenantThroughEvents: a tenant outside idempotency's rule in the
// authorizer context of a real event (a JWT claim read by TenantFrom, as a
// deployment may) is refused by the middleware with 403 tenant_invalid,
// never stored, whatever the payload version; one inside it (an ARN, a
// name with spaces and non-ASCII) is served and stored under itself.
func TestInvalidTenantThroughEvents(t *testing.T) {
	headers := map[string]string{"Content-Type": "application/json", "Idempotency-Key": "k1"}
	tests := []struct {
		name, tenant string
		event        func(authorizer map[string]any) any
		status       int
	}{
		{"v1 hash", "acme#x", func(a map[string]any) any {
			return v1Event(a, map[string][]string{"Content-Type": {"application/json"}, "Idempotency-Key": {"k1"}}, "{}")
		}, http.StatusForbidden},
		{"v2 3000 bytes", strings.Repeat("a", 3000), func(a map[string]any) any { return v2Event(a, headers, "{}") }, http.StatusForbidden},
		{"v2 control character", "acme\x1b[31m", func(a map[string]any) any { return v2Event(a, headers, "{}") }, http.StatusForbidden},
		{"v1 C1 control character", "acme\u0085", func(a map[string]any) any {
			return v1Event(a, map[string][]string{"Content-Type": {"application/json"}, "Idempotency-Key": {"k1"}}, "{}")
		}, http.StatusForbidden},
		{"v1 unicode and spaces", "Société Générale – 東京", func(a map[string]any) any {
			return v1Event(a, map[string][]string{"Content-Type": {"application/json"}, "Idempotency-Key": {"k1"}}, "{}")
		}, http.StatusCreated},
		{"v2 assumed-role ARN", "arn:aws:sts::123456789012:assumed-role/" + strings.Repeat("r", 64) + "/" + strings.Repeat("s", 64),
			func(a map[string]any) any { return v2Event(a, headers, "{}") }, http.StatusCreated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := memory.New()
			mw, err := idempotency.New(idempotency.Config{Store: store, Tenant: TenantFrom("org")})
			if err != nil {
				t.Fatal(err)
			}
			h := mw.Leased("POST /v1/payments", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if _, ok := idempotency.Begin(w, r); ok {
					echo(w, r)
				}
			}))
			payload, err := json.Marshal(tt.event(map[string]any{"org": tt.tenant}))
			if err != nil {
				t.Fatal(err)
			}
			out, err := NewLambdaHandler(h)(t.Context(), payload)
			if err != nil {
				t.Fatal(err)
			}
			var resp struct {
				StatusCode int    `json:"statusCode"`
				Body       string `json:"body"`
			}
			if err := json.Unmarshal(out, &resp); err != nil {
				t.Fatal(err)
			}
			if tt.status == http.StatusCreated {
				if resp.StatusCode != http.StatusCreated {
					t.Errorf("answer = %d %s, want 201", resp.StatusCode, resp.Body)
				}
				if rec, err := store.Get(t.Context(), idempotency.NewKey(tt.tenant, "k1")); err != nil || rec.Status != idempotency.StatusCompleted {
					t.Errorf("record: %s, err %v; want COMPLETED", rec.Status, err)
				}
				return
			}
			if resp.StatusCode != http.StatusForbidden || !strings.Contains(resp.Body, `"code":"tenant_invalid"`) {
				t.Errorf("answer = %d %s, want 403 tenant_invalid", resp.StatusCode, resp.Body)
			}
			if _, err := store.Get(t.Context(), idempotency.NewKey(tt.tenant, "k1")); !errors.Is(err, idempotency.ErrNotFound) {
				t.Errorf("record: err %v, want ErrNotFound", err)
			}
		})
	}
}
