package httpapi

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
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/memory"
	"github.com/oncehq/once/internal/fault"
	"github.com/oncehq/once/internal/lambdatest"
	"github.com/oncehq/once/internal/metrics"
	"github.com/oncehq/once/internal/payments"
	"github.com/oncehq/once/internal/provider"
)

const table = "payments"

// tenantHeader carries the tenant in these tests; in production it comes
// from the authorizer context only (gateway.Tenant).
const tenantHeader = "X-Test-Tenant"

func testTenant(r *http.Request) (string, bool) {
	t := r.Header.Get(tenantHeader)
	return t, t != ""
}

// memPayments reads the payments the in-memory store committed as effects.
type memPayments struct{ store *memory.Store }

func (m memPayments) Get(_ context.Context, tenant, id string) (payments.Payment, error) {
	if p, ok := m.store.Items(table)[payments.PK(tenant, id)].(payments.Payment); ok {
		return p, nil
	}
	return payments.Payment{}, payments.ErrNotFound
}

type env struct {
	h       http.Handler
	store   *memory.Store
	logs    *lambdatest.Buffer
	metrics *lambdatest.Buffer
	now     time.Time
}

func newEnv(t *testing.T, faults bool) *env {
	t.Helper()
	e := &env{store: memory.New(), logs: &lambdatest.Buffer{}, metrics: &lambdatest.Buffer{}, now: time.Unix(1700000000, 0)}
	now := func() time.Time { return e.now }
	var hook func(context.Context, string)
	if faults {
		hook = fault.Check
	}
	mw, err := idempotency.New(idempotency.Config{Store: e.store, Tenant: testTenant, OnError: WriteError, Now: now, Hook: hook})
	if err != nil {
		t.Fatal(err)
	}
	e.h = NewHandler(Deps{
		Middleware:    mw,
		Payments:      memPayments{e.store},
		PaymentsTable: table,
		Logger:        slog.New(slog.NewJSONHandler(e.logs, nil)),
		Metrics:       metrics.New(e.metrics, "once", map[string]string{"Service": "api"}),
		Now:           now,
		Fault:         faults,
		Tenant:        testTenant,
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
		rq.path = "/v1/payments"
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

const validBody = `{"amount":2500,"currency":"EUR","customer":"cus_42","description":"Order 1001"}`

func problemOf(t *testing.T, w *httptest.ResponseRecorder) map[string]any {
	t.Helper()
	if ct := w.Header().Get("Content-Type"); ct != ProblemContentType {
		t.Fatalf("Content-Type = %q, want %q (body %s)", ct, ProblemContentType, w.Body)
	}
	var p map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
		t.Fatalf("problem body %q: %v", w.Body, err)
	}
	if p["status"] != float64(w.Code) {
		t.Errorf("problem status = %v, want the response's %d", p["status"], w.Code)
	}
	if p["type"] != ProblemType+p["code"].(string) {
		t.Errorf("problem type = %v, want %s%v", p["type"], ProblemType, p["code"])
	}
	return p
}

func TestCreateAndGet(t *testing.T) {
	e := newEnv(t, false)
	w := e.do(t, req{tenant: "acme", key: "order-1001", ct: "application/json", body: validBody})
	if w.Code != http.StatusCreated {
		t.Fatalf("POST = %d %s, want 201", w.Code, w.Body)
	}
	var got map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	id, _ := got["id"].(string)
	if !payments.ValidID(id) {
		t.Fatalf("id = %q, want a payment ID", id)
	}
	want := map[string]any{"id": id, "object": "payment", "amount": 2500.0, "currency": "eur", "customer": "cus_42",
		"description": "Order 1001", "metadata": map[string]any{}, "status": "pending", "created": 1700000000.0}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("POST body mismatch (-want +got):\n%s", diff)
	}
	if loc := w.Header().Get("Location"); loc != "/v1/payments/"+id {
		t.Errorf("Location = %q, want /v1/payments/%s", loc, id)
	}
	if w.Header().Get(idempotency.ReplayedHeader) != "" {
		t.Errorf("first response has %s", idempotency.ReplayedHeader)
	}

	again := e.do(t, req{tenant: "acme", key: "order-1001", ct: "application/json", body: validBody})
	if again.Code != http.StatusCreated || again.Body.String() != w.Body.String() {
		t.Errorf("replay = %d %s, want 201 %s", again.Code, again.Body, w.Body)
	}
	if again.Header().Get(idempotency.ReplayedHeader) != "true" {
		t.Errorf("replay %s = %q, want true", idempotency.ReplayedHeader, again.Header().Get(idempotency.ReplayedHeader))
	}

	g := e.do(t, req{method: "GET", path: "/v1/payments/" + id, tenant: "acme"})
	if g.Code != http.StatusOK || g.Body.String() != w.Body.String() {
		t.Errorf("GET = %d %s, want 200 %s", g.Code, g.Body, w.Body)
	}
	if g.Header().Get("Content-Type") != "application/json" {
		t.Errorf("GET Content-Type = %q", g.Header().Get("Content-Type"))
	}
	for _, tc := range []struct{ name, path, tenant string }{
		{"other tenant", "/v1/payments/" + id, "globex"},
		{"unknown id", "/v1/payments/" + payments.NewID(), "acme"},
		{"malformed id", "/v1/payments/nope", "acme"},
	} {
		g := e.do(t, req{method: "GET", path: tc.path, tenant: tc.tenant})
		if g.Code != http.StatusNotFound || problemOf(t, g)["code"] != "not_found" {
			t.Errorf("GET %s = %d %s, want 404 not_found", tc.name, g.Code, g.Body)
		}
	}
	if g := e.do(t, req{method: "GET", path: "/v1/payments/" + id}); g.Code != http.StatusUnauthorized {
		t.Errorf("GET without tenant = %d, want 401", g.Code)
	}
}

func TestCreateRejections(t *testing.T) {
	e := newEnv(t, false)
	tests := []struct {
		name      string
		rq        req
		wantCode  int
		wantPCode string
		wantField any // nil: no field member; "null": JSON null
	}{
		{"no tenant", req{key: "k", ct: "application/json", body: validBody}, 401, "unauthorized", nil},
		{"no key", req{tenant: "acme", ct: "application/json", body: validBody}, 400, "idempotency_key_missing", nil},
		{"bad key", req{tenant: "acme", key: "a b", ct: "application/json", body: validBody}, 400, "idempotency_key_invalid", nil},
		{"no content type", req{tenant: "acme", key: "k1", body: validBody}, 415, "unsupported_media_type", nil},
		{"text/plain", req{tenant: "acme", key: "k1", ct: "text/plain", body: validBody}, 415, "unsupported_media_type", nil},
		{"form", req{tenant: "acme", key: "k1", ct: "application/x-www-form-urlencoded", body: "amount=1"}, 415, "unsupported_media_type", nil},
		{"+json suffix", req{tenant: "acme", key: "k1", ct: "application/merge-patch+json", body: validBody}, 415, "unsupported_media_type", nil},
		{"latin-1", req{tenant: "acme", key: "k1", ct: "application/json; charset=iso-8859-1", body: validBody}, 415, "unsupported_media_type", nil},
		{"two content types", req{tenant: "acme", key: "k1", header: http.Header{"Content-Type": {"application/json", "application/json"}}, body: validBody}, 415, "unsupported_media_type", nil},
		{"malformed JSON", req{tenant: "acme", key: "k1", ct: "application/json", body: `{"amount":`}, 400, "invalid_request", "null"},
		{"duplicate key", req{tenant: "acme", key: "k1", ct: "application/json", body: `{"amount":1,"amount":2,"currency":"usd","customer":"c"}`}, 400, "invalid_request", "amount"},
		{"unknown field", req{tenant: "acme", key: "k1", ct: "application/json", body: `{"amount":1,"currency":"usd","customer":"c","confirm":true}`}, 400, "invalid_request", "confirm"},
		{"metadata value", req{tenant: "acme", key: "k1", ct: "application/json", body: `{"amount":1,"currency":"usd","customer":"c","metadata":{"order":1}}`}, 400, "invalid_request", "metadata.order"},
		{"too large", req{tenant: "acme", key: "k1", ct: "application/json", body: `{"description":"` + strings.Repeat("x", 64<<10) + `"}`}, 413, "payload_too_large", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := e.do(t, tt.rq)
			if w.Code != tt.wantCode {
				t.Fatalf("POST = %d %s, want %d", w.Code, w.Body, tt.wantCode)
			}
			p := problemOf(t, w)
			if p["code"] != tt.wantPCode {
				t.Errorf("code = %v, want %s", p["code"], tt.wantPCode)
			}
			field, has := p["field"]
			switch {
			case tt.wantField == nil && has:
				t.Errorf("field = %v, want none", field)
			case tt.wantField == "null" && (!has || field != nil):
				t.Errorf("field = %v (present %v), want null", field, has)
			case tt.wantField != nil && tt.wantField != "null" && field != tt.wantField:
				t.Errorf("field = %v, want %v", field, tt.wantField)
			}
		})
	}
	if n := len(e.store.Items(table)); n != 0 {
		t.Errorf("%d payments written by rejected requests, want 0", n)
	}
	// Rejections before Begin are not stored: the corrected request executes.
	if w := e.do(t, req{tenant: "acme", key: "k1", ct: "application/json; charset=UTF-8", body: validBody}); w.Code != http.StatusCreated {
		t.Errorf("corrected request = %d %s, want 201", w.Code, w.Body)
	}
}

func TestRoutes(t *testing.T) {
	e := newEnv(t, false)
	tests := []struct {
		method, path string
		want         int
		wantAllow    string
	}{
		{"GET", "/", 404, ""},
		{"GET", "/v1/charges", 405, "POST"},
		{"GET", "/v1/refunds", 404, ""},
		{"GET", "/v1/payments/pay_x/refunds", 404, ""},
		{"DELETE", "/v1/payments", 405, "POST"},
		{"PUT", "/v1/payments/pay_abcdefghijklmnopqrstuvwx", 405, "GET, HEAD"},
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
}

func TestProblemFor(t *testing.T) {
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
		{"key invalid", fmt.Errorf("%w: the key is empty", idempotency.ErrKeyInvalid), 400, "idempotency_key_invalid", ""},
		{"key reused", idempotency.ErrKeyReused, 422, "idempotency_key_reused", ""},
		{"in progress", &idempotency.InProgressError{RetryAfter: 2500 * time.Millisecond}, 409, "idempotency_request_in_progress", "3"},
		{"too large", idempotency.ErrBodyTooLarge, 413, "payload_too_large", ""},
		{"body invalid", idempotency.ErrBodyInvalid, 400, "invalid_request", ""},
		{"validation", &payments.ValidationError{Field: "amount", Reason: "must be at least 1"}, 400, "invalid_request", ""},
		{"media type", ErrUnsupportedMediaType, 415, "unsupported_media_type", ""},
		{"not found", ErrNotFound, 404, "not_found", ""},
		{"payment not found", fmt.Errorf("payments: get: %w", payments.ErrNotFound), 404, "not_found", ""},
		{"method", ErrMethodNotAllowed, 405, "method_not_allowed", ""},
		{"store unavailable", fmt.Errorf("%w: %w", idempotency.ErrUnavailable, secret), 503, "store_unavailable", "1"},
		{"payments unavailable", fmt.Errorf("%w: %w", payments.ErrUnavailable, secret), 503, "store_unavailable", "1"},
		{"declined", fmt.Errorf("provider: charge: %w", &provider.DeclinedError{Code: "card_declined", Charge: provider.Charge{ID: "prch_1"}}), 402, "card_declined", ""},
		{"not charged", fmt.Errorf("provider: charge: %w: %w", provider.ErrNotCharged, secret), 503, "provider_unavailable", "1"},
		{"provider rejected", fmt.Errorf("provider: charge: %w", &provider.StatusError{StatusCode: 400, Code: "invalid_request", Message: "unknown source token secret"}), 422, "provider_rejected", ""},
		{"provider rejected, 413", fmt.Errorf("provider: charge: %w", &provider.StatusError{StatusCode: 413}), 422, "provider_rejected", ""},
		{"provider rejected, 422", fmt.Errorf("provider: charge: %w", &provider.StatusError{StatusCode: 422, Code: "unprocessable", Message: "secret"}), 422, "provider_rejected", ""},
		{"provider key reused", fmt.Errorf("provider: charge: %w", &provider.StatusError{StatusCode: 422, Code: "idempotency_key_reused"}), 500, "internal_error", ""},
		{"provider credentials", fmt.Errorf("provider: charge: %w", &provider.StatusError{StatusCode: 401, Code: "invalid_api_key", Message: "secret"}), 500, "internal_error", ""},
		{"provider URL", fmt.Errorf("provider: charge: %w", &provider.StatusError{StatusCode: 404}), 500, "internal_error", ""},
		{"provider key in use", fmt.Errorf("provider: charge: %w", &provider.StatusError{StatusCode: 409}), 500, "internal_error", ""},
		{"no provider", ErrNoProvider, 503, "provider_unavailable", "1"},
		{"outcome unknown", fmt.Errorf("provider: charge: %w: %w", provider.ErrOutcomeUnknown, secret), 504, "provider_outcome_unknown", "2"},
		{"anything else", secret, 500, "internal_error", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			WriteError(w, httptest.NewRequest("POST", "/v1/payments", nil), tt.err)
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
			if got := Status(tt.err); got != tt.wantStatus {
				t.Errorf("Status() = %d, want %d", got, tt.wantStatus)
			}
		})
	}
}

// TestProblemCodesDocumented: every code of the rules table has its row in
// README.md's errors table, with the anchor its problem type points at.
func TestProblemCodesDocumented(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range append(rules, internalRule) {
		row := fmt.Sprintf("| %d | <a id=%q></a>`%s` |", r.status, r.code, r.code)
		if !strings.Contains(string(readme), row) {
			t.Errorf("README.md has no errors table row starting %q", row)
		}
	}
}

func TestProblemRendering(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{&payments.ValidationError{Field: "metadata.order", Reason: "must be a string"},
			`{"type":"https://github.com/oncehq/once/blob/main/README.md#invalid_request","title":"Invalid request","status":400,"detail":"metadata.order must be a string.","code":"invalid_request","field":"metadata.order"}`},
		{&payments.ValidationError{Reason: "the body must be a JSON object"},
			`{"type":"https://github.com/oncehq/once/blob/main/README.md#invalid_request","title":"Invalid request","status":400,"detail":"The body must be a JSON object.","code":"invalid_request","field":null}`},
		{fmt.Errorf("provider: charge: %w", &provider.StatusError{StatusCode: 400, Code: "invalid_request", Message: `unknown source token "tok_mastercard"`}),
			`{"type":"https://github.com/oncehq/once/blob/main/README.md#provider_rejected","title":"Provider rejected the request","status":422,` +
				`"detail":"The payment provider rejected the request; nothing was charged. Retrying the same request will not help: ` +
				`this answer is final for this Idempotency-Key. To try again, change the request and use a new key.","code":"provider_rejected"}`},
		{fmt.Errorf("%w: character 3 is outside 0x21-0x7E", idempotency.ErrKeyInvalid),
			`{"type":"https://github.com/oncehq/once/blob/main/README.md#idempotency_key_invalid","title":"Idempotency-Key invalid","status":400,"detail":"The Idempotency-Key header must be given once, as a token or a structured-field string of 1 to 255 characters in the range 0x21-0x7E; here character 3 is outside 0x21-0x7E.","code":"idempotency_key_invalid"}`},
	}
	for _, tt := range tests {
		w := httptest.NewRecorder()
		WriteError(w, httptest.NewRequest("POST", "/", nil), tt.err)
		if got := w.Body.String(); got != tt.want {
			t.Errorf("WriteError(%v) body =\n%s\nwant\n%s", tt.err, got, tt.want)
		}
	}
}

func TestLogAndMetrics(t *testing.T) {
	e := newEnv(t, false)
	const rawKey = "raw-key-must-not-be-logged"
	e.do(t, req{tenant: "acme", key: rawKey, ct: "application/json", body: validBody, header: http.Header{"Authorization": {"Bearer sk_test_secret"}}})
	e.do(t, req{tenant: "acme", key: rawKey, ct: "application/json", body: validBody})
	e.do(t, req{tenant: "acme", key: rawKey, ct: "application/json", body: `{"amount":1,"currency":"usd","customer":"c"}`})
	e.do(t, req{tenant: "acme", key: "other", ct: "text/plain", body: validBody})
	e.do(t, req{method: "GET", path: "/v1/payments/" + payments.NewID(), tenant: "acme"})

	logs := e.logs.Lines(t)
	if len(logs) != 5 {
		t.Fatalf("%d log lines, want 5:\n%s", len(logs), e.logs)
	}
	type line struct {
		status         float64
		outcome, route string
		storeCalls     float64
		key            bool
	}
	want := []line{
		{201, "created", "POST /v1/payments", 1, true},
		{201, "replayed", "POST /v1/payments", 1, true},
		{422, "mismatch", "POST /v1/payments", 1, true},
		{415, "rejected", "POST /v1/payments", 0, true},
		{404, "read", "GET /v1/payments/{id}", 1, false},
	}
	for i, l := range logs {
		for _, k := range []string{"time", "level", "msg", "request_id", "tenant", "method", "route", "status", "outcome", "key", "store_calls", "store_latency_ms", "duration_ms"} {
			if _, ok := l[k]; !ok {
				t.Errorf("line %d lacks %q: %v", i, k, l)
			}
		}
		got := line{l["status"].(float64), l["outcome"].(string), l["route"].(string), l["store_calls"].(float64), l["key"] != ""}
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
				e.do(t, req{tenant: "acme", key: "k", ct: "application/json", body: validBody, header: http.Header{fault.Header: {point}}})
			}()
			logs := e.logs.Lines(t)
			if len(logs) != 1 || logs[0]["crash"] != point || logs[0]["status"] != 500.0 {
				t.Errorf("log lines = %v, want one with crash %s and status 500", logs, point)
			}
			// In Atomic mode both points come after the commit: the retry replays.
			w := e.do(t, req{tenant: "acme", key: "k", ct: "application/json", body: validBody})
			if w.Code != http.StatusCreated || w.Header().Get(idempotency.ReplayedHeader) != "true" {
				t.Errorf("retry after crash = %d (replayed %q), want a 201 replay", w.Code, w.Header().Get(idempotency.ReplayedHeader))
			}
			if n := len(e.store.Items(table)); n != 1 {
				t.Errorf("%d payments, want 1", n)
			}
		})
	}
	t.Run("disabled", func(t *testing.T) {
		e := newEnv(t, false)
		w := e.do(t, req{tenant: "acme", key: "k", ct: "application/json", body: validBody, header: http.Header{fault.Header: {fault.AfterComplete}}})
		if w.Code != http.StatusCreated {
			t.Errorf("status = %d, want 201 (injection disabled)", w.Code)
		}
	})
}
