package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/memory"
	"github.com/oncehq/once/idempotency/problem"
	"github.com/oncehq/once/internal/fault"
	"github.com/oncehq/once/internal/httpapi"
	"github.com/oncehq/once/internal/lambdatest"
	"github.com/oncehq/once/internal/metrics"
)

// tenantHeader carries the tenant in these tests; in production it comes
// from the authorizer context only (apigw.Tenant).
const tenantHeader = "X-Test-Tenant"

func testTenant(r *http.Request) (string, bool) {
	t := r.Header.Get(tenantHeader)
	return t, t != ""
}

type env struct {
	h       http.Handler
	store   *memory.Store
	logs    *lambdatest.Buffer
	metrics *lambdatest.Buffer
}

// newEnv serves a create route in Atomic mode (a "thing" item inserted as an
// effect, 201), a read route answering the tenant, and a route that fails
// with an internal error, behind the router.
func newEnv(t *testing.T, faults bool) *env {
	t.Helper()
	e := &env{store: memory.New(), logs: &lambdatest.Buffer{}, metrics: &lambdatest.Buffer{}}
	var hook func(context.Context, string)
	if faults {
		hook = fault.Check
	}
	mw, err := idempotency.New(idempotency.Config{Store: e.store, Tenant: testTenant, OnError: httpapi.WriteError, Hook: hook})
	if err != nil {
		t.Fatal(err)
	}
	create := func(w http.ResponseWriter, r *http.Request) {
		v, ok := httpapi.DecodeJSON(w, r, func(b []byte) (map[string]any, error) {
			var v map[string]any
			if err := json.Unmarshal(b, &v); err != nil {
				return nil, problem.Invalid("", "the body is not a JSON object")
			}
			return v, nil
		})
		if !ok {
			return
		}
		call, ok := idempotency.Begin(w, r)
		if !ok {
			return
		}
		call.AddEffect(memory.Insert("things", call.Key().ID(), v))
		httpapi.WriteJSON(w, r, http.StatusCreated, v, func(h http.Header) { h.Set("Location", "/v1/things/1") })
	}
	read := func(w http.ResponseWriter, r *http.Request) {
		httpapi.NoteRead(r)
		tenant, ok := httpapi.Tenant(r)
		if !ok {
			httpapi.WriteError(w, r, idempotency.ErrNoTenant)
			return
		}
		httpapi.WriteJSON(w, r, http.StatusOK, map[string]string{"tenant": tenant, "id": r.PathValue("id")}, nil)
	}
	broken := func(w http.ResponseWriter, r *http.Request) {
		httpapi.WriteError(w, r, errors.New("dial tcp 10.0.0.1:443: secret internal detail"))
	}
	e.h = httpapi.NewHandler(httpapi.Deps{
		Routes: []httpapi.Route{
			{Pattern: "POST /v1/things", Handler: mw.Atomic("POST /v1/things", http.HandlerFunc(create))},
			{Pattern: "GET /v1/things/{id}", Handler: http.HandlerFunc(read)},
			{Pattern: "POST /v1/broken", Handler: http.HandlerFunc(broken)},
		},
		Tenant:  testTenant,
		Logger:  slog.New(slog.NewJSONHandler(e.logs, nil)),
		Metrics: metrics.New(e.metrics, "once", map[string]string{"Service": "api"}),
		Fault:   faults,
	})
	return e
}

type req struct {
	method, path, body string
	tenant, key, ct    string
	header             http.Header
}

func (e *env) do(t *testing.T, rq req) *httptest.ResponseRecorder {
	t.Helper()
	if rq.method == "" {
		rq.method = http.MethodPost
	}
	if rq.path == "" {
		rq.path = "/v1/things"
	}
	r := httptest.NewRequest(rq.method, rq.path, strings.NewReader(rq.body))
	for k, v := range rq.header {
		r.Header[k] = v
	}
	if rq.tenant != "" {
		r.Header.Set(tenantHeader, rq.tenant)
	}
	if rq.key != "" {
		r.Header.Set("Idempotency-Key", rq.key)
	}
	if rq.ct != "" {
		r.Header.Set("Content-Type", rq.ct)
	}
	w := httptest.NewRecorder()
	e.h.ServeHTTP(w, r)
	return w
}

func problemOf(t *testing.T, w *httptest.ResponseRecorder) map[string]any {
	t.Helper()
	if ct := w.Header().Get("Content-Type"); ct != problem.ContentType {
		t.Fatalf("Content-Type = %q, want %q (body %s)", ct, problem.ContentType, w.Body)
	}
	var p map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
		t.Fatalf("problem body %q: %v", w.Body, err)
	}
	if p["status"] != float64(w.Code) {
		t.Errorf("problem status = %v, want the response's %d", p["status"], w.Code)
	}
	if p["type"] != problem.DefaultTypeBase+p["code"].(string) {
		t.Errorf("problem type = %v, want %s%v", p["type"], problem.DefaultTypeBase, p["code"])
	}
	return p
}

func TestRoutes(t *testing.T) {
	e := newEnv(t, false)
	tests := []struct {
		method, path string
		want         int
		wantAllow    string
	}{
		{"GET", "/", 404, ""},
		{"GET", "/v1/broken", 405, "POST"},
		{"GET", "/v1/things", 405, "POST"},
		{"GET", "/v1/things/x/y", 404, ""},
		{"DELETE", "/v1/things", 405, "POST"},
		{"PUT", "/v1/things/abc", 405, "GET, HEAD"},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			w := e.do(t, req{method: tt.method, path: tt.path, tenant: "acme"})
			if w.Code != tt.want {
				t.Fatalf("status = %d %s, want %d", w.Code, w.Body, tt.want)
			}
			problemOf(t, w)
			if got := w.Header().Get("Allow"); got != tt.wantAllow {
				t.Errorf("Allow = %q, want %q", got, tt.wantAllow)
			}
		})
	}
	if w := e.do(t, req{method: "GET", path: "/v1/things/abc", tenant: "globex"}); w.Code != 200 || !strings.Contains(w.Body.String(), `"tenant":"globex"`) {
		t.Errorf("GET = %d %s, want 200 for tenant globex", w.Code, w.Body)
	}
	if w := e.do(t, req{method: "GET", path: "/v1/things/abc"}); w.Code != http.StatusUnauthorized {
		t.Errorf("GET without tenant = %d, want 401", w.Code)
	}
}

func TestDecodeJSON(t *testing.T) {
	e := newEnv(t, false)
	for _, tt := range []struct {
		name, ct string
		header   http.Header
		want     int
	}{
		{name: "json", ct: "application/json", want: 201},
		{name: "utf-8", ct: "application/json; charset=UTF-8", want: 201},
		{name: "no content type", want: 415},
		{name: "text/plain", ct: "text/plain", want: 415},
		{name: "form", ct: "application/x-www-form-urlencoded", want: 415},
		{name: "+json suffix", ct: "application/merge-patch+json", want: 415},
		{name: "latin-1", ct: "application/json; charset=iso-8859-1", want: 415},
		{name: "two content types", header: http.Header{"Content-Type": {"application/json", "application/json"}}, want: 415},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := e.do(t, req{tenant: "acme", key: "k-" + strings.NewReplacer(" ", "-", "+", "-").Replace(tt.name), ct: tt.ct, header: tt.header, body: `{"a":1}`})
			if w.Code != tt.want {
				t.Fatalf("POST = %d %s, want %d", w.Code, w.Body, tt.want)
			}
			if tt.want == 415 && problemOf(t, w)["code"] != "unsupported_media_type" {
				t.Errorf("problem = %s, want unsupported_media_type", w.Body)
			}
		})
	}
}

func TestLogAndMetrics(t *testing.T) {
	e := newEnv(t, false)
	const rawKey = "raw-key-must-not-be-logged"
	const body = `{"secret":"Order 1001"}`
	e.do(t, req{tenant: "acme", key: rawKey, ct: "application/json", body: body, header: http.Header{"Authorization": {"Bearer sk_test_secret"}}})
	e.do(t, req{tenant: "acme", key: rawKey, ct: "application/json", body: body})
	e.do(t, req{tenant: "acme", key: rawKey, ct: "application/json", body: `{"other":1}`})
	e.do(t, req{tenant: "acme", key: "other", ct: "text/plain", body: body})
	e.do(t, req{method: "GET", path: "/v1/things/x", tenant: "acme"})
	e.do(t, req{path: "/v1/broken", tenant: "acme"})

	logs := e.logs.Lines(t)
	if len(logs) != 6 {
		t.Fatalf("%d log lines, want 6:\n%s", len(logs), e.logs)
	}
	type line struct {
		status         float64
		outcome, route string
		storeCalls     float64
		key            bool
		level          string
	}
	want := []line{
		{201, "created", "POST /v1/things", 1, true, "INFO"},
		{201, "replayed", "POST /v1/things", 1, true, "INFO"},
		{422, "mismatch", "POST /v1/things", 1, true, "INFO"},
		{415, "rejected", "POST /v1/things", 0, true, "INFO"},
		{200, "read", "GET /v1/things/{id}", 0, false, "INFO"},
		{500, "", "POST /v1/broken", 0, false, "ERROR"},
	}
	for i, l := range logs {
		for _, k := range []string{"time", "level", "msg", "request_id", "tenant", "method", "route", "status", "outcome", "key", "store_calls", "store_latency_ms", "duration_ms"} {
			if _, ok := l[k]; !ok {
				t.Errorf("line %d lacks %q: %v", i, k, l)
			}
		}
		got := line{l["status"].(float64), l["outcome"].(string), l["route"].(string), l["store_calls"].(float64), l["key"] != "", l["level"].(string)}
		if got != want[i] {
			t.Errorf("line %d = %+v, want %+v", i, got, want[i])
		}
		if l["tenant"] != "acme" {
			t.Errorf("line %d tenant = %v, want acme", i, l["tenant"])
		}
	}
	if k := logs[0]["key"].(string); len(k) != 12 || k != idempotency.NewKey("acme", rawKey).Short() {
		t.Errorf("key = %q, want the 12-character hash prefix", k)
	}
	if got := logs[5]["error"]; got != "dial tcp 10.0.0.1:443: secret internal detail" {
		t.Errorf("500's log line error = %v, want the internal error", got)
	}
	for _, secret := range []string{rawKey, "sk_test_secret", "Order 1001"} {
		if strings.Contains(e.logs.String(), secret) {
			t.Errorf("logs contain %q", secret)
		}
	}

	var names []string
	for _, m := range e.metrics.Lines(t) {
		for _, d := range m["_aws"].(map[string]any)["CloudWatchMetrics"].([]any) {
			for _, mm := range d.(map[string]any)["Metrics"].([]any) {
				name := mm.(map[string]any)["Name"].(string)
				names = append(names, name)
				if m[name] != 1.0 || m["Service"] != "api" {
					t.Errorf("metric document %v: want %s = 1 and Service = api", m, name)
				}
			}
		}
	}
	if diff := cmp.Diff([]string{"reserve_created", "reserve_replayed", "reserve_key_misuse"}, names); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}
}

func TestFault(t *testing.T) {
	for _, point := range []string{fault.AfterReserve, fault.AfterComplete} {
		t.Run(point, func(t *testing.T) {
			e := newEnv(t, true)
			func() {
				defer func() {
					if _, ok := fault.AsCrash(recover()); !ok {
						t.Errorf("request with Once-Fault: %s did not crash", point)
					}
				}()
				e.do(t, req{tenant: "acme", key: "k", ct: "application/json", body: `{"a":1}`, header: http.Header{fault.Header: {point}}})
			}()
			logs := e.logs.Lines(t)
			if len(logs) != 1 || logs[0]["crash"] != point || logs[0]["status"] != 500.0 {
				t.Errorf("log lines = %v, want one with crash %s and status 500", logs, point)
			}
			// In Atomic mode both points come after the commit: the retry replays.
			w := e.do(t, req{tenant: "acme", key: "k", ct: "application/json", body: `{"a":1}`})
			if w.Code != http.StatusCreated || w.Header().Get(idempotency.ReplayedHeader) != "true" {
				t.Errorf("retry after crash = %d (replayed %q), want a 201 replay", w.Code, w.Header().Get(idempotency.ReplayedHeader))
			}
			if n := len(e.store.Items("things")); n != 1 {
				t.Errorf("%d things, want 1", n)
			}
		})
	}
	t.Run("disabled", func(t *testing.T) {
		e := newEnv(t, false)
		w := e.do(t, req{tenant: "acme", key: "k", ct: "application/json", body: `{"a":1}`, header: http.Header{fault.Header: {fault.AfterComplete}}})
		if w.Code != http.StatusCreated {
			t.Errorf("status = %d, want 201 (injection disabled)", w.Code)
		}
	})
}

func TestWriteError(t *testing.T) {
	secret := errors.New("dial tcp 10.0.0.1:443: secret internal detail")
	tests := []struct {
		name       string
		err        error
		wantStatus int
		wantCode   string
		wantRetry  string
	}{
		{"no tenant", idempotency.ErrNoTenant, 401, "unauthorized", ""},
		{"key missing", idempotency.ErrKeyMissing, 400, "idempotency_key_missing", ""},
		{"key invalid", &idempotency.KeyError{Reason: "the key is empty"}, 400, "idempotency_key_invalid", ""},
		{"key reused", idempotency.ErrKeyReused, 422, "idempotency_key_reused", ""},
		{"in progress", &idempotency.InProgressError{RetryAfter: 2500 * 1e6}, 409, "idempotency_request_in_progress", "3"},
		{"too large", &idempotency.BodyTooLargeError{Limit: 64 << 10}, 413, "payload_too_large", ""},
		{"body invalid", idempotency.ErrBodyInvalid, 400, "invalid_request", ""},
		{"field", problem.Invalid("amount", "must be at least 1"), 400, "invalid_request", ""},
		{"media type", httpapi.ErrUnsupportedMediaType, 415, "unsupported_media_type", ""},
		{"not found", fmt.Errorf("things: %w", httpapi.ErrNotFound), 404, "not_found", ""},
		{"method", httpapi.ErrMethodNotAllowed, 405, "method_not_allowed", ""},
		{"store unavailable", fmt.Errorf("%w: %w", idempotency.ErrUnavailable, secret), 503, "store_unavailable", "1"},
		{"anything else", secret, 500, "internal_error", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			httpapi.WriteError(w, httptest.NewRequest("POST", "/v1/things", nil), tt.err)
			if w.Code != tt.wantStatus {
				t.Errorf("status = %d, want %d", w.Code, tt.wantStatus)
			}
			p := problemOf(t, w)
			if p["code"] != tt.wantCode {
				t.Errorf("code = %v, want %s", p["code"], tt.wantCode)
			}
			if got := w.Header().Get("Retry-After"); got != tt.wantRetry {
				t.Errorf("Retry-After = %q, want %q", got, tt.wantRetry)
			}
			if strings.Contains(w.Body.String(), "secret") {
				t.Errorf("body %s leaks the internal error", w.Body)
			}
			for _, k := range []string{"type", "title", "status", "detail", "code"} {
				if _, ok := p[k]; !ok {
					t.Errorf("problem lacks %q: %s", k, w.Body)
				}
			}
		})
	}
}

func TestProblemRendering(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{problem.Invalid("metadata.order", "must be a string"),
			`{"type":"https://github.com/oncehq/once/blob/main/README.md#invalid_request","title":"Invalid request","status":400,"detail":"metadata.order must be a string.","code":"invalid_request","field":"metadata.order"}`},
		{problem.Invalid("", "the body must be a JSON object"),
			`{"type":"https://github.com/oncehq/once/blob/main/README.md#invalid_request","title":"Invalid request","status":400,"detail":"The body must be a JSON object.","code":"invalid_request","field":null}`},
		{&idempotency.KeyError{Reason: "character 3 is outside 0x21-0x7E"},
			`{"type":"https://github.com/oncehq/once/blob/main/README.md#idempotency_key_invalid","title":"Idempotency-Key invalid","status":400,"detail":"The Idempotency-Key header must be given once, as a token or a structured-field string of 1 to 255 characters in the range 0x21-0x7E; here character 3 is outside 0x21-0x7E.","code":"idempotency_key_invalid"}`},
	}
	for _, tt := range tests {
		w := httptest.NewRecorder()
		httpapi.WriteError(w, httptest.NewRequest("POST", "/", nil), tt.err)
		if got := w.Body.String(); got != tt.want {
			t.Errorf("WriteError(%v) body =\n%s\nwant\n%s", tt.err, got, tt.want)
		}
	}
}

// TestProblemCodesDocumented: every problem code declared anywhere in the
// code has its row in README.md's errors table, with the anchor its problem
// type points at.
func TestProblemCodesDocumented(t *testing.T) {
	root := filepath.Join("..", "..")
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	declared := regexp.MustCompile(`(?s)(?:problem\.New\(\s*http\.Status\w+,\s*|Details\{[^}]*?Code:\s*)"([a-z_]+)"`)
	codes := map[string]string{}
	for _, dir := range []string{"idempotency", "internal"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			raw, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			var src []byte // the code without its comment lines
			for _, line := range strings.SplitAfter(string(raw), "\n") {
				if !strings.HasPrefix(strings.TrimSpace(line), "//") {
					src = append(src, line...)
				}
			}
			for _, m := range declared.FindAllSubmatch(src, -1) {
				codes[string(m[1])] = path
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, must := range []string{"internal_error", "invalid_request", "not_found", "idempotency_request_in_progress"} {
		if codes[must] == "" {
			t.Errorf("no declaration of %s found: the scan is broken", must)
		}
	}
	for code, path := range codes {
		if !strings.Contains(string(readme), fmt.Sprintf("<a id=%q></a>`%s` |", code, code)) {
			t.Errorf("README.md's errors table has no row for %s (declared in %s)", code, path)
		}
	}
}
