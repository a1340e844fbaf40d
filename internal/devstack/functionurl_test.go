package devstack_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/devstack"
	"github.com/oncehq/once/internal/dynamotest"
	"github.com/oncehq/once/internal/lambdatest"
	"github.com/oncehq/once/internal/sigv4"
)

// afterSigning is a RoundTripper that changes a request once it is signed.
type afterSigning func(*http.Request)

func (f afterSigning) RoundTrip(r *http.Request) (*http.Response, error) {
	f(r)
	return http.DefaultTransport.RoundTrip(r)
}

// TestProviderFunctionURL calls the provider simulator over real HTTP
// through the devstack's emulation of its function URL (template.yaml:
// AuthType AWS_IAM) and counts the simulator's invocations: a call signed
// with the functions' credentials is served, and one unsigned, or signed
// for another region or service, or with its body changed after signing,
// or signed more than 5 minutes ago, gets Lambda's 403 without the
// simulator running, and charges nothing. The functions sign their calls:
// a charge through the API reaches the simulator.
func TestProviderFunctionURL(t *testing.T) {
	env := testEnv(t)
	var invoked atomic.Int64
	var out lambdatest.Buffer
	stack, err := devstack.Start(t.Context(), devstack.Options{
		Getenv:       func(k string) string { return env[k] },
		Output:       &out,
		TemplatePath: dynamotest.TemplatePath(t),
		StateDir:     t.TempDir(),
		WrapProvider: func(h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				invoked.Add(1)
				h.ServeHTTP(w, r)
			})
		},
	})
	if err != nil {
		t.Fatalf("Start = %v", err)
	}
	t.Cleanup(func() {
		if err := stack.Close(); err != nil {
			t.Errorf("Close = %v", err)
		}
	})
	cfg := stack.Config()
	if cfg.ProviderAuth != config.ProviderAuthIAM || cfg.MailAuth != config.ProviderAuthIAM {
		t.Fatalf("the functions run with ONCE_PROVIDER_AUTH=%s ONCE_MAIL_AUTH=%s, want %s: the template's simulator is AWS_IAM",
			cfg.ProviderAuth, cfg.MailAuth, config.ProviderAuthIAM)
	}
	// The devstack's functions' credentials: dynamoclient's against a local
	// endpoint.
	creds := credentials.NewStaticCredentialsProvider("local", "local", "")
	signed := func(region, service string, now func() time.Time, tamper func(*http.Request)) *http.Client {
		var base http.RoundTripper = http.DefaultTransport
		if tamper != nil {
			base = afterSigning(tamper)
		}
		tr := sigv4.NewTransport(base, creds, region, service)
		tr.Now = now
		return &http.Client{Transport: tr}
	}
	stale := func() time.Time { return time.Now().Add(-6 * time.Minute) }
	changeBody := func(r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(bytes.Replace(b, []byte("1500"), []byte("9999"), 1)))
	}

	run := fmt.Sprint(time.Now().UnixNano())
	tests := []struct {
		name        string
		client      *http.Client
		wantStatus  int
		wantErrType string
		wantField   string // the JSON body's key
		wantCharged int
	}{
		{"the stack's client", stack.ProviderClient(), http.StatusCreated, "", "", 1},
		{"signed by hand as the functions sign", signed(cfg.Region, "lambda", nil, nil), http.StatusCreated, "", "", 1},
		{"unsigned", &http.Client{}, http.StatusForbidden, "AccessDeniedException", "Message", 0},
		{"wrong region", signed("eu-west-1", "lambda", nil, nil), http.StatusForbidden, "InvalidSignatureException", "message", 0},
		{"wrong service", signed(cfg.Region, "execute-api", nil, nil), http.StatusForbidden, "InvalidSignatureException", "message", 0},
		{"body changed after signing", signed(cfg.Region, "lambda", nil, changeBody), http.StatusForbidden, "InvalidSignatureException", "message", 0},
		{"stale X-Amz-Date", signed(cfg.Region, "lambda", stale, nil), http.StatusForbidden, "InvalidSignatureException", "message", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := "once_url_" + run + "_" + strings.ReplaceAll(tt.name, " ", "_")
			req, err := http.NewRequestWithContext(t.Context(), "POST", cfg.ProviderURL+"/v1/charges",
				strings.NewReader(`{"amount":1500,"currency":"USD","customer":"cus_42","source":"tok_visa"}`))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", key)
			before := invoked.Load()
			resp, err := tt.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.wantStatus {
				t.Errorf("POST /v1/charges = %d %s, want %d", resp.StatusCode, body, tt.wantStatus)
			}
			wantInvoked := int64(1)
			if tt.wantStatus == http.StatusForbidden {
				wantInvoked = 0
				var msg map[string]string
				if err := json.Unmarshal(body, &msg); err != nil || len(msg) != 1 || msg[tt.wantField] == "" {
					t.Errorf("403 body = %s, want {%q: ...}", body, tt.wantField)
				}
				if got := resp.Header.Get("X-Amzn-Errortype"); got != tt.wantErrType {
					t.Errorf("x-amzn-ErrorType = %q, want %q", got, tt.wantErrType)
				}
			}
			if n := invoked.Load() - before; n != wantInvoked {
				t.Errorf("simulator invocations = %d, want %d", n, wantInvoked)
			}
			if n := charges(t, stack, key); n != tt.wantCharged {
				t.Errorf("charges under the key = %d, want %d", n, tt.wantCharged)
			}
		})
	}

	t.Run("the api function signs", func(t *testing.T) {
		before := invoked.Load()
		r := call(t, "POST", stack.URL()+"/v1/charges", "sk_test_acme", "url-"+run,
			`{"amount": 1500, "currency": "USD", "customer": "cus_42", "source": "tok_visa"}`)
		if r.status != http.StatusCreated {
			t.Fatalf("POST /v1/charges through the API = %d %s, want 201", r.status, r.body)
		}
		if n := invoked.Load() - before; n != 1 {
			t.Errorf("simulator invocations = %d, want 1", n)
		}
	})
	if refused := strings.Count(out.String(), "function url: request refused"); refused != 5 {
		t.Errorf("%d refusals logged, want 5", refused)
	}
}
