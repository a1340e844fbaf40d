package samtemplate

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestGatewayResponses(t *testing.T) {
	const head = "Resources:\n  Api:\n    Type: AWS::Serverless::Api\n    Properties:\n"
	tests := []struct {
		name    string
		props   string
		want    map[string]GatewayResponse
		wantErr string
	}{
		{name: "none", props: "      StageName: prod\n"},
		{name: "full", props: `      GatewayResponses:
        THROTTLED:
          StatusCode: "429"
          ResponseParameters:
            Headers:
              Retry-After: "'1'"
          ResponseTemplates:
            application/json: '{"code":"rate_limited"}'
        DEFAULT_5XX:
          StatusCode: 502
`, want: map[string]GatewayResponse{
			"THROTTLED":   {StatusCode: 429, Headers: map[string]string{"Retry-After": "'1'"}, Templates: map[string]string{"application/json": `{"code":"rate_limited"}`}},
			"DEFAULT_5XX": {StatusCode: 502},
		}},
		{name: "unknown type", props: "      GatewayResponses:\n        TEAPOT: {StatusCode: \"418\"}\n", wantErr: `unknown response type "TEAPOT"`},
		{name: "unknown property", props: "      GatewayResponses:\n        THROTTLED: {Status: \"429\"}\n", wantErr: `unknown property "Status"`},
		{name: "bad status", props: "      GatewayResponses:\n        THROTTLED: {StatusCode: \"42\"}\n", wantErr: "not a status code"},
		{name: "intrinsic status", props: "      GatewayResponses:\n        THROTTLED: {StatusCode: !Ref Code}\n", wantErr: "not a status code"},
		{name: "unknown parameter", props: "      GatewayResponses:\n        THROTTLED: {ResponseParameters: {Cookies: {a: \"'b'\"}}}\n", wantErr: `unknown key "Cookies"`},
		{name: "header not a string", props: "      GatewayResponses:\n        THROTTLED: {ResponseParameters: {Headers: {A: !Ref B}}}\n", wantErr: "is not a string"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tmpl, err := Parse([]byte(head + tt.props))
			if err != nil {
				t.Fatal(err)
			}
			got, err := GatewayResponses(tmpl.Resources()["Api"])
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("GatewayResponses() error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("GatewayResponses() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}
