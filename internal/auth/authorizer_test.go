package auth_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/internal/auth"
	"github.com/oncehq/once/internal/dynamotest"
)

const (
	methodArn = "arn:aws:execute-api:eu-west-1:123456789012:abc123/prod/POST/v1/payments"
	stageArn  = "arn:aws:execute-api:eu-west-1:123456789012:abc123/prod/*/*"
)

func request(headers map[string]string) events.APIGatewayCustomAuthorizerRequestTypeRequest {
	mv := map[string][]string{}
	for k, v := range headers {
		mv[k] = []string{v}
	}
	return events.APIGatewayCustomAuthorizerRequestTypeRequest{
		Type:              "REQUEST",
		MethodArn:         methodArn,
		Resource:          "/v1/payments",
		Path:              "/v1/payments",
		HTTPMethod:        "POST",
		Headers:           headers,
		MultiValueHeaders: mv,
	}
}

func allow(tenant string) events.APIGatewayCustomAuthorizerResponse {
	return events.APIGatewayCustomAuthorizerResponse{
		PrincipalID: tenant,
		PolicyDocument: events.APIGatewayCustomAuthorizerPolicy{
			Version: "2012-10-17",
			Statement: []events.IAMPolicyStatement{{
				Action: []string{"execute-api:Invoke"}, Effect: "Allow", Resource: []string{stageArn},
			}},
		},
		Context: map[string]any{"tenant": tenant},
	}
}

func deny() events.APIGatewayCustomAuthorizerResponse {
	return events.APIGatewayCustomAuthorizerResponse{
		PrincipalID: "unknown",
		PolicyDocument: events.APIGatewayCustomAuthorizerPolicy{
			Version: "2012-10-17",
			Statement: []events.IAMPolicyStatement{{
				Action: []string{"execute-api:Invoke"}, Effect: "Deny", Resource: []string{stageArn},
			}},
		},
	}
}

func TestAuthorizer(t *testing.T) {
	client := dynamotest.Client(t)
	table := dynamotest.Tables(t, client).ByLogicalID["ApiKeysTable"]
	pairs, err := auth.ParsePairs(auth.DefaultDevAPIKeys)
	if err != nil {
		t.Fatal(err)
	}
	if err := auth.Seed(t.Context(), client, table, pairs); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	a := auth.NewAuthorizer(auth.NewKeys(client, table), slog.New(slog.NewJSONHandler(&logs, nil)))

	tests := []struct {
		name    string
		headers map[string]string
		want    events.APIGatewayCustomAuthorizerResponse
		wantErr error
	}{
		{name: "valid", headers: map[string]string{"Authorization": "Bearer sk_test_acme"}, want: allow("acme")},
		{name: "other tenant", headers: map[string]string{"Authorization": "Bearer sk_test_globex"}, want: allow("globex")},
		{name: "scheme case", headers: map[string]string{"Authorization": "bEARER sk_test_acme"}, want: allow("acme")},
		{name: "header case", headers: map[string]string{"authorization": "Bearer sk_test_acme"}, want: allow("acme")},
		{name: "two spellings, one key", headers: map[string]string{"Authorization": "Bearer sk_test_acme", "authorization": "Bearer sk_test_acme"}, want: allow("acme")},
		// Which of two keys API Gateway's identity source (and so its cache)
		// read is unknown: neither is taken, whatever the map's order.
		{name: "two spellings, two keys", headers: map[string]string{"Authorization": "Bearer sk_test_acme", "AUTHORIZATION": "Bearer sk_test_globex"}, wantErr: auth.ErrUnauthorized},
		{name: "extra spaces", headers: map[string]string{"Authorization": " Bearer   sk_test_acme "}, want: allow("acme")},
		{name: "unknown", headers: map[string]string{"Authorization": "Bearer sk_test_nobody"}, want: deny()},
		{name: "key case matters", headers: map[string]string{"Authorization": "Bearer SK_TEST_ACME"}, want: deny()},
		{name: "missing", headers: map[string]string{"Content-Type": "application/json"}, wantErr: auth.ErrUnauthorized},
		{name: "no headers", headers: nil, wantErr: auth.ErrUnauthorized},
		{name: "empty", headers: map[string]string{"Authorization": ""}, wantErr: auth.ErrUnauthorized},
		{name: "basic", headers: map[string]string{"Authorization": "Basic c2tfdGVzdF9hY21lOg=="}, wantErr: auth.ErrUnauthorized},
		{name: "bare key", headers: map[string]string{"Authorization": "sk_test_acme"}, wantErr: auth.ErrUnauthorized},
		{name: "bearer only", headers: map[string]string{"Authorization": "Bearer"}, wantErr: auth.ErrUnauthorized},
		{name: "bearer blank", headers: map[string]string{"Authorization": "Bearer   "}, wantErr: auth.ErrUnauthorized},
		{name: "no space", headers: map[string]string{"Authorization": "Bearersk_test_acme"}, wantErr: auth.ErrUnauthorized},
		{name: "two tokens", headers: map[string]string{"Authorization": "Bearer sk_test_acme extra"}, wantErr: auth.ErrUnauthorized},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := a.Handle(t.Context(), request(tt.headers))
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) || err.Error() != "Unauthorized" {
					t.Fatalf("Handle = %+v, %v, want error %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Handle = %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Handle mismatch (-want +got):\n%s", diff)
			}
		})
	}

	for _, p := range pairs {
		if strings.Contains(logs.String(), p.Key) {
			t.Errorf("logs contain the API key of %s:\n%s", p.Tenant, logs.String())
		}
	}
	if !strings.Contains(logs.String(), `"key_hash":"`+auth.ShortHash("sk_test_acme")+`"`) {
		t.Errorf("logs do not name the key by its short hash:\n%s", logs.String())
	}
}

func TestAuthorizerTableMissing(t *testing.T) {
	client := dynamotest.Client(t)
	a := auth.NewAuthorizer(auth.NewKeys(client, "once-test-no-such-table"), nil)
	got, err := a.Handle(t.Context(), request(map[string]string{"Authorization": "Bearer sk_test_acme"}))
	if err == nil || errors.Is(err, auth.ErrUnauthorized) {
		t.Fatalf("Handle with a missing table = %+v, %v, want an error other than Unauthorized", got, err)
	}
	if got.PrincipalID != "" || len(got.PolicyDocument.Statement) != 0 {
		t.Errorf("Handle with a missing table returned a policy: %+v", got)
	}
}

func TestAuthorizerBadMethodArn(t *testing.T) {
	a := auth.NewAuthorizer(unreachable{t}, nil)
	req := request(map[string]string{"Authorization": "Bearer sk_test_acme"})
	req.MethodArn = "arn:aws:lambda:eu-west-1:123456789012:function:x"
	if got, err := a.Handle(t.Context(), req); err == nil {
		t.Errorf("Handle(bad method ARN) = %+v, nil, want an error", got)
	}
}

// unreachable is a Lookuper that must not be called.
type unreachable struct{ t *testing.T }

func (u unreachable) Lookup(context.Context, string) (string, error) {
	u.t.Error("Lookup called")
	return "", errors.New("unreachable")
}

func TestStageResource(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{methodArn, stageArn},
		{"arn:aws:execute-api:us-east-1:000000000000:x1/dev/GET/v1/payments/pay_1", "arn:aws:execute-api:us-east-1:000000000000:x1/dev/*/*"},
		{"arn:aws-cn:execute-api:cn-north-1:1:x1/s/GET/", "arn:aws-cn:execute-api:cn-north-1:1:x1/s/*/*"},
		{"arn:aws:execute-api:us-east-1:1:x1/s", "arn:aws:execute-api:us-east-1:1:x1/s/*/*"},
		{"arn:aws:execute-api:us-east-1:1:x1", ""},
		{"arn::execute-api:us-east-1:1:x1/s/GET/", ""},
		{"arn:aws:execute-api::1:x1/s/GET/", ""},
		{"arn:aws:execute-api:us-east-1::x1/s/GET/", ""},
		{"arn:aws:execute-api:us-east-1:1:*/s/GET/", ""},
		{"arn:aws:execute-api:us-east-1:1:x1/*/GET/", ""},
		{"arn:aws:execute-api:us-east-1:*:x1/s/GET/", ""},
		{"arn:aws:execute-api:us-east-?:1:x1/s/GET/", ""},
		{"arn:aws:execute-api:us-east-1:1:x1/s t/GET/", ""},
		{"arn:aws:execute-api:us-east-1:1:x1/s\n/GET/", ""},
		{"arn:aws:lambda:us-east-1:1:function:f", ""},
		{"", ""},
	}
	for _, tt := range tests {
		got, err := auth.StageResource(tt.in)
		if tt.want == "" {
			if err == nil {
				t.Errorf("StageResource(%q) = %q, want an error", tt.in, got)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("StageResource(%q) = %q, %v, want %q", tt.in, got, err, tt.want)
		}
	}
}

// TestAuthorizerRepeatedHeader: an Authorization header sent twice with
// different keys is ambiguous (which one the identity source, and the
// authorizer cache keyed by it, read is not known): 401, whichever value
// Headers holds.
func TestAuthorizerRepeatedHeader(t *testing.T) {
	tests := []struct {
		name    string
		single  string
		multi   []string
		wantErr error
	}{
		{name: "same key twice", single: "Bearer sk_test_acme", multi: []string{"Bearer sk_test_acme", "Bearer sk_test_acme"}},
		{name: "two keys, last in Headers", single: "Bearer sk_test_globex", multi: []string{"Bearer sk_test_acme", "Bearer sk_test_globex"}, wantErr: auth.ErrUnauthorized},
		{name: "two keys, first in Headers", single: "Bearer sk_test_acme", multi: []string{"Bearer sk_test_acme", "Bearer sk_test_globex"}, wantErr: auth.ErrUnauthorized},
		{name: "two keys, no Headers", multi: []string{"Bearer sk_test_acme", "Bearer sk_test_globex"}, wantErr: auth.ErrUnauthorized},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := auth.NewAuthorizer(staticKeys{"sk_test_acme": "acme", "sk_test_globex": "globex"}, nil)
			req := request(nil)
			if tt.single != "" {
				req.Headers = map[string]string{"Authorization": tt.single}
			}
			req.MultiValueHeaders = map[string][]string{"Authorization": tt.multi}
			got, err := a.Handle(t.Context(), req)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Handle(%q, %q) = %+v, %v; want %v", tt.single, tt.multi, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got.Context[auth.ContextTenant] != "acme" {
				t.Fatalf("Handle(%q, %q) = %+v, %v; want an Allow for acme", tt.single, tt.multi, got, err)
			}
		})
	}
}

// staticKeys is a Lookuper of fixed keys, for tests that are not about the
// keys table.
type staticKeys map[string]string

func (s staticKeys) Lookup(_ context.Context, key string) (string, error) {
	if tenant, ok := s[key]; ok {
		return tenant, nil
	}
	return "", auth.ErrUnknownKey
}
