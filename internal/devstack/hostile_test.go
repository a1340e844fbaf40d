package devstack_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/oncehq/once/internal/lambdatest"
)

// TestHostileRequests sends the devstack paths, Host headers and header
// values that once made the API answer 502 or Go's server answer text/plain:
// each gets a JSON answer (a not_found problem from the api for a path, API
// Gateway's JSON shape for what never reaches it), and the stack's output
// holds nothing but JSON lines.
func TestHostileRequests(t *testing.T) {
	env := testEnv(t)
	var out lambdatest.Buffer
	stack := start(t, env, &out)
	addr := strings.TrimPrefix(stack.URL(), "http://")
	const auth = "Authorization: Bearer sk_test_acme\r\n"

	tests := []struct {
		name, request string
		status        int
		contentType   string
		code          string // the problem's code, for the api's answers
	}{
		{"encoded percent", "GET /v1/payments/%25zz HTTP/1.1\r\nHost: h\r\n" + auth + "\r\n", 404, "application/problem+json", "not_found"},
		{"encoded NUL", "GET /v1/payments/%00 HTTP/1.1\r\nHost: h\r\n" + auth + "\r\n", 404, "application/problem+json", "not_found"},
		{"encoded newline forging a log line", "GET /v1/payments/x%0A%7B%22level%22:%22ERROR%22,%22msg%22:%22forged%22%7D HTTP/1.1\r\nHost: h\r\n" + auth + "\r\n",
			404, "application/problem+json", "not_found"},
		{"encoded slash", "GET /v1/payments/pay_a%2Fb HTTP/1.1\r\nHost: h\r\n" + auth + "\r\n", 404, "application/problem+json", "not_found"},
		{"Host that is no host", "GET /v1/payments/pay_x HTTP/1.1\r\nHost: a%zz\r\n" + auth + "\r\n", 404, "application/problem+json", "not_found"},
		{"Host with a path", "GET /v1/payments/pay_x HTTP/1.1\r\nHost: evil.example/v1/payments\r\n" + auth + "\r\n", 400, "application/json", ""},
		{"NUL in a header value", "GET /v1/payments/pay_x HTTP/1.1\r\nHost: h\r\n" + auth + "X-Note: a\x00b\r\n\r\n", 400, "application/json", ""},
		{"DEL in a header value", "GET /v1/payments/pay_x HTTP/1.1\r\nHost: h\r\n" + auth + "X-Note: a\x7fb\r\n\r\n", 400, "application/json", ""},
		{"bad escape in the path", "GET /v1/payments/%zz HTTP/1.1\r\nHost: h\r\n" + auth + "\r\n", 400, "application/json", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := io.WriteString(c, tt.request); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.status || resp.Header.Get("Content-Type") != tt.contentType {
				t.Fatalf("answer = %d %s %s, want %d %s", resp.StatusCode, resp.Header.Get("Content-Type"), body, tt.status, tt.contentType)
			}
			var doc map[string]any
			if err := json.Unmarshal(body, &doc); err != nil {
				t.Fatalf("body %q is not JSON: %v", body, err)
			}
			if tt.code != "" && doc["code"] != tt.code {
				t.Errorf("problem code = %v, want %s (%s)", doc["code"], tt.code, body)
			}
		})
	}

	// Every line of the stack's output is a JSON object, and none is forged.
	for _, line := range out.Lines(t) {
		if line["msg"] == "forged" {
			t.Errorf("a client forged a log line: %v", line)
		}
	}
}
