package gateway_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/internal/gateway"
	"github.com/oncehq/once/internal/lambdaenv"
)

const stageArn = "arn:aws:execute-api:eu-west-1:123456789012:api0123456/test/*/*"

var routes = []gateway.Route{
	{Method: "POST", Resource: "/v1/payments"},
	{Method: "GET", Resource: "/v1/payments/{id}"},
	{Method: "ANY", Resource: "/files/{path+}"},
}

// fakes records what the emulator passed to the authorizer and the function.
type fakes struct {
	mu          sync.Mutex
	authCalls   int
	authReqs    []events.APIGatewayCustomAuthorizerRequestTypeRequest
	invocations []events.APIGatewayProxyRequest

	authorize func(events.APIGatewayCustomAuthorizerRequestTypeRequest) (events.APIGatewayCustomAuthorizerResponse, error)
	invoke    func(context.Context, events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error)
}

func (f *fakes) Authorize(_ context.Context, req events.APIGatewayCustomAuthorizerRequestTypeRequest) (events.APIGatewayCustomAuthorizerResponse, error) {
	f.mu.Lock()
	f.authCalls++
	f.authReqs = append(f.authReqs, req)
	f.mu.Unlock()
	if f.authorize != nil {
		return f.authorize(req)
	}
	return allowStage("acme"), nil
}

func (f *fakes) Invoke(ctx context.Context, ev events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error) {
	f.mu.Lock()
	f.invocations = append(f.invocations, ev)
	f.mu.Unlock()
	if f.invoke != nil {
		return f.invoke(ctx, ev)
	}
	return events.APIGatewayProxyResponse{
		StatusCode: 201,
		Headers:    map[string]string{"Content-Type": "application/json"},
		Body:       `{"ok":true}`,
	}, nil
}

func (f *fakes) authorizations() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.authCalls
}

func (f *fakes) invoked() []events.APIGatewayProxyRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]events.APIGatewayProxyRequest(nil), f.invocations...)
}

func policy(principal, effect string, resources ...string) events.APIGatewayCustomAuthorizerResponse {
	return events.APIGatewayCustomAuthorizerResponse{
		PrincipalID: principal,
		PolicyDocument: events.APIGatewayCustomAuthorizerPolicy{
			Version: "2012-10-17",
			Statement: []events.IAMPolicyStatement{{
				Action: []string{"execute-api:Invoke"}, Effect: effect, Resource: resources,
			}},
		},
	}
}

func allowStage(tenant string) events.APIGatewayCustomAuthorizerResponse {
	p := policy(tenant, "Allow", stageArn)
	p.Context = map[string]any{"tenant": tenant}
	return p
}

// serve starts an emulator with f behind it; configure adjusts it first.
func serve(t *testing.T, f *fakes, configure func(*gateway.Emulator)) (*httptest.Server, *gateway.Emulator) {
	t.Helper()
	e := &gateway.Emulator{
		Authorize: f.Authorize,
		Invoke:    f.Invoke,
		Routes:    routes,
		Stage:     "test",
		Region:    "eu-west-1",
		AccountID: "123456789012",
		APIID:     "api0123456",
	}
	if configure != nil {
		configure(e)
	}
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return srv, e
}

type response struct {
	status int
	header http.Header
	body   string
}

func do(t *testing.T, method, url, body string, header map[string]string) response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

var bearer = map[string]string{"Authorization": "Bearer sk_test_acme"}

func TestEmulatorEvent(t *testing.T) {
	f := &fakes{}
	srv, _ := serve(t, f, nil)
	before := time.Now()

	req, _ := http.NewRequestWithContext(t.Context(), "POST", srv.URL+"/v1/payments?a=1&a=2&b=x%20y", strings.NewReader(`{"amount":1}`))
	req.Header.Set("Authorization", "Bearer sk_test_acme")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "once-test")
	req.Header.Add("Idempotency-Key", "k1")
	req.Header.Add("X-Multi", "one")
	req.Header.Add("X-Multi", "two")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 201 {
		t.Fatalf("status = %d, want 201", resp.StatusCode)
	}

	evs := f.invoked()
	if len(evs) != 1 {
		t.Fatalf("function invoked %d times, want 1", len(evs))
	}
	ev := evs[0]
	rc := ev.RequestContext
	host := strings.TrimPrefix(srv.URL, "http://")
	domain := "api0123456.execute-api.eu-west-1.amazonaws.com"

	if ev.HTTPMethod != "POST" || ev.Path != "/v1/payments" || ev.Resource != "/v1/payments" {
		t.Errorf("method, path, resource = %q, %q, %q, want POST, /v1/payments, /v1/payments", ev.HTTPMethod, ev.Path, ev.Resource)
	}
	if ev.Body != `{"amount":1}` || ev.IsBase64Encoded {
		t.Errorf("body = %q (base64 %v), want the JSON as text", ev.Body, ev.IsBase64Encoded)
	}
	if ev.PathParameters != nil {
		t.Errorf("pathParameters = %v, want nil", ev.PathParameters)
	}
	wantHeaders := map[string]string{
		"Authorization": "Bearer sk_test_acme", "Content-Type": "application/json", "User-Agent": "once-test",
		"Idempotency-Key": "k1", "X-Multi": "two", "Host": domain,
		"X-Forwarded-For": "127.0.0.1", "X-Forwarded-Proto": "http", "X-Forwarded-Port": host[strings.LastIndex(host, ":")+1:],
	}
	for k, want := range wantHeaders {
		if got := ev.Headers[k]; got != want {
			t.Errorf("headers[%q] = %q, want %q", k, got, want)
		}
	}
	if diff := cmp.Diff([]string{"one", "two"}, ev.MultiValueHeaders["X-Multi"]); diff != "" {
		t.Errorf("multiValueHeaders[X-Multi] (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{"a": "2", "b": "x y"}, ev.QueryStringParameters); diff != "" {
		t.Errorf("queryStringParameters (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string][]string{"a": {"1", "2"}, "b": {"x y"}}, ev.MultiValueQueryStringParameters); diff != "" {
		t.Errorf("multiValueQueryStringParameters (-want +got):\n%s", diff)
	}

	uuid := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	if !uuid.MatchString(rc.RequestID) {
		t.Errorf("requestContext.requestId = %q, want a UUID", rc.RequestID)
	}
	if got := resp.Header.Get("X-Amzn-Requestid"); got != rc.RequestID {
		t.Errorf("x-amzn-RequestId = %q, want %q", got, rc.RequestID)
	}
	if rc.RequestTimeEpoch < before.UnixMilli() || rc.RequestTimeEpoch > time.Now().UnixMilli() {
		t.Errorf("requestTimeEpoch = %d, want between %d and now", rc.RequestTimeEpoch, before.UnixMilli())
	}
	gotRC := events.APIGatewayProxyRequestContext{
		AccountID: rc.AccountID, Stage: rc.Stage, DomainName: rc.DomainName, ResourcePath: rc.ResourcePath,
		HTTPMethod: rc.HTTPMethod, APIID: rc.APIID, Path: rc.Path, Protocol: rc.Protocol,
		Identity: rc.Identity, Authorizer: rc.Authorizer,
	}
	wantRC := events.APIGatewayProxyRequestContext{
		AccountID: "123456789012", Stage: "test", DomainName: domain, ResourcePath: "/v1/payments",
		HTTPMethod: "POST", APIID: "api0123456", Path: "/test/v1/payments", Protocol: "HTTP/1.1",
		Identity:   events.APIGatewayRequestIdentity{SourceIP: "127.0.0.1", UserAgent: "once-test"},
		Authorizer: map[string]any{"principalId": "acme", "tenant": "acme", "integrationLatency": rc.Authorizer["integrationLatency"]},
	}
	if diff := cmp.Diff(wantRC, gotRC); diff != "" {
		t.Errorf("requestContext (-want +got):\n%s", diff)
	}
	if _, ok := rc.Authorizer["integrationLatency"].(int64); !ok {
		t.Errorf("authorizer.integrationLatency = %#v, want a number", rc.Authorizer["integrationLatency"])
	}
	if rc.ResourceID == "" || rc.ExtendedRequestID == "" || rc.RequestTime == "" {
		t.Errorf("resourceId, extendedRequestId, requestTime = %q, %q, %q, want all set", rc.ResourceID, rc.ExtendedRequestID, rc.RequestTime)
	}

	// The authorizer got the REQUEST event for the same call.
	if len(f.authReqs) != 1 {
		t.Fatalf("authorizer called %d times, want 1", len(f.authReqs))
	}
	ar := f.authReqs[0]
	if ar.Type != "REQUEST" || ar.MethodArn != "arn:aws:execute-api:eu-west-1:123456789012:api0123456/test/POST/v1/payments" {
		t.Errorf("authorizer type, methodArn = %q, %q", ar.Type, ar.MethodArn)
	}
	if ar.Headers["Authorization"] != "Bearer sk_test_acme" || ar.RequestContext.RequestID != rc.RequestID ||
		ar.Resource != "/v1/payments" || ar.HTTPMethod != "POST" || ar.RequestContext.Identity.SourceIP != "127.0.0.1" {
		t.Errorf("authorizer request = %+v", ar)
	}
}

// TestEmulatorRequestTime: requestContext.requestTime is each request's
// time, to the second, in UTC, whichever request of a second came first.
func TestEmulatorRequestTime(t *testing.T) {
	f := &fakes{}
	var mu sync.Mutex
	now := time.Date(2026, 11, 25, 1, 2, 3, 400e6, time.FixedZone("X", 3600))
	srv, _ := serve(t, f, func(e *gateway.Emulator) {
		e.Now = func() time.Time {
			mu.Lock()
			defer mu.Unlock()
			return now
		}
	})
	for _, step := range []time.Duration{0, 500 * time.Millisecond, time.Second, 24 * time.Hour} {
		mu.Lock()
		now = now.Add(step)
		mu.Unlock()
		if r := do(t, "POST", srv.URL+"/v1/payments", "{}", bearer); r.status != 201 {
			t.Fatalf("status %d, want 201", r.status)
		}
	}
	var got []string
	for _, ev := range f.invoked() {
		got = append(got, ev.RequestContext.RequestTime)
	}
	want := []string{"25/Nov/2026:00:02:03 +0000", "25/Nov/2026:00:02:03 +0000", "25/Nov/2026:00:02:04 +0000", "26/Nov/2026:00:02:04 +0000"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("requestTime (-want +got):\n%s", diff)
	}
}

func TestEmulatorPathParameters(t *testing.T) {
	f := &fakes{}
	srv, _ := serve(t, f, nil)
	for _, tt := range []struct {
		method, path, resource string
		params                 map[string]string
	}{
		{"GET", "/v1/payments/pay_123", "/v1/payments/{id}", map[string]string{"id": "pay_123"}},
		{"DELETE", "/files/a/b/c.txt", "/files/{path+}", map[string]string{"path": "a/b/c.txt"}},
		// As a REST API: the path and its parameters as the client encoded
		// them, an encoded slash within one segment.
		{"GET", "/v1/payments/%25zz", "/v1/payments/{id}", map[string]string{"id": "%25zz"}},
		{"GET", "/v1/payments/%00", "/v1/payments/{id}", map[string]string{"id": "%00"}},
		{"GET", "/v1/payments/x%0A%7B%22level%22:%22ERROR%22%7D", "/v1/payments/{id}", map[string]string{"id": "x%0A%7B%22level%22:%22ERROR%22%7D"}},
		{"GET", "/v1/payments/a%2Fb", "/v1/payments/{id}", map[string]string{"id": "a%2Fb"}},
		{"GET", "/v1/payments/caf%C3%A9", "/v1/payments/{id}", map[string]string{"id": "caf%C3%A9"}},
		{"PUT", "/files/a%20b/c%3Fd", "/files/{path+}", map[string]string{"path": "a%20b/c%3Fd"}},
	} {
		if r := do(t, tt.method, srv.URL+tt.path, "", bearer); r.status != 201 {
			t.Fatalf("%s %s: status = %d, want 201", tt.method, tt.path, r.status)
		}
		evs := f.invoked()
		ev := evs[len(evs)-1]
		if ev.Resource != tt.resource || ev.RequestContext.ResourcePath != tt.resource {
			t.Errorf("%s %s: resource = %q, want %q", tt.method, tt.path, ev.Resource, tt.resource)
		}
		if diff := cmp.Diff(tt.params, ev.PathParameters); diff != "" {
			t.Errorf("%s %s: pathParameters (-want +got):\n%s", tt.method, tt.path, diff)
		}
		if ev.Path != tt.path || ev.RequestContext.Path != "/test"+tt.path {
			t.Errorf("%s %s: path, requestContext.path = %q, %q; want the path as sent, and /test before it", tt.method, tt.path, ev.Path, ev.RequestContext.Path)
		}
	}
}

// TestEmulatorIgnoresClientHost checks that the event names the API's own
// domain, whatever Host the client sent.
func TestEmulatorIgnoresClientHost(t *testing.T) {
	f := &fakes{}
	srv, _ := serve(t, f, func(e *gateway.Emulator) { e.DomainName = "api.example.com" })
	for _, host := range []string{"a%zz", "evil.example/v1/payments/x", "[::1", "localhost:1"} {
		req, err := http.NewRequestWithContext(t.Context(), "GET", srv.URL+"/v1/payments/pay_1", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		req.Header.Set("Authorization", bearer["Authorization"])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("Host %q: %v", host, err)
		}
		resp.Body.Close()
		if resp.StatusCode != 201 {
			t.Errorf("Host %q: status = %d, want 201", host, resp.StatusCode)
			continue
		}
		evs := f.invoked()
		ev := evs[len(evs)-1]
		if ev.RequestContext.DomainName != "api.example.com" || ev.RequestContext.DomainPrefix != "api" ||
			ev.Headers["Host"] != "api.example.com" || ev.MultiValueHeaders["Host"][0] != "api.example.com" {
			t.Errorf("Host %q: domainName %q, domainPrefix %q, Host header %q; want api.example.com, api, api.example.com",
				host, ev.RequestContext.DomainName, ev.RequestContext.DomainPrefix, ev.Headers["Host"])
		}
	}
}

func TestEmulatorMissingRoute(t *testing.T) {
	f := &fakes{}
	srv, _ := serve(t, f, nil)
	for _, tt := range []struct{ method, path string }{
		{"GET", "/v1/payments"},        // wrong method
		{"POST", "/v1/payments/pay_1"}, // wrong method
		{"GET", "/v1/payments/a/b"},    // too deep
		{"GET", "/v1/refunds"},         // no resource
		{"GET", "/files"},              // greedy needs a segment
		{"POST", "/"},                  // root
		{"GET", "/v1/payments/"},       // empty id
	} {
		r := do(t, tt.method, srv.URL+tt.path, "", bearer)
		if r.status != 403 || r.body != `{"message":"Missing Authentication Token"}` {
			t.Errorf("%s %s = %d %s, want 403 Missing Authentication Token", tt.method, tt.path, r.status, r.body)
		}
	}
	if n := f.authorizations(); n != 0 {
		t.Errorf("authorizer called %d times, want 0", n)
	}
	if n := len(f.invoked()); n != 0 {
		t.Errorf("function invoked %d times, want 0", n)
	}
}

func TestEmulatorAuthorization(t *testing.T) {
	otherMethod := policy("acme", "Allow", "arn:aws:execute-api:eu-west-1:123456789012:api0123456/test/GET/*")
	tests := []struct {
		name       string
		header     map[string]string
		authorize  func(events.APIGatewayCustomAuthorizerRequestTypeRequest) (events.APIGatewayCustomAuthorizerResponse, error)
		wantStatus int
		wantBody   string
		wantCalls  int
	}{
		{
			name: "no header", header: nil,
			wantStatus: 401, wantBody: `{"message":"Unauthorized"}`, wantCalls: 0,
		},
		{
			name: "empty header", header: map[string]string{"Authorization": ""},
			wantStatus: 401, wantBody: `{"message":"Unauthorized"}`, wantCalls: 0,
		},
		{
			name: "authorizer says Unauthorized", header: bearer,
			authorize: func(events.APIGatewayCustomAuthorizerRequestTypeRequest) (events.APIGatewayCustomAuthorizerResponse, error) {
				return events.APIGatewayCustomAuthorizerResponse{}, errors.New("Unauthorized")
			},
			wantStatus: 401, wantBody: `{"message":"Unauthorized"}`, wantCalls: 1,
		},
		{
			name: "deny", header: bearer,
			authorize: func(events.APIGatewayCustomAuthorizerRequestTypeRequest) (events.APIGatewayCustomAuthorizerResponse, error) {
				return policy("unknown", "Deny", stageArn), nil
			},
			wantStatus: 403, wantBody: `{"Message":"User is not authorized to access this resource with an explicit deny"}`, wantCalls: 1,
		},
		{
			name: "allow another method only", header: bearer,
			authorize: func(events.APIGatewayCustomAuthorizerRequestTypeRequest) (events.APIGatewayCustomAuthorizerResponse, error) {
				return otherMethod, nil
			},
			wantStatus: 403, wantBody: `{"Message":"User is not authorized to access this resource"}`, wantCalls: 1,
		},
		{
			name: "deny wins over allow", header: bearer,
			authorize: func(events.APIGatewayCustomAuthorizerRequestTypeRequest) (events.APIGatewayCustomAuthorizerResponse, error) {
				p := allowStage("acme")
				p.PolicyDocument.Statement = append(p.PolicyDocument.Statement, policy("acme", "Deny", "*").PolicyDocument.Statement...)
				return p, nil
			},
			wantStatus: 403, wantBody: `{"Message":"User is not authorized to access this resource with an explicit deny"}`, wantCalls: 1,
		},
		{
			name: "authorizer fails", header: bearer,
			authorize: func(events.APIGatewayCustomAuthorizerRequestTypeRequest) (events.APIGatewayCustomAuthorizerResponse, error) {
				return events.APIGatewayCustomAuthorizerResponse{}, errors.New("auth: look up key: connection refused")
			},
			wantStatus: 500, wantBody: `{"message": null}`, wantCalls: 1,
		},
		{
			name: "authorizer panics", header: bearer,
			authorize: func(events.APIGatewayCustomAuthorizerRequestTypeRequest) (events.APIGatewayCustomAuthorizerResponse, error) {
				panic("boom")
			},
			wantStatus: 500, wantBody: `{"message": null}`, wantCalls: 1,
		},
		{
			name: "no statement", header: bearer,
			authorize: func(events.APIGatewayCustomAuthorizerRequestTypeRequest) (events.APIGatewayCustomAuthorizerResponse, error) {
				return events.APIGatewayCustomAuthorizerResponse{PrincipalID: "acme"}, nil
			},
			wantStatus: 500, wantBody: `{"message": null}`, wantCalls: 1,
		},
		{
			name: "object in context", header: bearer,
			authorize: func(events.APIGatewayCustomAuthorizerRequestTypeRequest) (events.APIGatewayCustomAuthorizerResponse, error) {
				p := allowStage("acme")
				p.Context["nested"] = map[string]any{"a": 1}
				return p, nil
			},
			wantStatus: 500, wantBody: `{"message": null}`, wantCalls: 1,
		},
		{
			name: "allow", header: bearer,
			wantStatus: 201, wantBody: `{"ok":true}`, wantCalls: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakes{authorize: tt.authorize}
			srv, _ := serve(t, f, nil)
			r := do(t, "POST", srv.URL+"/v1/payments", `{}`, tt.header)
			if r.status != tt.wantStatus || r.body != tt.wantBody {
				t.Errorf("POST = %d %s, want %d %s", r.status, r.body, tt.wantStatus, tt.wantBody)
			}
			if got := r.header.Get("Content-Type"); got != "application/json" {
				t.Errorf("Content-Type = %q, want application/json", got)
			}
			if n := f.authorizations(); n != tt.wantCalls {
				t.Errorf("authorizer called %d times, want %d", n, tt.wantCalls)
			}
			wantInvoked := 0
			if tt.wantStatus == 201 {
				wantInvoked = 1
			}
			if n := len(f.invoked()); n != wantInvoked {
				t.Errorf("function invoked %d times, want %d", n, wantInvoked)
			}
		})
	}
}

func TestEmulatorAuthorizerContextIsStringified(t *testing.T) {
	f := &fakes{authorize: func(events.APIGatewayCustomAuthorizerRequestTypeRequest) (events.APIGatewayCustomAuthorizerResponse, error) {
		p := allowStage("acme")
		p.Context["n"] = 1500000.0
		p.Context["ok"] = true
		return p, nil
	}}
	srv, _ := serve(t, f, nil)
	if r := do(t, "POST", srv.URL+"/v1/payments", `{}`, bearer); r.status != 201 {
		t.Fatalf("status = %d, want 201", r.status)
	}
	a := f.invoked()[0].RequestContext.Authorizer
	for k, want := range map[string]string{"tenant": "acme", "n": "1500000", "ok": "true", "principalId": "acme"} {
		if a[k] != want {
			t.Errorf("authorizer[%q] = %#v, want %q", k, a[k], want)
		}
	}
}

func TestEmulatorAuthorizerCache(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }

	t.Run("per header, every route, until the TTL", func(t *testing.T) {
		f := &fakes{}
		srv, _ := serve(t, f, func(e *gateway.Emulator) { e.Now = clock })
		do(t, "POST", srv.URL+"/v1/payments", `{}`, bearer)
		do(t, "GET", srv.URL+"/v1/payments/pay_1", "", bearer)
		do(t, "POST", srv.URL+"/v1/payments", `{}`, bearer)
		if n := f.authorizations(); n != 1 {
			t.Errorf("authorizer called %d times for one header, want 1", n)
		}
		do(t, "POST", srv.URL+"/v1/payments", `{}`, map[string]string{"Authorization": "Bearer sk_test_globex"})
		if n := f.authorizations(); n != 2 {
			t.Errorf("authorizer called %d times for two headers, want 2", n)
		}
		for _, ev := range f.invoked() {
			if ev.RequestContext.Authorizer["tenant"] == nil {
				t.Errorf("cached result lost the context: %v", ev.RequestContext.Authorizer)
			}
		}
		advance(gateway.DefaultAuthorizerTTL - time.Second)
		do(t, "POST", srv.URL+"/v1/payments", `{}`, bearer)
		if n := f.authorizations(); n != 2 {
			t.Errorf("authorizer called %d times before the TTL, want 2", n)
		}
		advance(time.Second)
		do(t, "POST", srv.URL+"/v1/payments", `{}`, bearer)
		if n := f.authorizations(); n != 3 {
			t.Errorf("authorizer called %d times after the TTL, want 3", n)
		}
	})

	t.Run("deny is cached", func(t *testing.T) {
		f := &fakes{authorize: func(events.APIGatewayCustomAuthorizerRequestTypeRequest) (events.APIGatewayCustomAuthorizerResponse, error) {
			return policy("unknown", "Deny", stageArn), nil
		}}
		srv, _ := serve(t, f, nil)
		for range 3 {
			if r := do(t, "POST", srv.URL+"/v1/payments", `{}`, bearer); r.status != 403 {
				t.Errorf("status = %d, want 403", r.status)
			}
		}
		if n := f.authorizations(); n != 1 {
			t.Errorf("authorizer called %d times, want 1", n)
		}
	})

	t.Run("errors are not cached", func(t *testing.T) {
		f := &fakes{authorize: func(events.APIGatewayCustomAuthorizerRequestTypeRequest) (events.APIGatewayCustomAuthorizerResponse, error) {
			return events.APIGatewayCustomAuthorizerResponse{}, errors.New("Unauthorized")
		}}
		srv, _ := serve(t, f, nil)
		do(t, "POST", srv.URL+"/v1/payments", `{}`, bearer)
		do(t, "POST", srv.URL+"/v1/payments", `{}`, bearer)
		if n := f.authorizations(); n != 2 {
			t.Errorf("authorizer called %d times, want 2", n)
		}
	})

	t.Run("disabled", func(t *testing.T) {
		f := &fakes{}
		srv, _ := serve(t, f, func(e *gateway.Emulator) { e.AuthorizerTTL = -1 })
		for range 3 {
			do(t, "POST", srv.URL+"/v1/payments", `{}`, bearer)
		}
		if n := f.authorizations(); n != 3 {
			t.Errorf("authorizer called %d times with the cache off, want 3", n)
		}
	})

	t.Run("flush", func(t *testing.T) {
		f := &fakes{}
		srv, e := serve(t, f, nil)
		do(t, "POST", srv.URL+"/v1/payments", `{}`, bearer)
		e.FlushAuthorizerCache()
		do(t, "POST", srv.URL+"/v1/payments", `{}`, bearer)
		if n := f.authorizations(); n != 2 {
			t.Errorf("authorizer called %d times across a flush, want 2", n)
		}
	})

	// A policy for the first method only, cached, refuses the next route:
	// why the authorizer must answer for the whole stage.
	t.Run("cached policy checked per method", func(t *testing.T) {
		f := &fakes{authorize: func(req events.APIGatewayCustomAuthorizerRequestTypeRequest) (events.APIGatewayCustomAuthorizerResponse, error) {
			return policy("acme", "Allow", req.MethodArn), nil
		}}
		srv, _ := serve(t, f, nil)
		if r := do(t, "POST", srv.URL+"/v1/payments", `{}`, bearer); r.status != 201 {
			t.Errorf("first POST = %d, want 201", r.status)
		}
		if r := do(t, "GET", srv.URL+"/v1/payments/pay_1", "", bearer); r.status != 403 {
			t.Errorf("GET with a cached POST-only policy = %d, want 403", r.status)
		}
		if n := f.authorizations(); n != 1 {
			t.Errorf("authorizer called %d times, want 1", n)
		}
	})
}

func TestEmulatorResponse(t *testing.T) {
	tests := []struct {
		name       string
		resp       events.APIGatewayProxyResponse
		err        error
		wantStatus int
		wantBody   string
		wantHeader map[string][]string
	}{
		{
			name: "headers merged",
			resp: events.APIGatewayProxyResponse{
				StatusCode:        200,
				Headers:           map[string]string{"Content-Type": "application/problem+json", "X-One": "single", "X-Both": "from-headers"},
				MultiValueHeaders: map[string][]string{"Set-Cookie": {"a=1", "b=2"}, "X-Both": {"m1", "m2"}},
				Body:              `{"x":1}`,
			},
			wantStatus: 200, wantBody: `{"x":1}`,
			wantHeader: map[string][]string{
				"Content-Type": {"application/problem+json"}, "X-One": {"single"},
				"Set-Cookie": {"a=1", "b=2"}, "X-Both": {"m1", "m2"},
			},
		},
		{
			name:       "default content type",
			resp:       events.APIGatewayProxyResponse{StatusCode: 409, Headers: map[string]string{"Retry-After": "1"}, Body: `{}`},
			wantStatus: 409, wantBody: `{}`,
			wantHeader: map[string][]string{"Content-Type": {"application/json"}, "Retry-After": {"1"}},
		},
		{
			name:       "no body",
			resp:       events.APIGatewayProxyResponse{StatusCode: 204},
			wantStatus: 204, wantBody: "",
		},
		{
			name:       "function error",
			err:        errors.New("boom"),
			wantStatus: 502, wantBody: `{"message": "Internal server error"}`,
		},
		{
			name:       "no status code",
			resp:       events.APIGatewayProxyResponse{Body: "{}"},
			wantStatus: 502, wantBody: `{"message": "Internal server error"}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakes{invoke: func(context.Context, events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error) {
				return tt.resp, tt.err
			}}
			srv, _ := serve(t, f, nil)
			r := do(t, "POST", srv.URL+"/v1/payments", `{}`, bearer)
			if r.status != tt.wantStatus || r.body != tt.wantBody {
				t.Errorf("POST = %d %q, want %d %q", r.status, r.body, tt.wantStatus, tt.wantBody)
			}
			for k, want := range tt.wantHeader {
				if diff := cmp.Diff(want, r.header.Values(k)); diff != "" {
					t.Errorf("header %s (-want +got):\n%s", k, diff)
				}
			}
		})
	}
}

func TestEmulatorFunctionPanic(t *testing.T) {
	f := &fakes{invoke: func(context.Context, events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error) {
		panic("handler bug")
	}}
	srv, _ := serve(t, f, nil)
	r := do(t, "POST", srv.URL+"/v1/payments", `{}`, bearer)
	if r.status != 502 || r.body != `{"message": "Internal server error"}` {
		t.Errorf("POST = %d %s, want 502 Internal server error", r.status, r.body)
	}
}

// TestEmulatorBinaryBody checks the request body's way into the event as a
// REST API takes it: base64-encoded when its Content-Type matches one of the
// API's binaryMediaTypes, as text otherwise (with none, as template.yaml
// has, always).
func TestEmulatorBinaryBody(t *testing.T) {
	bin := []byte{0x89, 'P', 'N', 'G', 0, 1}
	binaryTypes := []string{"image/*", "application/octet-stream"}
	tests := []struct {
		name, contentType string
		binaryTypes       []string
		body              []byte
		wantBase64        bool
	}{
		{"json, no binary types", "application/json; charset=utf-8", nil, []byte(`{"a":"é"}`), false},
		{"png, no binary types", "image/png", nil, bin, false},
		{"octet-stream, no binary types", "application/octet-stream", nil, []byte("hi"), false},
		{"json, binary types", "application/json", binaryTypes, []byte(`{}`), false},
		{"no type, binary types", "", binaryTypes, []byte("hi"), false},
		{"png by wildcard", "image/png", binaryTypes, bin, true},
		{"octet-stream with parameters", "Application/Octet-Stream; x=1", binaryTypes, []byte("hi"), true},
		{"json under */*", "application/json", []string{"*/*"}, []byte(`{}`), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakes{}
			srv, _ := serve(t, f, func(e *gateway.Emulator) { e.Authorize, e.BinaryMediaTypes = nil, tt.binaryTypes })
			req, _ := http.NewRequestWithContext(t.Context(), "POST", srv.URL+"/v1/payments", bytes.NewReader(tt.body))
			if tt.contentType != "" {
				req.Header.Set("Content-Type", tt.contentType)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			ev := f.invoked()[0]
			if ev.IsBase64Encoded != tt.wantBase64 {
				t.Errorf("isBase64Encoded = %v, want %v", ev.IsBase64Encoded, tt.wantBase64)
			}
			got := []byte(ev.Body)
			if ev.IsBase64Encoded {
				got, err = base64.StdEncoding.DecodeString(ev.Body)
				if err != nil {
					t.Fatal(err)
				}
			}
			if !bytes.Equal(got, tt.body) {
				t.Errorf("body = %q, want %q", got, tt.body)
			}
		})
	}
}

// TestEmulatorBinaryResponse checks a function's base64 body
// (isBase64Encoded) on its way out of a REST API: decoded when the first
// media type the request accepts matches one of binaryMediaTypes, sent as
// the base64 text otherwise.
func TestEmulatorBinaryResponse(t *testing.T) {
	raw := []byte{0, 1, 0xff}
	encoded := base64.StdEncoding.EncodeToString(raw)
	binaryTypes := []string{"image/png", "application/octet-stream"}
	tests := []struct {
		name        string
		binaryTypes []string
		accept      string
		body        string
		wantStatus  int
		wantBody    string
	}{
		{"no binary types", nil, "application/octet-stream", encoded, 200, encoded},
		{"accepted binary type", binaryTypes, "application/octet-stream", encoded, 200, string(raw)},
		{"binary type accepted second", binaryTypes, "application/json, image/png", encoded, 200, encoded},
		{"no Accept", binaryTypes, "", encoded, 200, encoded},
		{"not base64, not decoded", nil, "", "!!", 200, "!!"},
		{"not base64, to decode", binaryTypes, "image/png", "!!", 502, `{"message": "Internal server error"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakes{invoke: func(context.Context, events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error) {
				return events.APIGatewayProxyResponse{StatusCode: 200, Headers: map[string]string{"Content-Type": "image/png"}, Body: tt.body, IsBase64Encoded: true}, nil
			}}
			srv, _ := serve(t, f, func(e *gateway.Emulator) { e.BinaryMediaTypes = tt.binaryTypes })
			header := map[string]string{"Authorization": bearer["Authorization"]}
			if tt.accept != "" {
				header["Accept"] = tt.accept
			}
			if r := do(t, "POST", srv.URL+"/v1/payments", `{}`, header); r.status != tt.wantStatus || r.body != tt.wantBody {
				t.Errorf("POST = %d %q, want %d %q", r.status, r.body, tt.wantStatus, tt.wantBody)
			}
		})
	}
}

// TestEmulatorLambdaPayloadLimits checks the limits a body meets on its way
// through API Gateway to a Lambda function invoked as the Lambda service
// invokes it: API Gateway's 10 MB on the body, Lambda's 6 MB on the event
// (API Gateway's 413 {"message": "Request Too Long"}, BadRequestException,
// the function not run) and on the function's answer (a function error:
// 502).
func TestEmulatorLambdaPayloadLimits(t *testing.T) {
	tests := []struct {
		name        string
		body        int // bytes of request body
		answer      int // bytes of the function's response body
		wantStatus  int
		wantBody    string
		wantErrType string
		wantInvoked int32
	}{
		{"event under Lambda's limit", gateway.MaxInvokePayload - 64<<10, 2, 201, "", "", 1},
		{"event over Lambda's limit", gateway.MaxInvokePayload, 2, 413, `{"message": "Request Too Long"}`, "BadRequestException", 0},
		{"body over API Gateway's limit", gateway.MaxPayload + 1, 2, 413, `{"message":"Request Too Long"}`, "RequestTooLongException", 0},
		{"answer over Lambda's limit", 2, 6<<20 + 101, 502, `{"message": "Internal server error"}`, "", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var invoked atomic.Int32
			fn := lambda.NewHandler(func(ev events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error) {
				invoked.Add(1)
				return events.APIGatewayProxyResponse{StatusCode: 201, Body: strings.Repeat("x", tt.answer)}, nil
			})
			srv, _ := serve(t, &fakes{}, func(e *gateway.Emulator) { e.Invoke = gateway.LambdaProxy(fn) })
			r := do(t, "POST", srv.URL+"/v1/payments", strings.Repeat("a", tt.body), bearer)
			if r.status != tt.wantStatus || tt.wantBody != "" && r.body != tt.wantBody {
				t.Errorf("POST of %d bytes = %d %.40q, want %d %q", tt.body, r.status, r.body, tt.wantStatus, tt.wantBody)
			}
			if got := r.header.Get("X-Amzn-Errortype"); got != tt.wantErrType {
				t.Errorf("x-amzn-ErrorType = %q, want %q", got, tt.wantErrType)
			}
			if n := invoked.Load(); n != tt.wantInvoked {
				t.Errorf("function invoked %d times, want %d", n, tt.wantInvoked)
			}
		})
	}
}

func TestEmulatorNoAuthorizer(t *testing.T) {
	f := &fakes{}
	srv, _ := serve(t, f, func(e *gateway.Emulator) { e.Authorize, e.Routes = nil, nil })
	if r := do(t, "GET", srv.URL+"/anything/at/all", "", nil); r.status != 201 {
		t.Fatalf("GET = %d, want 201", r.status)
	}
	ev := f.invoked()[0]
	if ev.Resource != "/{proxy+}" || ev.PathParameters["proxy"] != "anything/at/all" || ev.RequestContext.Authorizer != nil {
		t.Errorf("resource, pathParameters, authorizer = %q, %v, %v", ev.Resource, ev.PathParameters, ev.RequestContext.Authorizer)
	}
}

// A client that hangs up does not cancel the invocation, as on AWS.
func TestEmulatorClientHangUp(t *testing.T) {
	var finished atomic.Bool
	started, release := make(chan struct{}), make(chan struct{})
	f := &fakes{invoke: func(ctx context.Context, ev events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error) {
		close(started)
		<-release
		if ctx.Err() != nil {
			return events.APIGatewayProxyResponse{}, ctx.Err()
		}
		finished.Store(true)
		return events.APIGatewayProxyResponse{StatusCode: 200}, nil
	}}
	srv, e := serve(t, f, nil)

	ctx, cancel := context.WithCancel(t.Context())
	req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/v1/payments", strings.NewReader(`{}`))
	req.Header.Set("Authorization", "Bearer sk_test_acme")
	errc := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the function was not invoked")
	}
	cancel() // the client hangs up
	if err := <-errc; err == nil {
		t.Fatal("client got a response before hanging up")
	}
	time.Sleep(50 * time.Millisecond) // let the server see the hang-up
	close(release)
	srv.Close() // no new requests: Wait may be called
	if err := e.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !finished.Load() {
		t.Error("the invocation was cancelled when the client hung up")
	}
}

// A function still running at the integration timeout gets 504; its context
// ends at that deadline.
func TestEmulatorTimeout(t *testing.T) {
	ctxEnded := make(chan error, 1)
	f := &fakes{invoke: func(ctx context.Context, ev events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error) {
		<-ctx.Done()
		ctxEnded <- ctx.Err()
		return events.APIGatewayProxyResponse{StatusCode: 200}, nil
	}}
	srv, e := serve(t, f, func(e *gateway.Emulator) { e.Timeout = 100 * time.Millisecond })
	r := do(t, "POST", srv.URL+"/v1/payments", `{}`, bearer)
	if r.status != 504 || r.body != `{"message": "Endpoint request timed out"}` {
		t.Errorf("slow function = %d %s, want 504 Endpoint request timed out", r.status, r.body)
	}
	srv.Close()
	if err := e.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := <-ctxEnded; !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("function context ended with %v, want DeadlineExceeded", err)
	}
}

func TestLambdaAdapters(t *testing.T) {
	proxy := gateway.LambdaProxy(lambda.NewHandler(func(ctx context.Context, ev events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error) {
		lc, ok := lambdacontext.FromContext(ctx)
		if !ok || lc.AwsRequestID == "" {
			return events.APIGatewayProxyResponse{}, errors.New("no Lambda context")
		}
		return events.APIGatewayProxyResponse{StatusCode: 200, Body: ev.Path + " " + ev.RequestContext.Authorizer["tenant"].(string)}, nil
	}))
	resp, err := proxy(t.Context(), events.APIGatewayProxyRequest{
		Path:           "/v1/payments",
		RequestContext: events.APIGatewayProxyRequestContext{Authorizer: map[string]any{"tenant": "acme"}},
	})
	if err != nil || resp.StatusCode != 200 || resp.Body != "/v1/payments acme" {
		t.Errorf("LambdaProxy = %+v, %v, want 200 %q", resp, err, "/v1/payments acme")
	}

	authorize := gateway.LambdaAuthorizer(lambda.NewHandler(func(ctx context.Context, req events.APIGatewayCustomAuthorizerRequestTypeRequest) (events.APIGatewayCustomAuthorizerResponse, error) {
		if req.Headers["Authorization"] == "" {
			return events.APIGatewayCustomAuthorizerResponse{}, errors.New("Unauthorized")
		}
		return allowStage("acme"), nil
	}))
	if _, err := authorize(t.Context(), events.APIGatewayCustomAuthorizerRequestTypeRequest{}); err == nil || err.Error() != "Unauthorized" {
		t.Errorf("LambdaAuthorizer(no header) error = %v, want Unauthorized", err)
	}
	got, err := authorize(t.Context(), events.APIGatewayCustomAuthorizerRequestTypeRequest{Headers: map[string]string{"Authorization": "x"}})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(allowStage("acme"), got); diff != "" {
		t.Errorf("LambdaAuthorizer (-want +got):\n%s", diff)
	}
}

// TestEmulatorUnauthorizedFromALambdaEnvironment runs an authorizer in a
// Lambda execution environment (lambdaenv), which reports its "Unauthorized"
// error as the runtime does (errorType errorString, errorMessage
// Unauthorized): API Gateway matches the errorMessage, so the answer is 401,
// and any other error 500.
func TestEmulatorUnauthorizedFromALambdaEnvironment(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want int
	}{
		{errors.New("Unauthorized"), http.StatusUnauthorized},
		{errors.New("auth: authorize: table gone"), http.StatusInternalServerError},
	} {
		fn := lambdaenv.New("authorizer", func() (any, error) {
			return func(context.Context, events.APIGatewayCustomAuthorizerRequestTypeRequest) (events.APIGatewayCustomAuthorizerResponse, error) {
				return events.APIGatewayCustomAuthorizerResponse{}, tt.err
			}, nil
		})
		f := &fakes{}
		srv, _ := serve(t, f, func(e *gateway.Emulator) { e.Authorize = gateway.LambdaAuthorizer(fn) })
		if got := do(t, "POST", srv.URL+"/v1/payments", `{}`, bearer); got.status != tt.want {
			t.Errorf("authorizer error %q: status = %d, want %d", tt.err, got.status, tt.want)
		}
		if n := len(f.invoked()); n != 0 {
			t.Errorf("authorizer error %q: the function ran %d times, want 0", tt.err, n)
		}
	}
}

// answerHandler is a lambda.Handler, as the api function's adapter is, that
// answers every event with itself.
type answerHandler []byte

func (a answerHandler) Invoke(context.Context, []byte) ([]byte, error) { return a, nil }

// BenchmarkServeHTTP measures the emulator's own work for the peers
// harness's payment (the authorizer's result cached): the event built from
// the request and marshalled, a Lambda function (one that answers at once)
// invoked with it, its answer decoded and written.
func BenchmarkServeHTTP(b *testing.B) {
	answer := []byte(`{"statusCode":201,"headers":{"Content-Type":"application/json","Location":"/v1/payments/pay_1"},` +
		`"multiValueHeaders":{"Request-Id":["r1"]},"body":"{\"id\":\"pay_1\",\"status\":\"pending\"}"}`)
	fn := lambdaenv.New("api", func() (any, error) { return answerHandler(answer), nil })
	f := &fakes{}
	e := &gateway.Emulator{Authorize: f.Authorize, Invoke: gateway.LambdaProxy(fn), Routes: routes,
		Stage: "test", Region: "eu-west-1", AccountID: "123456789012", APIID: "api0123456"}
	b.ReportAllocs()
	for b.Loop() {
		r := httptest.NewRequest(http.MethodPost, "/v1/payments", strings.NewReader(`{"amount": 1234, "currency": "usd", "customer": "cus_1"}`))
		r.Header.Set("Idempotency-Key", "k-0001")
		r.Header.Set("Authorization", "Bearer sk_test_acme")
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("User-Agent", "loadgen/1")
		w := httptest.NewRecorder()
		e.ServeHTTP(w, r)
		if w.Code != http.StatusCreated {
			b.Fatalf("status %d, want 201: %s", w.Code, w.Body)
		}
	}
}
