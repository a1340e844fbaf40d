package sigv4_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/oncehq/once/internal/sigv4"
)

var creds = credentials.NewStaticCredentialsProvider("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "session-token")

// verify checks r's signature as AWS does: it signs again, with the same
// credentials, time and signed headers, what the server received, body
// included, and compares. It returns why r is refused, "" when it is not.
func verify(r *http.Request, body []byte, region, service string) string {
	auth := r.Header.Get("Authorization")
	prefix := "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/"
	if !strings.HasPrefix(auth, prefix) {
		return "no SigV4 Authorization: " + auth
	}
	scope, _, _ := strings.Cut(strings.TrimPrefix(auth, prefix), ",")
	if parts := strings.Split(scope, "/"); len(parts) != 4 || parts[1] != region || parts[2] != service || parts[3] != "aws4_request" {
		return "credential scope " + scope
	}
	_, signedList, _ := strings.Cut(auth, "SignedHeaders=")
	signedList, _, _ = strings.Cut(signedList, ",")
	at, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	if err != nil {
		return "X-Amz-Date: " + err.Error()
	}
	again, _ := http.NewRequest(r.Method, "http://"+r.Host+r.URL.RequestURI(), strings.NewReader(string(body)))
	for _, h := range strings.Split(signedList, ";") {
		if h != "host" {
			again.Header[http.CanonicalHeaderKey(h)] = r.Header.Values(h)
		}
	}
	again.Header.Del("Authorization")
	sum := r.Header.Get("X-Amz-Content-Sha256")
	c, _ := creds.Retrieve(context.Background())
	if err := v4.NewSigner().SignHTTP(context.Background(), c, again, sum, service, region, at); err != nil {
		return err.Error()
	}
	if again.Header.Get("Authorization") != auth {
		return "signature mismatch"
	}
	if h := sha256Hex(body); h != sum {
		return "X-Amz-Content-Sha256 is not the body's"
	}
	return ""
}

func TestTransportSigns(t *testing.T) {
	var refused []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if why := verify(r, body, "eu-west-1", "lambda"); why != "" {
			refused = append(refused, why)
			http.Error(w, `{"Message":"Forbidden"}`, http.StatusForbidden)
			return
		}
		if r.Header.Get("X-Amz-Security-Token") != "session-token" {
			refused = append(refused, "no session token")
		}
		_, _ = w.Write(body)
	}))
	defer srv.Close()
	client := &http.Client{Transport: sigv4.NewTransport(nil, aws.NewCredentialsCache(creds), "eu-west-1", sigv4.ServiceLambda)}

	for _, tt := range []struct{ method, path, body string }{
		{"POST", "/v1/charges", `{"amount":1500,"currency":"usd"}`},
		{"GET", "/v1/charges?idempotency_key=once_abc%2Fdef", ""},
		{"GET", "/v1/charges/prch_1", ""},
	} {
		req, _ := http.NewRequestWithContext(t.Context(), tt.method, srv.URL+tt.path, strings.NewReader(tt.body))
		if tt.body == "" {
			req, _ = http.NewRequestWithContext(t.Context(), tt.method, srv.URL+tt.path, nil)
		}
		req.Header.Set("Idempotency-Key", "once_abc")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(got) != tt.body {
			t.Errorf("%s %s = %d %s, want 200 and the body echoed", tt.method, tt.path, resp.StatusCode, got)
		}
		if req.Header.Get("Authorization") != "" {
			t.Errorf("the caller's request was modified: %v", req.Header)
		}
	}
	if len(refused) > 0 {
		t.Errorf("the server refused signatures: %v", refused)
	}
}

// TestVerifyRefusesTampering makes sure the test's verifier can fail: a
// body changed after signing, a wrong region or service.
func TestVerifyRefusesTampering(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got = append(got, verify(r, append(body, 'x'), "eu-west-1", "lambda"), verify(r, body, "us-east-1", "lambda"),
			verify(r, body, "eu-west-1", "execute-api"), verify(r, body, "eu-west-1", "lambda"))
	}))
	defer srv.Close()
	client := &http.Client{Transport: sigv4.NewTransport(nil, creds, "eu-west-1", "lambda")}
	resp, err := client.Post(srv.URL+"/v1/charges", "application/json", strings.NewReader(`{"amount":1}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if len(got) != 4 || got[0] == "" || got[1] == "" || got[2] == "" || got[3] != "" {
		t.Errorf("verify(tampered body, wrong region, wrong service, intact) = %q, want three refusals and a pass", got)
	}
}

func TestTransportFailsWithoutCredentials(t *testing.T) {
	client := &http.Client{Transport: &sigv4.Transport{Region: "eu-west-1", Service: "lambda"}}
	if _, err := client.Get("http://127.0.0.1:1/"); err == nil || !strings.Contains(err.Error(), "Credentials") {
		t.Errorf("Get without credentials = %v, want a sigv4 error", err)
	}
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
