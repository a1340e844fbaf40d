package apigw_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/apigw"
	"github.com/oncehq/once/idempotency/memory"
)

// A Lambda serving an idempotent endpoint, invoked with a REST API proxy
// event whose authorizer set the tenant (lambda.Start(l) in a main), then
// with the same request again: the replay. A REST API's answer carries its
// headers in multiValueHeaders.
func ExampleNewLambda() {
	mw, err := idempotency.New(idempotency.Config{Store: memory.New(), Tenant: apigw.Tenant, Deliverable: apigw.Deliverable})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /v1/notes", mw.Atomic("POST /v1/notes", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		call, ok := idempotency.Begin(w, r)
		if !ok {
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"tenant":%q}`, call.Key().Tenant)
	})))
	l := apigw.NewLambda(mux)

	event, _ := json.Marshal(events.APIGatewayProxyRequest{
		HTTPMethod: "POST", Path: "/v1/notes", Body: `{"text":"hello"}`,
		Headers: map[string]string{"Content-Type": "application/json", idempotency.Header: "note-1"},
		RequestContext: events.APIGatewayProxyRequestContext{
			Authorizer: map[string]any{apigw.TenantKey: "acme"}, // set by your authorizer, never by the caller
		},
	})
	for range 2 {
		out, err := l.Invoke(context.Background(), event)
		if err != nil {
			panic(err)
		}
		var resp events.APIGatewayProxyResponse
		if err := json.Unmarshal(out, &resp); err != nil {
			panic(err)
		}
		fmt.Println(resp.StatusCode, resp.Body, resp.MultiValueHeaders[idempotency.ReplayedHeader])
	}
	// Output:
	// 201 {"tenant":"acme"} []
	// 201 {"tenant":"acme"} [true]
}

// The same Lambda behind an HTTP API (payload format 2.0): the event is an
// events.APIGatewayV2HTTPRequest with Version "2.0", and a Lambda
// authorizer's context (simple responses' "context") arrives as
// RequestContext.Authorizer.Lambda, where apigw.Tenant reads the tenant. An
// HTTP API's answer carries its headers in headers.
func ExampleNewLambda_httpAPI() {
	mw, err := idempotency.New(idempotency.Config{Store: memory.New(), Tenant: apigw.Tenant, Deliverable: apigw.Deliverable})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /v1/notes", mw.Atomic("POST /v1/notes", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		call, ok := idempotency.Begin(w, r)
		if !ok {
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"tenant":%q}`, call.Key().Tenant)
	})))
	l := apigw.NewLambda(mux)

	event, _ := json.Marshal(events.APIGatewayV2HTTPRequest{
		Version: "2.0", RouteKey: "POST /v1/notes", RawPath: "/v1/notes", Body: `{"text":"hello"}`,
		Headers: map[string]string{"content-type": "application/json", "idempotency-key": "note-1"}, // lower case, as HTTP APIs send them
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: "POST", Path: "/v1/notes"},
			Authorizer: &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
				Lambda: map[string]any{apigw.TenantKey: "acme"}, // set by your authorizer, never by the caller
			},
		},
	})
	for range 2 {
		out, err := l.Invoke(context.Background(), event)
		if err != nil {
			panic(err)
		}
		var resp events.APIGatewayV2HTTPResponse
		if err := json.Unmarshal(out, &resp); err != nil {
			panic(err)
		}
		fmt.Printf("%d %s %q\n", resp.StatusCode, resp.Body, resp.Headers[idempotency.ReplayedHeader])
	}
	// Output:
	// 201 {"tenant":"acme"} ""
	// 201 {"tenant":"acme"} "true"
}
