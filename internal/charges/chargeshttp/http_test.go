package chargeshttp

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/memory"
	"github.com/oncehq/once/internal/charges"
	"github.com/oncehq/once/internal/httpapi"
	"github.com/oncehq/once/internal/lambdatest"
	"github.com/oncehq/once/internal/provider"
)

// TestDeclineIsResponse: the live answer to a decline (Answer, rendered by
// httpapi.WriteError) and the one the Resolver rebuilds (charges.Response)
// are the same problem, byte for byte.
func TestDeclineIsResponse(t *testing.T) {
	key := idempotency.NewKey("acme", "order-1001")
	canonical, err := idempotency.Canonical([]byte(`{"amount":2500,"currency":"EUR","customer":"cus_42","source":"tok_visa"}`))
	if err != nil {
		t.Fatal(err)
	}
	rec := idempotency.Record{Key: key, Status: idempotency.StatusUnknown, External: true, Request: canonical, CreatedAt: time.Unix(1700000000, 0)}
	declined := provider.Charge{ID: "prch_2", Status: provider.StatusFailed, Amount: 2500, Currency: "eur", FailureCode: "card_declined"}
	w := httptest.NewRecorder()
	httpapi.WriteError(w, httptest.NewRequest("POST", "/v1/charges", nil),
		charges.Answer(&provider.DeclinedError{Code: "card_declined", Message: "Your card was declined.", Charge: declined}))
	got, err := charges.Response(rec, declined)
	if err != nil {
		t.Fatalf("Response() error = %v", err)
	}
	if w.Code != got.Status || w.Body.String() != string(got.Body) || w.Header().Get("Content-Type") != got.Header["Content-Type"] {
		t.Errorf("WriteError(decline) = %d %s, want Response's %d %s", w.Code, w.Body, got.Status, got.Body)
	}
}

// TestAnswer checks the answer to each of the provider's outcomes.
func TestAnswer(t *testing.T) {
	secret := errors.New("secret")
	tests := []struct {
		name       string
		err        error
		wantStatus int
		wantCode   string
		wantRetry  string
	}{
		{"declined", fmt.Errorf("provider: charge: %w", &provider.DeclinedError{Code: "card_declined", Charge: provider.Charge{ID: "prch_1"}}), 402, "card_declined", ""},
		{"not charged", fmt.Errorf("provider: charge: %w: %w", provider.ErrNotCharged, secret), 503, "provider_unavailable", "1"},
		{"provider rejected", fmt.Errorf("provider: charge: %w", &provider.StatusError{StatusCode: 400, Code: "invalid_request", Message: "unknown source token secret"}), 422, "provider_rejected", ""},
		{"provider rejected, 413", fmt.Errorf("provider: charge: %w", &provider.StatusError{StatusCode: 413}), 422, "provider_rejected", ""},
		{"provider rejected, 422", fmt.Errorf("provider: charge: %w", &provider.StatusError{StatusCode: 422, Code: "unprocessable", Message: "secret"}), 422, "provider_rejected", ""},
		{"provider key reused", fmt.Errorf("provider: charge: %w", &provider.StatusError{StatusCode: 422, Code: "idempotency_key_reused"}), 500, "internal_error", ""},
		{"provider credentials", fmt.Errorf("provider: charge: %w", &provider.StatusError{StatusCode: 401, Code: "invalid_api_key", Message: "secret"}), 500, "internal_error", ""},
		{"provider URL", fmt.Errorf("provider: charge: %w", &provider.StatusError{StatusCode: 404}), 500, "internal_error", ""},
		{"provider key in use", fmt.Errorf("provider: charge: %w", &provider.StatusError{StatusCode: 409}), 500, "internal_error", ""},
		{"outcome unknown", fmt.Errorf("provider: charge: %w: %w", provider.ErrOutcomeUnknown, secret), 504, "provider_outcome_unknown", "2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			httpapi.WriteError(w, httptest.NewRequest("POST", "/v1/charges", nil), charges.Answer(tt.err))
			var p map[string]any
			if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
				t.Fatal(err)
			}
			if w.Code != tt.wantStatus || p["code"] != tt.wantCode {
				t.Errorf("answer = %d %v, want %d %s", w.Code, p["code"], tt.wantStatus, tt.wantCode)
			}
			if got := w.Header().Get("Retry-After"); got != tt.wantRetry {
				t.Errorf("Retry-After = %q, want %q", got, tt.wantRetry)
			}
			if strings.Contains(w.Body.String(), "secret") {
				t.Errorf("body %s leaks the provider's text", w.Body)
			}
		})
	}
}

// TestCreateChargeWithoutProvider: a route without a provider validates a
// charge as usual, then answers 503 provider_unavailable and reserves
// nothing.
func TestCreateChargeWithoutProvider(t *testing.T) {
	store := memory.New()
	tenant := func(*http.Request) (string, bool) { return "acme", true }
	mw, err := idempotency.New(idempotency.Config{Store: store, Tenant: tenant, OnError: httpapi.WriteError})
	if err != nil {
		t.Fatal(err)
	}
	logs := &lambdatest.Buffer{}
	h := httpapi.NewHandler(httpapi.Deps{Routes: Routes(mw, nil, 0), Tenant: tenant, Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	do := func(key, ct, body string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", "/v1/charges", strings.NewReader(body))
		r.Header.Set("Idempotency-Key", key)
		r.Header.Set("Content-Type", ct)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	const body = `{"amount":2500,"currency":"EUR","customer":"cus_42","source":"tok_visa"}`
	tests := []struct {
		name      string
		body      string
		wantCode  int
		wantPCode string
		wantField any
	}{
		{"valid", body, 503, "provider_unavailable", nil},
		{"source missing", `{"amount":2500,"currency":"EUR","customer":"cus_42"}`, 400, "invalid_request", "source"},
		{"source null", `{"amount":2500,"currency":"EUR","customer":"cus_42","source":null}`, 400, "invalid_request", "source"},
		{"amount", `{"amount":0,"currency":"EUR","customer":"cus_42","source":"tok_visa"}`, 400, "invalid_request", "amount"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := fmt.Sprintf("charge-%d", i)
			w := do(key, "application/json", tt.body)
			var p map[string]any
			if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
				t.Fatal(err)
			}
			if w.Code != tt.wantCode || p["code"] != tt.wantPCode || p["field"] != tt.wantField {
				t.Errorf("POST = %d %s, want %d %s with field %v", w.Code, w.Body, tt.wantCode, tt.wantPCode, tt.wantField)
			}
			if _, err := store.Get(t.Context(), idempotency.NewKey("acme", key)); !errors.Is(err, idempotency.ErrNotFound) {
				t.Errorf("record after %d = %v, want none", w.Code, err)
			}
		})
	}
	if w := do("media", "text/plain", body); w.Code != http.StatusUnsupportedMediaType {
		t.Errorf("POST text/plain = %d %s, want 415", w.Code, w.Body)
	}
	lines := logs.Lines(t)
	if len(lines) != 5 {
		t.Fatalf("%d log lines, want 5", len(lines))
	}
	if l := lines[0]; l["route"] != charges.Route || l["status"] != 503.0 || l["level"] != "ERROR" || !strings.Contains(fmt.Sprint(l["error"]), "provider_unavailable") {
		t.Errorf("log line = %v, want the 503 of POST /v1/charges with its error", l)
	}
}
