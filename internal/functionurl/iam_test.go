package functionurl_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/internal/functionurl"
	"github.com/oncehq/once/internal/sigv4"
)

const region = "us-east-1"

// local are the credentials the devstack gives its functions
// (dynamoclient's, against a local endpoint).
var local = credentials.NewStaticCredentialsProvider("local", "local", "")

// server serves a function that echoes its body behind an AWS_IAM function
// URL that lets in creds, and counts its invocations.
func server(t *testing.T, creds aws.CredentialsProvider) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var invoked atomic.Int64
	fn := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		invoked.Add(1)
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Idempotency-Key", r.Header.Get("Idempotency-Key"))
		_, _ = w.Write(body)
	})
	srv := httptest.NewServer(&functionurl.IAM{Next: fn, Credentials: creds, Region: region, Function: "echo"})
	t.Cleanup(srv.Close)
	return srv, &invoked
}

// after is a RoundTripper that changes a request after it was signed, on its
// way to the server.
type after func(*http.Request)

func (f after) RoundTrip(r *http.Request) (*http.Response, error) {
	f(r)
	return http.DefaultTransport.RoundTrip(r)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// replaceBody replaces the signed body with another of the same length.
func replaceBody(r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	b = bytes.Replace(b, []byte("1500"), []byte("9999"), 1)
	r.Body = io.NopCloser(bytes.NewReader(b))
}

// answer is what the function URL answered, and whether the function ran.
type answer struct {
	Status  int
	ErrType string
	Body    map[string]string
	Invoked int64
}

func TestIAM(t *testing.T) {
	now := time.Now
	tests := []struct {
		name    string
		creds   aws.CredentialsProvider // signing; local when nil
		region  string                  // of the signature; region when ""
		service string                  // lambda when ""
		signAt  func() time.Time
		tamper  func(*http.Request) // after signing
		unsign  bool
		method  string // POST when ""
		path    string
		want    answer // Body: only the keys checked
		wantMsg string // a substring of the message
	}{
		{name: "signed POST", path: "/v1/charges", want: answer{Status: 200, Invoked: 1}},
		{name: "signed GET with an escaped query", method: "GET", path: "/v1/charges?idempotency_key=once_a%2Fb+c", want: answer{Status: 200, Invoked: 1}},
		{name: "signed GET with an escaped path", method: "GET", path: "/v1/charges/prch_a%2Fb%20c", want: answer{Status: 200, Invoked: 1}},
		{name: "signed 4 minutes ago, within the skew", path: "/v1/charges", signAt: func() time.Time { return now().Add(-4 * time.Minute) }, want: answer{Status: 200, Invoked: 1}},
		{name: "unsigned", path: "/v1/charges", unsign: true,
			want:    answer{Status: 403, ErrType: "AccessDeniedException"},
			wantMsg: "Forbidden. For troubleshooting Function URL authorization issues"},
		{name: "wrong region", path: "/v1/charges", region: "eu-west-1",
			want:    answer{Status: 403, ErrType: "InvalidSignatureException"},
			wantMsg: "Credential should be scoped to a valid region, not 'eu-west-1'."},
		{name: "wrong service", path: "/v1/charges", service: "execute-api",
			want:    answer{Status: 403, ErrType: "InvalidSignatureException"},
			wantMsg: "Credential should be scoped to correct service: 'lambda'."},
		{name: "tampered body", path: "/v1/charges", tamper: replaceBody,
			want:    answer{Status: 403, ErrType: "InvalidSignatureException"},
			wantMsg: "The request signature we calculated does not match"},
		{name: "tampered body, hash header dropped", path: "/v1/charges",
			tamper: func(r *http.Request) { replaceBody(r); r.Header.Del("X-Amz-Content-Sha256") },
			want:   answer{Status: 403, ErrType: "InvalidSignatureException"}, wantMsg: "does not match"},
		{name: "unsigned payload hash", path: "/v1/charges",
			tamper: func(r *http.Request) { r.Header.Set("X-Amz-Content-Sha256", "UNSIGNED-PAYLOAD") },
			want:   answer{Status: 403, ErrType: "InvalidSignatureException"}, wantMsg: "does not match"},
		{name: "signed header changed after signing", path: "/v1/charges",
			tamper: func(r *http.Request) { r.Header.Set("Idempotency-Key", "once_other") },
			want:   answer{Status: 403, ErrType: "InvalidSignatureException"}, wantMsg: "does not match"},
		{name: "header added after signing", path: "/v1/charges",
			tamper: func(r *http.Request) { r.Header.Set("X-Extra", "1") },
			want:   answer{Status: 200, Invoked: 1}}, // unsigned headers pass, as in AWS
		{name: "path changed after signing", path: "/v1/charges",
			tamper: func(r *http.Request) { r.URL.Path = "/v1/refunds" },
			want:   answer{Status: 403, ErrType: "InvalidSignatureException"}, wantMsg: "does not match"},
		{name: "query changed after signing", method: "GET", path: "/v1/charges?idempotency_key=a",
			tamper: func(r *http.Request) { r.URL.RawQuery = "idempotency_key=b" },
			want:   answer{Status: 403, ErrType: "InvalidSignatureException"}, wantMsg: "does not match"},
		{name: "stale X-Amz-Date", path: "/v1/charges", signAt: func() time.Time { return now().Add(-6 * time.Minute) },
			want:    answer{Status: 403, ErrType: "InvalidSignatureException"},
			wantMsg: "Signature expired: "},
		{name: "X-Amz-Date ahead", path: "/v1/charges", signAt: func() time.Time { return now().Add(6 * time.Minute) },
			want:    answer{Status: 403, ErrType: "InvalidSignatureException"},
			wantMsg: "Signature not yet current: "},
		{name: "X-Amz-Date changed after signing", path: "/v1/charges",
			tamper: func(r *http.Request) {
				r.Header.Set("X-Amz-Date", now().UTC().Add(-time.Hour*24).Format("20060102T150405Z"))
			},
			want: answer{Status: 403, ErrType: "InvalidSignatureException"}, wantMsg: "Date in Credential scope does not match"},
		{name: "another secret", path: "/v1/charges", creds: credentials.NewStaticCredentialsProvider("local", "other", ""),
			want: answer{Status: 403, ErrType: "InvalidSignatureException"}, wantMsg: "does not match"},
		{name: "unknown access key", path: "/v1/charges", creds: credentials.NewStaticCredentialsProvider("AKIDEXAMPLE", "local", ""),
			want: answer{Status: 403, ErrType: "UnrecognizedClientException"}, wantMsg: "security token included in the request is invalid"},
		{name: "not SigV4", path: "/v1/charges", tamper: func(r *http.Request) { r.Header.Set("Authorization", "Bearer sk_test_acme") },
			want: answer{Status: 403, ErrType: "IncompleteSignatureException"}},
		{name: "no Signature", path: "/v1/charges",
			tamper: func(r *http.Request) {
				a := r.Header.Get("Authorization")
				r.Header.Set("Authorization", a[:strings.Index(a, ", Signature=")])
			},
			want: answer{Status: 403, ErrType: "IncompleteSignatureException"}, wantMsg: "requires 'Signature' parameter"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, invoked := server(t, local)
			creds, reg, svc := tt.creds, tt.region, tt.service
			if creds == nil {
				creds = local
			}
			if reg == "" {
				reg = region
			}
			if svc == "" {
				svc = functionurl.Service
			}
			var base http.RoundTripper = http.DefaultTransport
			if tt.tamper != nil {
				base = after(tt.tamper)
			}
			tr := sigv4.NewTransport(base, creds, reg, svc)
			tr.Now = tt.signAt
			client := &http.Client{Transport: tr}
			if tt.unsign {
				client = &http.Client{}
			}
			method := tt.method
			if method == "" {
				method = "POST"
			}
			body := `{"amount":1500,"currency":"usd","source":"tok_visa"}`
			if method == "GET" {
				body = ""
			}
			req, err := http.NewRequestWithContext(t.Context(), method, srv.URL+tt.path, strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", "once_abc")
			got := do(t, client, req)
			got.Invoked = invoked.Load()
			if got.Status == 200 {
				if got.Body["echo"] != body {
					t.Errorf("the function got body %q, want %q", got.Body["echo"], body)
				}
				got.Body = nil
			}
			msg := got.Body["message"] + got.Body["Message"]
			got.Body = nil
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("answer mismatch (-want +got):\n%s(message %q)", diff, msg)
			}
			if !strings.Contains(msg, tt.wantMsg) {
				t.Errorf("message = %q, want it to hold %q", msg, tt.wantMsg)
			}
		})
	}
}

// do sends req and returns the answer: a 200's body under "echo", a
// refusal's JSON body as is.
func do(t *testing.T, client *http.Client, req *http.Request) answer {
	t.Helper()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	a := answer{Status: resp.StatusCode, ErrType: resp.Header.Get("X-Amzn-Errortype")}
	if resp.StatusCode == http.StatusOK {
		a.Body = map[string]string{"echo": string(b)}
		return a
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("refusal Content-Type = %q, want application/json", ct)
	}
	if resp.Header.Get("X-Amzn-Requestid") == "" {
		t.Error("refusal without x-amzn-RequestId")
	}
	if err := json.Unmarshal(b, &a.Body); err != nil || len(a.Body) != 1 {
		t.Errorf("refusal body %q: want one JSON message (%v)", b, err)
	}
	return a
}

// TestIAMSessionToken: with credentials that carry a session token, a
// request without it, or with another, is refused as AWS refuses an unknown
// token; with it, served.
func TestIAMSessionToken(t *testing.T) {
	withToken := credentials.NewStaticCredentialsProvider("local", "local", "token-1")
	srv, invoked := server(t, withToken)
	for _, tt := range []struct {
		name  string
		creds aws.CredentialsProvider
		want  int
	}{
		{"the token", withToken, 200},
		{"no token", local, 403},
		{"another token", credentials.NewStaticCredentialsProvider("local", "local", "token-2"), 403},
	} {
		req, _ := http.NewRequestWithContext(t.Context(), "POST", srv.URL+"/v1/charges", strings.NewReader("{}"))
		got := do(t, &http.Client{Transport: sigv4.NewTransport(nil, tt.creds, region, functionurl.Service)}, req)
		if got.Status != tt.want {
			t.Errorf("%s: status = %d, want %d", tt.name, got.Status, tt.want)
		}
	}
	if n := invoked.Load(); n != 1 {
		t.Errorf("invocations = %d, want 1", n)
	}
}

// TestIAMCurl checks the verifier against a signer other than the SDK's:
// curl's --aws-sigv4, which signs fewer headers (not Content-Length).
func TestIAMCurl(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skipf("curl: %v", err)
	}
	srv, invoked := server(t, local)
	for _, tt := range []struct {
		user string
		want string
	}{
		{"local:local", "200"},
		{"local:other", "403"},
	} {
		out, err := exec.CommandContext(t.Context(), "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
			"--aws-sigv4", "aws:amz:"+region+":lambda", "--user", tt.user,
			"-H", "Content-Type: application/json", "-H", "Idempotency-Key: once_abc",
			"-d", `{"amount":1500,"currency":"USD","source":"tok_visa"}`, srv.URL+"/v1/charges?x=a%2Fb").Output()
		if err != nil {
			t.Fatalf("curl: %v", err)
		}
		if string(out) != tt.want {
			t.Errorf("curl --user %s = %s, want %s", tt.user, out, tt.want)
		}
	}
	if n := invoked.Load(); n != 1 {
		t.Errorf("invocations = %d, want 1", n)
	}
}

// TestIAMPayloadLimit: a body over Lambda's 6 MB limit is refused before
// the function runs.
func TestIAMPayloadLimit(t *testing.T) {
	srv, invoked := server(t, local)
	req, _ := http.NewRequestWithContext(t.Context(), "POST", srv.URL+"/v1/charges", bytes.NewReader(make([]byte, functionurl.MaxPayload+1)))
	got := do(t, &http.Client{Transport: sigv4.NewTransport(nil, local, region, functionurl.Service)}, req)
	if got.Status != http.StatusRequestEntityTooLarge || invoked.Load() != 0 {
		t.Errorf("status = %d, invocations %d, want 413 and 0", got.Status, invoked.Load())
	}
}

// BenchmarkIAM measures the verification of one signed charge request (the
// devstack's cost per provider call, beside the caller's signing).
func BenchmarkIAM(b *testing.B) {
	body := `{"amount":1500,"currency":"usd","customer":"cus_42","source":"tok_visa"}`
	var signed *http.Request
	capture := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		signed = r
		return nil, errors.New("captured, not sent")
	})
	req, _ := http.NewRequest("POST", "http://127.0.0.1:3001/v1/charges", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "once_abc")
	_, _ = (&http.Client{Transport: sigv4.NewTransport(capture, local, region, functionurl.Service)}).Do(req)
	if signed == nil {
		b.Fatal("the request was not signed")
	}
	h := &functionurl.IAM{Next: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}), Credentials: local, Region: region}
	b.ReportAllocs()
	for b.Loop() {
		r := httptest.NewRequest("POST", "/v1/charges", strings.NewReader(body))
		r.Host = signed.Host
		r.Header = signed.Header.Clone()
		r.ContentLength = int64(len(body))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			b.Fatalf("status %d %s", w.Code, w.Body)
		}
	}
}
