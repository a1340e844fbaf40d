package gateway_test

import (
	"bufio"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/oncehq/once/internal/gateway"
	"github.com/oncehq/once/internal/lambdatest"
)

// serveOnListener serves an emulator with f behind it through
// gateway.Listener, as the devstack does, and returns its address and log.
func serveOnListener(t *testing.T, f *fakes) (string, *lambdatest.Buffer) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var logs lambdatest.Buffer
	e := &gateway.Emulator{Authorize: f.Authorize, Invoke: f.Invoke, Routes: routes, Stage: "test", Region: "eu-west-1", AccountID: "123456789012", APIID: "api0123456"}
	srv := &http.Server{Handler: e, MaxHeaderBytes: 4 << 10}
	go func() { _ = srv.Serve(gateway.Listener(ln, slog.New(slog.NewJSONHandler(&logs, nil)))) }()
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String(), &logs
}

// raw sends request as bytes on a new connection and reads one response.
func raw(t *testing.T, addr, request string) (*http.Response, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, request); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("read response to %q: %v", request, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(body)
}

func TestListenerAnswersRefusedRequestsWithJSON(t *testing.T) {
	addr, logs := serveOnListener(t, &fakes{})
	const auth = "Authorization: Bearer sk_test_acme\r\n"
	tests := []struct {
		name, request string
		status        int
	}{
		{"NUL in a header value", "GET /v1/payments/pay_1 HTTP/1.1\r\nHost: h\r\n" + auth + "X-A: a\x00b\r\n\r\n", 400},
		{"DEL in a header value", "GET /v1/payments/pay_1 HTTP/1.1\r\nHost: h\r\n" + auth + "X-A: a\x7fb\r\n\r\n", 400},
		{"NUL in the Authorization header", "GET /v1/payments/pay_1 HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer sk\x00\r\n\r\n", 400},
		{"bad Host", "GET /v1/payments/pay_1 HTTP/1.1\r\nHost: a b\r\n" + auth + "\r\n", 400},
		{"two Hosts", "GET /v1/payments/pay_1 HTTP/1.1\r\nHost: a\r\nHost: b\r\n" + auth + "\r\n", 400},
		{"no Host", "GET /v1/payments/pay_1 HTTP/1.1\r\n" + auth + "\r\n", 400},
		{"bad escape in the path", "GET /v1/payments/%zz HTTP/1.1\r\nHost: h\r\n" + auth + "\r\n", 400},
		{"malformed request line", "GET\r\nHost: h\r\n\r\n", 400},
		{"bad header name", "GET /v1/payments/pay_1 HTTP/1.1\r\nHost: h\r\nX A: b\r\n\r\n", 400},
		{"headers too large", "GET /v1/payments/pay_1 HTTP/1.1\r\nHost: h\r\nX-Big: " + strings.Repeat("a", 8<<10) + "\r\n\r\n", 431},
		{"unsupported transfer encoding", "POST /v1/payments HTTP/1.1\r\nHost: h\r\n" + auth + "Transfer-Encoding: gzip\r\n\r\n", 501},
		{"HTTP/2 preface without h2c", "GET / HTTP/2.0\r\nHost: h\r\n\r\n", 505},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := raw(t, addr, tt.request)
			if resp.StatusCode != tt.status {
				t.Errorf("status = %d, want %d (%s)", resp.StatusCode, tt.status, body)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type = %q, want application/json", ct)
			}
			var msg struct{ Message string }
			if err := json.Unmarshal([]byte(body), &msg); err != nil || msg.Message != http.StatusText(tt.status) {
				t.Errorf("body = %q, want {\"message\": %q}", body, http.StatusText(tt.status))
			}
			if resp.Header.Get("X-Amzn-Requestid") == "" || resp.Header.Get("X-Amzn-Errortype") == "" {
				t.Errorf("headers = %v, want x-amzn-RequestId and x-amzn-ErrorType", resp.Header)
			}
		})
	}
	lines := logs.Lines(t)
	if len(lines) != len(tests) {
		t.Errorf("%d log lines, want one per refused request (%d)", len(lines), len(tests))
	}
	for _, l := range lines {
		if l["msg"] != "gateway: request refused before routing" || strings.Contains(l["reason"].(string), "sk_test") {
			t.Errorf("log line %v", l)
		}
	}
}

// TestListenerPassesServedRequests checks that the emulator's own answers,
// a 403 among them, go out untouched, on a kept-alive connection.
func TestListenerPassesServedRequests(t *testing.T) {
	addr, logs := serveOnListener(t, &fakes{})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	for _, tt := range []struct {
		path   string
		status int
		body   string
	}{
		{"/v1/payments/pay_1", 201, `{"ok":true}`},
		{"/v1/nothing", 403, `{"message":"Missing Authentication Token"}`},
		{"/v1/payments/pay_2", 201, `{"ok":true}`},
	} {
		req, _ := http.NewRequestWithContext(t.Context(), "GET", "http://"+addr+tt.path, nil)
		req.Header.Set("Authorization", "Bearer sk_test_acme")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tt.status || string(b) != tt.body {
			t.Errorf("GET %s = %d %s, want %d %s", tt.path, resp.StatusCode, b, tt.status, tt.body)
		}
	}
	if s := logs.String(); s != "" {
		t.Errorf("served requests logged as refused:\n%s", s)
	}
}

// discardConn is a connection whose writes go nowhere.
type discardConn struct{ net.Conn }

func (discardConn) Write(p []byte) (int, error) { return len(p), nil }

// oneConn is a listener with one connection to accept.
type oneConn struct {
	net.Listener
	c net.Conn
}

func (l oneConn) Accept() (net.Conn, error) { return l.c, nil }

// BenchmarkListenerWrite measures what the listener adds to the write of an
// answer of the emulator (a payment's 201).
func BenchmarkListenerWrite(b *testing.B) {
	c, err := gateway.Listener(oneConn{c: discardConn{}}, nil).Accept()
	if err != nil {
		b.Fatal(err)
	}
	reply := []byte("HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nLocation: /v1/payments/pay_1\r\n" +
		"Request-Id: r1\r\nX-Amzn-Requestid: 7d2b5c4e-1f0a-4c3b-9e8d-6a5b4c3d2e1f\r\nDate: Wed, 25 Nov 2026 00:00:00 GMT\r\n" +
		"Content-Length: 150\r\n\r\n" + `{"id":"pay_1","object":"payment","amount":1234,"currency":"usd","customer":"cus_1","status":"pending"}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Write(reply); err != nil {
			b.Fatal(err)
		}
	}
}
