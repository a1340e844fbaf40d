package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/aws/aws-lambda-go/events"
	"github.com/awslabs/aws-lambda-go-api-proxy/core"
	"github.com/awslabs/aws-lambda-go-api-proxy/httpadapter"

	"github.com/oncehq/once/internal/fault"
)

// TenantKey is the authorizer context key that carries the caller's tenant.
const TenantKey = "tenant"

// CrashBody is what API Gateway answers, with status 500, when the function
// behind it crashed.
const CrashBody = `{"message":"Internal Server Error"}`

// Tenant returns the caller's tenant from the authorizer context of the
// request's API Gateway event: requestContext.authorizer.tenant for a REST API
// (payload 1.0), requestContext.authorizer.lambda.tenant for an HTTP API
// (payload 2.0). It never looks at the request's own headers, which the caller
// controls.
func Tenant(r *http.Request) (string, bool) {
	ctx := r.Context()
	if rc, ok := core.GetAPIGatewayContextFromContext(ctx); ok {
		return tenantFrom(rc.Authorizer)
	}
	if rc, ok := core.GetAPIGatewayV2ContextFromContext(ctx); ok && rc.Authorizer != nil {
		return tenantFrom(rc.Authorizer.Lambda)
	}
	return "", false
}

func tenantFrom(authorizer map[string]any) (string, bool) {
	s, ok := authorizer[TenantKey].(string)
	return s, ok && s != ""
}

// RequestID returns API Gateway's request ID for the request, if it came
// through the Lambda adapter.
func RequestID(r *http.Request) (string, bool) {
	ctx := r.Context()
	if rc, ok := core.GetAPIGatewayContextFromContext(ctx); ok && rc.RequestID != "" {
		return rc.RequestID, true
	}
	if rc, ok := core.GetAPIGatewayV2ContextFromContext(ctx); ok && rc.RequestID != "" {
		return rc.RequestID, true
	}
	return "", false
}

// Lambda serves API Gateway proxy events with an http.Handler, through
// aws-lambda-go-api-proxy's httpadapter.
//
// The adapter returns a response body as text when it is valid UTF-8 and
// base64 (isBase64Encoded) otherwise; the API only writes JSON, which is
// UTF-8, and the response of a replay is the stored bytes, so a replay goes out
// exactly as the original did.
type Lambda struct {
	v1 *httpadapter.HandlerAdapter
	v2 *httpadapter.HandlerAdapterV2
}

// NewLambda returns a Lambda serving h.
func NewLambda(h http.Handler) *Lambda {
	return &Lambda{v1: httpadapter.New(h), v2: httpadapter.NewV2(h)}
}

// NewLambdaHandler returns the function to pass to lambda.Start: it serves REST
// API (payload 1.0) and HTTP API (payload 2.0) proxy events with h.
func NewLambdaHandler(h http.Handler) func(ctx context.Context, payload json.RawMessage) (json.RawMessage, error) {
	return NewLambda(h).Invoke
}

// Invoke serves one proxy event of either payload version, told apart by its
// "version" field ("2.0" for HTTP API payload 2.0; absent or "1.0" otherwise).
func (l *Lambda) Invoke(ctx context.Context, payload json.RawMessage) (json.RawMessage, error) {
	var probe struct {
		Version string `json:"version"`
	}
	if err := json.Unmarshal(payload, &probe); err != nil {
		return nil, fmt.Errorf("gateway: not an API Gateway proxy event: %w", err)
	}
	var resp any
	if probe.Version == "2.0" {
		var ev events.APIGatewayV2HTTPRequest
		if err := json.Unmarshal(payload, &ev); err != nil {
			return nil, fmt.Errorf("gateway: decode HTTP API event: %w", err)
		}
		r, err := l.ProxyV2(ctx, ev)
		if err != nil {
			return nil, err
		}
		resp = r
	} else {
		var ev events.APIGatewayProxyRequest
		if err := json.Unmarshal(payload, &ev); err != nil {
			return nil, fmt.Errorf("gateway: decode REST API event: %w", err)
		}
		r, err := l.ProxyV1(ctx, ev)
		if err != nil {
			return nil, err
		}
		resp = r
	}
	out, err := json.Marshal(resp)
	if err != nil {
		return nil, fmt.Errorf("gateway: encode response: %w", err)
	}
	return out, nil
}

// ProxyV1 serves a REST API proxy event (payload 1.0). An injected crash
// (fault.Crash) is answered as API Gateway answers for a crashed function;
// any other panic goes on.
func (l *Lambda) ProxyV1(ctx context.Context, ev events.APIGatewayProxyRequest) (resp events.APIGatewayProxyResponse, err error) {
	defer func() {
		if v := recover(); v != nil {
			if _, ok := fault.AsCrash(v); !ok {
				panic(v)
			}
			resp, err = events.APIGatewayProxyResponse{
				StatusCode:        http.StatusInternalServerError,
				Headers:           map[string]string{"Content-Type": "application/json"},
				MultiValueHeaders: map[string][]string{"Content-Type": {"application/json"}},
				Body:              CrashBody,
			}, nil
		}
	}()
	return l.v1.ProxyWithContext(ctx, ev)
}

// ProxyV2 serves an HTTP API proxy event (payload 2.0), recovering an
// injected crash as ProxyV1 does.
//
// The adapter splits every header value but a few singletons on commas (API
// Gateway joins repeated headers with commas in payload 2.0), so an
// Idempotency-Key holding a comma reaches the handler as two values and is
// refused as repeated.
func (l *Lambda) ProxyV2(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (resp events.APIGatewayV2HTTPResponse, err error) {
	defer func() {
		if v := recover(); v != nil {
			if _, ok := fault.AsCrash(v); !ok {
				panic(v)
			}
			resp, err = events.APIGatewayV2HTTPResponse{
				StatusCode: http.StatusInternalServerError,
				Headers:    map[string]string{"Content-Type": "application/json"},
				Body:       CrashBody,
			}, nil
		}
	}()
	return l.v2.ProxyWithContext(ctx, ev)
}
