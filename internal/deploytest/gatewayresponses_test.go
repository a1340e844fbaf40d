package deploytest

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/idempotency/problem"
	"github.com/oncehq/once/internal/gateway"
	"github.com/oncehq/once/internal/samtemplate"
)

// gatewayProblem is the body every gateway response renders: the function's
// problem members and the request ID, nothing else.
type gatewayProblem struct {
	Type      string `json:"type"`
	Title     string `json:"title"`
	Status    int    `json:"status"`
	Detail    string `json:"detail"`
	Code      string `json:"code"`
	RequestID string `json:"request_id"`
}

func TestGatewayResponsesAreProblems(t *testing.T) {
	api := template(t).Resources()["Api"]
	responses, err := samtemplate.GatewayResponses(api)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"ACCESS_DENIED", "API_CONFIGURATION_ERROR", "AUTHORIZER_CONFIGURATION_ERROR", "AUTHORIZER_FAILURE",
		"DEFAULT_4XX", "DEFAULT_5XX", "INTEGRATION_FAILURE", "INTEGRATION_TIMEOUT",
		"MISSING_AUTHENTICATION_TOKEN", "REQUEST_TOO_LARGE", "THROTTLED", "UNAUTHORIZED",
	}
	if diff := cmp.Diff(want, sortedKeys(responses)); diff != "" {
		t.Errorf("gateway response types mismatch (-want +got):\n%s", diff)
	}
	readme, err := os.ReadFile(filepath.Join(root(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	codePattern := regexp.MustCompile(`^[a-z][a-z_]*[a-z]$`)
	// Messages API Gateway may put in $context.error.message, the last with
	// what JSON must escape.
	messages := []string{"", "Missing Authentication Token", `Invalid "key" \ value` + "\n\ttab\x01"}
	for _, typ := range sortedKeys(responses) {
		r := responses[typ]
		t.Run(typ, func(t *testing.T) {
			if r.StatusCode == 0 {
				t.Fatalf("StatusCode unset: the body's status would not be the one sent")
			}
			if got := r.Headers["Content-Type"]; got != "'"+problem.ContentType+"'" {
				t.Errorf("Headers.Content-Type = %q, want %q", got, "'"+problem.ContentType+"'")
			}
			for name, expr := range r.Headers {
				if !strings.HasPrefix(expr, "'") || !strings.HasSuffix(expr, "'") || len(expr) < 2 {
					t.Errorf("Headers.%s = %q: want a static, single-quoted value", name, expr)
				}
			}
			if got := sortedKeys(r.Templates); !cmp.Equal(got, []string{"application/json"}) {
				t.Fatalf("ResponseTemplates keys = %v, want [application/json]", got)
			}
			for _, msg := range messages {
				// Every variable but the request IDs (UUIDs API Gateway
				// makes) may come from the client (a path, a user agent, a
				// Host): each gets the message, so that a template that
				// puts one in a string unescaped fails here, not only one
				// that uses $context.error.message.
				c := gateway.Context{
					RequestID: "c0ffee00-0000-4000-8000-000000000001", ExtendedRequestID: "Abc123=",
					APIID: msg, AccountID: msg, Stage: msg, DomainName: msg, HTTPMethod: msg, Path: msg,
					ResourcePath: msg, ResourceID: msg, SourceIP: msg, UserAgent: msg,
					ErrorMessage: msg, ResponseType: typ,
				}
				body := gateway.Substitute(r.Templates["application/json"], c)
				dec := json.NewDecoder(bytes.NewReader([]byte(body)))
				dec.DisallowUnknownFields()
				var p gatewayProblem
				if err := dec.Decode(&p); err != nil {
					t.Fatalf("message %q: body %s is not a problem: %v", msg, body, err)
				}
				if dec.More() {
					t.Fatalf("message %q: body %s has more after the object", msg, body)
				}
				if p.Status != r.StatusCode {
					t.Errorf("status = %d, want the StatusCode %d", p.Status, r.StatusCode)
				}
				if !codePattern.MatchString(p.Code) {
					t.Errorf("code = %q, want snake_case", p.Code)
				}
				if want := problem.DefaultTypeBase + p.Code; p.Type != want {
					t.Errorf("type = %q, want %q", p.Type, want)
				}
				if p.Title == "" || p.Detail == "" && msg != "" {
					t.Errorf("title %q, detail %q: want both", p.Title, p.Detail)
				}
				if p.RequestID != c.RequestID {
					t.Errorf("request_id = %q, want %q", p.RequestID, c.RequestID)
				}
				if !bytes.Contains(readme, []byte(`<a id="`+p.Code+`"></a>`)) {
					t.Errorf("code %s has no row in the README's errors table", p.Code)
				}
			}
			if typ == gateway.ResponseThrottled {
				if got := r.Headers["Retry-After"]; got != "'1'" {
					t.Errorf("THROTTLED Retry-After = %q, want '1'", got)
				}
			}
			if typ == gateway.ResponseUnauthorized && r.Headers["WWW-Authenticate"] == "" {
				t.Errorf("UNAUTHORIZED has no WWW-Authenticate (RFC 9110 requires one on a 401)")
			}
		})
	}
	// The one template that uses the message keeps it, escaped.
	msg := `Invalid "key"`
	body := gateway.Substitute(responses[gateway.ResponseDefault4XX].Templates["application/json"], gateway.Context{ErrorMessage: msg})
	var p gatewayProblem
	if err := json.Unmarshal([]byte(body), &p); err != nil || p.Detail != msg {
		t.Errorf("DEFAULT_4XX detail = %q (%v), want %q", p.Detail, err, msg)
	}
	// Distinct answers keep distinct codes, except the two authorizer faults
	// (the same to a client).
	seen := map[string]string{}
	for _, typ := range sortedKeys(responses) {
		var p gatewayProblem
		_ = json.Unmarshal([]byte(gateway.Substitute(responses[typ].Templates["application/json"], gateway.Context{})), &p)
		if prev, dup := seen[p.Code]; dup && !(prev == "AUTHORIZER_CONFIGURATION_ERROR" && typ == "AUTHORIZER_FAILURE") {
			t.Errorf("%s and %s share code %s", prev, typ, p.Code)
		}
		seen[p.Code] = typ
	}
}

func TestGatewayResponsesStatusCodes(t *testing.T) {
	api := template(t).Resources()["Api"]
	responses, err := samtemplate.GatewayResponses(api)
	if err != nil {
		t.Fatal(err)
	}
	// API Gateway's own status for each, changed only where the problem
	// reads better: 404 for no route (API Gateway's 403), 502 for any
	// integration failure (its 504, or Lambda's own status).
	want := map[string]int{
		"UNAUTHORIZED": 401, "ACCESS_DENIED": 403, "MISSING_AUTHENTICATION_TOKEN": 404,
		"REQUEST_TOO_LARGE": 413, "THROTTLED": 429, "AUTHORIZER_FAILURE": 500,
		"AUTHORIZER_CONFIGURATION_ERROR": 500, "API_CONFIGURATION_ERROR": 500,
		"INTEGRATION_FAILURE": 502, "INTEGRATION_TIMEOUT": 504, "DEFAULT_4XX": 400, "DEFAULT_5XX": 502,
	}
	for typ, status := range want {
		if got := responses[typ].StatusCode; got != status {
			t.Errorf("%s StatusCode = %s, want %d", typ, strconv.Itoa(got), status)
		}
	}
}
