package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/internal/gateway"
	"github.com/oncehq/once/internal/lambdaenv"
)

// custom is a gateway response whose body names its type, message and request.
func custom(status int) gateway.GatewayResponse {
	return gateway.GatewayResponse{
		StatusCode: status,
		Headers:    map[string]string{"Content-Type": "'application/problem+json'", "X-Echo": "method.request.header.X-Probe"},
		Templates: map[string]string{"application/json": `{"type":"$context.error.responseType","status":` + strconv.Itoa(status) +
			`,"message":$context.error.messageString,"request":"$context.requestId","stage":"$context.stage","unknown":"$context.nothing"}`},
	}
}

type customBody struct {
	Type    string  `json:"type"`
	Status  int     `json:"status"`
	Message *string `json:"message"`
	Request string  `json:"request"`
	Stage   string  `json:"stage"`
	Unknown string  `json:"unknown"`
}

func TestEmulatorGatewayResponses(t *testing.T) {
	all := map[string]gateway.GatewayResponse{}
	for i, typ := range []string{
		gateway.ResponseUnauthorized, gateway.ResponseAccessDenied, gateway.ResponseMissingAuthenticationToken,
		gateway.ResponseRequestTooLarge, gateway.ResponseAuthorizerFailure, gateway.ResponseAuthorizerConfigurationError,
		gateway.ResponseIntegrationFailure, gateway.ResponseIntegrationTimeout, gateway.ResponseDefault4XX, gateway.ResponseDefault5XX,
	} {
		all[typ] = custom(460 + i) // a status of its own, to see which applied
	}
	fail := errors.New("boom")
	tests := []struct {
		name      string
		path      string
		body      string
		header    map[string]string
		authorize func(events.APIGatewayCustomAuthorizerRequestTypeRequest) (events.APIGatewayCustomAuthorizerResponse, error)
		invoke    func(context.Context, events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error)
		wantType  string
		wantMsg   *string // nil: null
		wantErr   string  // X-Amzn-Errortype, kept
	}{
		{name: "no authorization header", path: "/v1/payments", header: map[string]string{},
			wantType: gateway.ResponseUnauthorized, wantMsg: ptr("Unauthorized"), wantErr: "UnauthorizedException"},
		{name: "authorizer says Unauthorized", path: "/v1/payments", header: bearer,
			authorize: func(events.APIGatewayCustomAuthorizerRequestTypeRequest) (events.APIGatewayCustomAuthorizerResponse, error) {
				return events.APIGatewayCustomAuthorizerResponse{}, errors.New("Unauthorized")
			},
			wantType: gateway.ResponseUnauthorized, wantMsg: ptr("Unauthorized"), wantErr: "UnauthorizedException"},
		{name: "explicit deny", path: "/v1/payments", header: bearer,
			authorize: func(events.APIGatewayCustomAuthorizerRequestTypeRequest) (events.APIGatewayCustomAuthorizerResponse, error) {
				return policy("unknown", "Deny", stageArn), nil
			},
			wantType: gateway.ResponseAccessDenied, wantMsg: ptr("User is not authorized to access this resource with an explicit deny"), wantErr: "AccessDeniedException"},
		{name: "no route", path: "/v2/nothing", header: bearer,
			wantType: gateway.ResponseMissingAuthenticationToken, wantMsg: ptr("Missing Authentication Token"), wantErr: "MissingAuthenticationTokenException"},
		{name: "body over 10 MB", path: "/v1/payments", body: strings.Repeat("a", gateway.MaxPayload+1), header: bearer,
			wantType: gateway.ResponseRequestTooLarge, wantMsg: ptr("Request Too Long"), wantErr: "RequestTooLongException"},
		{name: "authorizer error", path: "/v1/payments", header: bearer,
			authorize: func(events.APIGatewayCustomAuthorizerRequestTypeRequest) (events.APIGatewayCustomAuthorizerResponse, error) {
				return events.APIGatewayCustomAuthorizerResponse{}, fail
			},
			wantType: gateway.ResponseAuthorizerFailure, wantErr: "AuthorizerConfigurationException"},
		{name: "authorizer result malformed", path: "/v1/payments", header: bearer,
			authorize: func(events.APIGatewayCustomAuthorizerRequestTypeRequest) (events.APIGatewayCustomAuthorizerResponse, error) {
				return events.APIGatewayCustomAuthorizerResponse{}, nil
			},
			wantType: gateway.ResponseAuthorizerConfigurationError, wantErr: "AuthorizerConfigurationException"},
		{name: "event over Lambda's limit", path: "/v1/payments", header: bearer,
			invoke: func(context.Context, events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error) {
				return events.APIGatewayProxyResponse{}, gateway.ErrInvokePayloadTooLarge
			},
			wantType: gateway.ResponseIntegrationFailure, wantMsg: ptr("Request Too Long"), wantErr: "BadRequestException"},
		{name: "function timeout", path: "/v1/payments", header: bearer,
			invoke: func(ctx context.Context, _ events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error) {
				<-ctx.Done()
				return events.APIGatewayProxyResponse{}, ctx.Err()
			},
			wantType: gateway.ResponseIntegrationTimeout, wantMsg: ptr("Endpoint request timed out")},
		{name: "function error", path: "/v1/payments", header: bearer,
			invoke: func(context.Context, events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error) {
				return events.APIGatewayProxyResponse{}, fail
			},
			wantType: gateway.ResponseDefault5XX, wantMsg: ptr("Internal server error")},
		{name: "function panic, reported by its runtime", path: "/v1/payments", header: bearer,
			invoke: gateway.LambdaProxy(lambdaenv.New("api", func() (any, error) {
				return func(events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error) { panic("crash") }, nil
			})),
			wantType: gateway.ResponseDefault5XX, wantMsg: ptr("Internal server error")},
		{name: "malformed proxy response", path: "/v1/payments", header: bearer,
			invoke: func(context.Context, events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error) {
				return events.APIGatewayProxyResponse{StatusCode: 0}, nil
			},
			wantType: gateway.ResponseDefault5XX, wantMsg: ptr("Internal server error")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakes{authorize: tt.authorize, invoke: tt.invoke}
			srv, e := serve(t, f, func(e *gateway.Emulator) {
				e.Responses = all
				e.Timeout = 200 * time.Millisecond
			})
			header := map[string]string{"X-Probe": "probe-1"}
			for k, v := range tt.header {
				header[k] = v
			}
			r := do(t, "POST", srv.URL+tt.path, tt.body, header)
			want := all[tt.wantType].StatusCode
			if r.status != want {
				t.Errorf("status = %d, want %d (%s's)", r.status, want, tt.wantType)
			}
			var got customBody
			if err := json.Unmarshal([]byte(r.body), &got); err != nil {
				t.Fatalf("body %s: %v", r.body, err)
			}
			wantBody := customBody{Type: tt.wantType, Status: want, Message: tt.wantMsg, Request: r.header.Get("X-Amzn-Requestid"), Stage: "test"}
			if diff := cmp.Diff(wantBody, got); diff != "" || got.Request == "" {
				t.Errorf("body mismatch (-want +got):\n%s", diff)
			}
			for name, want := range map[string]string{"Content-Type": "application/problem+json", "X-Echo": "probe-1", "X-Amzn-Errortype": tt.wantErr} {
				if got := r.header.Get(name); got != want {
					t.Errorf("%s = %q, want %q", name, got, want)
				}
			}
			srv.Close()
			if err := e.Wait(t.Context()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A type without a gateway response of its own takes DEFAULT_4XX or
// DEFAULT_5XX by its class (fallback), with its own status unless the default
// sets one; with neither, API Gateway's default body, byte for byte.
func TestEmulatorGatewayResponseFallback(t *testing.T) {
	noStatus := custom(0)
	noStatus.Templates = map[string]string{"text/plain": `{"type":"$context.error.responseType"}`} // the only template
	tests := []struct {
		name       string
		responses  map[string]gateway.GatewayResponse
		header     map[string]string
		wantStatus int
		wantBody   string
		wantCT     string
	}{
		{"4XX default without status", map[string]gateway.GatewayResponse{gateway.ResponseDefault4XX: noStatus}, nil,
			401, `{"type":"UNAUTHORIZED"}`, "application/problem+json"},
		{"4XX default with status", map[string]gateway.GatewayResponse{gateway.ResponseDefault4XX: custom(400)}, nil,
			400, "", "application/problem+json"},
		{"only a 5XX default", map[string]gateway.GatewayResponse{gateway.ResponseDefault5XX: custom(502)}, nil,
			401, `{"message":"Unauthorized"}`, "application/json"},
		{"none", nil, nil, 401, `{"message":"Unauthorized"}`, "application/json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, _ := serve(t, &fakes{}, func(e *gateway.Emulator) { e.Responses = tt.responses })
			r := do(t, "POST", srv.URL+"/v1/payments", "", tt.header)
			if r.status != tt.wantStatus || tt.wantBody != "" && r.body != tt.wantBody {
				t.Errorf("no Authorization = %d %s, want %d %s", r.status, r.body, tt.wantStatus, tt.wantBody)
			}
			if got := r.header.Get("Content-Type"); got != tt.wantCT {
				t.Errorf("Content-Type = %q, want %q", got, tt.wantCT)
			}
		})
	}
}

func TestSubstitute(t *testing.T) {
	c := gateway.Context{RequestID: "r-1", Stage: "prod", ErrorMessage: `say "hi"` + "\n\\", ResponseType: gateway.ResponseThrottled}
	tests := []struct {
		template, want string
	}{
		{`{"m":$context.error.messageString}`, `{"m":"say \"hi\"\n\\"}`},
		{`"$context.error.message"`, "\"say \"hi\"\n\\\""},
		{`$context.requestId.$context.stage`, `r-1.prod`},
		{`$context.error.responseType $context.unknown.thing`, `THROTTLED `},
		{`#set($x = 1) $input.body $util.escapeJavaScript("a")`, `#set($x = 1) $input.body $util.escapeJavaScript("a")`},
	}
	for _, tt := range tests {
		if got := gateway.Substitute(tt.template, c); got != tt.want {
			t.Errorf("Substitute(%q) = %q, want %q", tt.template, got, tt.want)
		}
	}
	if got := gateway.Substitute(`{"m":$context.error.messageString}`, gateway.Context{ErrorMessageNull: true}); got != `{"m":null}` {
		t.Errorf("Substitute of a null message = %q, want {\"m\":null}", got)
	}
}

func ptr(s string) *string { return &s }

// A response type falls back on DEFAULT_4XX or DEFAULT_5XX by its own
// class (supported-gateway-response-types: INTEGRATION_FAILURE, default
// status 504, "defaults to the DEFAULT_5XX type"), not by the status of the
// answer: Lambda's refusal of an event over its limit is an
// INTEGRATION_FAILURE answered 413 by default, and takes DEFAULT_5XX.
func TestEmulatorGatewayResponseFallbackByType(t *testing.T) {
	tooLarge := func(context.Context, events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error) {
		return events.APIGatewayProxyResponse{}, gateway.ErrInvokePayloadTooLarge
	}
	tests := []struct {
		name       string
		responses  map[string]gateway.GatewayResponse
		wantStatus int
		wantType   string // "": API Gateway's default body
	}{
		{"only a 5XX default", map[string]gateway.GatewayResponse{gateway.ResponseDefault5XX: custom(502)}, 502, gateway.ResponseIntegrationFailure},
		{"only a 4XX default", map[string]gateway.GatewayResponse{gateway.ResponseDefault4XX: custom(400)}, 413, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, e := serve(t, &fakes{invoke: tooLarge}, func(e *gateway.Emulator) { e.Responses = tt.responses })
			r := do(t, "POST", srv.URL+"/v1/payments", "{}", bearer)
			if r.status != tt.wantStatus {
				t.Errorf("status = %d, want %d", r.status, tt.wantStatus)
			}
			if tt.wantType == "" {
				if want := `{"message": "Request Too Long"}`; r.body != want {
					t.Errorf("body = %s, want %s", r.body, want)
				}
			} else {
				var got customBody
				if err := json.Unmarshal([]byte(r.body), &got); err != nil || got.Type != tt.wantType {
					t.Errorf("body %s (%v): want the DEFAULT_5XX template for %s", r.body, err, tt.wantType)
				}
			}
			srv.Close()
			if err := e.Wait(t.Context()); err != nil {
				t.Fatal(err)
			}
		})
	}
}
