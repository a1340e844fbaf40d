package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/internal/charges"
	"github.com/oncehq/once/internal/provider"
)

func TestChargeResponse(t *testing.T) {
	key := idempotency.NewKey("acme", "order-1001")
	id := charges.ID(key)
	created := time.Unix(1700000000, 999_000_000) // the store keeps milliseconds; created is in seconds
	rec := func(body string) idempotency.Record {
		canonical, err := idempotency.Canonical([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		return idempotency.Record{Key: key, Status: idempotency.StatusUnknown, External: true, Request: canonical, CreatedAt: created}
	}
	succeeded := provider.Charge{ID: "prch_1", Status: provider.StatusSucceeded, Amount: 2500, Currency: "eur", Created: time.Unix(1700000005, 0)}
	declined := provider.Charge{ID: "prch_2", Status: provider.StatusFailed, Amount: 2500, Currency: "eur", FailureCode: "card_declined"}
	const full = `{"amount":2500,"currency":"EUR","customer":"cus_42","description":"Order <1001>","metadata":{"order":"1001","a":"b"},"source":"tok_visa"}`
	tests := []struct {
		name string
		rec  idempotency.Record
		c    provider.Charge
		want idempotency.Response
	}{
		{
			name: "succeeded",
			rec:  rec(full),
			c:    succeeded,
			want: idempotency.Response{Status: http.StatusCreated, Header: map[string]string{"Content-Type": "application/json"}, Body: []byte(
				`{"id":"` + id + `","object":"charge","amount":2500,"currency":"eur","customer":"cus_42","description":"Order \u003c1001\u003e",` +
					`"metadata":{"a":"b","order":"1001"},"status":"succeeded","provider_charge_id":"prch_1","created":1700000000}`)},
		},
		{
			name: "succeeded without optional fields",
			rec:  rec(`{"amount":1,"currency":"usd","customer":"c","source":"tok_visa","description":null}`),
			c:    provider.Charge{ID: "prch_1", Status: provider.StatusSucceeded, Amount: 1, Currency: "usd"},
			want: idempotency.Response{Status: http.StatusCreated, Header: map[string]string{"Content-Type": "application/json"}, Body: []byte(
				`{"id":"` + id + `","object":"charge","amount":1,"currency":"usd","customer":"c","description":null,` +
					`"metadata":{},"status":"succeeded","provider_charge_id":"prch_1","created":1700000000}`)},
		},
		{
			name: "declined",
			rec:  rec(full),
			c:    declined,
			want: idempotency.Response{Status: http.StatusPaymentRequired, Header: map[string]string{"Content-Type": ProblemContentType}, Body: []byte(
				`{"type":"https://github.com/oncehq/once/blob/main/README.md#card_declined","title":"Card declined","status":402,` +
					`"detail":"The payment provider declined the charge; nothing was charged. This answer is final for this Idempotency-Key: to try again, use a new key.",` +
					`"code":"card_declined"}`)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ChargeResponse(tt.rec, tt.c)
			if err != nil {
				t.Fatalf("ChargeResponse() error = %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ChargeResponse() mismatch (-want +got):\n%s", diff)
			}
		})
	}

	// The live answer to a decline and the rebuilt one are the same problem.
	w := httptest.NewRecorder()
	WriteError(w, httptest.NewRequest("POST", "/v1/charges", nil),
		&provider.DeclinedError{Code: "card_declined", Message: "Your card was declined.", Charge: declined})
	got, _ := ChargeResponse(rec(full), declined)
	if w.Code != got.Status || w.Body.String() != string(got.Body) || w.Header().Get("Content-Type") != got.Header["Content-Type"] {
		t.Errorf("WriteError(decline) = %d %s, want ChargeResponse's %d %s", w.Code, w.Body, got.Status, got.Body)
	}
}

func TestChargeResponseErrors(t *testing.T) {
	key := idempotency.NewKey("acme", "k")
	good := []byte(`{"amount":1,"currency":"usd","customer":"c","source":"tok_visa"}`)
	ok := provider.Charge{ID: "prch_1", Status: provider.StatusSucceeded, Amount: 1, Currency: "usd"}
	tests := []struct {
		name string
		rec  idempotency.Record
		c    provider.Charge
	}{
		{"unknown charge status", idempotency.Record{Key: key, Request: good, CreatedAt: time.Unix(1, 0)}, provider.Charge{ID: "prch_1", Status: "pending"}},
		{"no creation time", idempotency.Record{Key: key, Request: good}, ok},
		{"no request", idempotency.Record{Key: key, CreatedAt: time.Unix(1, 0)}, ok},
		{"request without source", idempotency.Record{Key: key, Request: []byte(`{"amount":1,"currency":"usd","customer":"c"}`), CreatedAt: time.Unix(1, 0)}, ok},
		{"another amount", idempotency.Record{Key: key, Request: good, CreatedAt: time.Unix(1, 0)}, provider.Charge{ID: "prch_1", Status: provider.StatusSucceeded, Amount: 2, Currency: "usd"}},
		{"another currency", idempotency.Record{Key: key, Request: good, CreatedAt: time.Unix(1, 0)}, provider.Charge{ID: "prch_1", Status: provider.StatusSucceeded, Amount: 1, Currency: "eur"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, err := ChargeResponse(tt.rec, tt.c); err == nil {
				t.Errorf("ChargeResponse() = %+v, nil; want an error", got)
			}
		})
	}
}

// TestCreateChargeWithoutProvider: a handler without a provider validates a
// charge as usual, then answers 503 provider_unavailable and reserves
// nothing.
func TestCreateChargeWithoutProvider(t *testing.T) {
	e := newEnv(t, false)
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
			w := e.do(t, req{path: "/v1/charges", tenant: "acme", key: key, ct: "application/json", body: tt.body})
			if w.Code != tt.wantCode {
				t.Fatalf("POST = %d %s, want %d", w.Code, w.Body, tt.wantCode)
			}
			p := problemOf(t, w)
			if p["code"] != tt.wantPCode || p["field"] != tt.wantField {
				t.Errorf("problem = %s, want %s with field %v", w.Body, tt.wantPCode, tt.wantField)
			}
			if _, err := e.store.Get(t.Context(), idempotency.NewKey("acme", key)); !errors.Is(err, idempotency.ErrNotFound) {
				t.Errorf("record after %d = %v, want none", w.Code, err)
			}
		})
	}
	if w := e.do(t, req{path: "/v1/charges", tenant: "acme", key: "media", ct: "text/plain", body: body}); w.Code != http.StatusUnsupportedMediaType {
		t.Errorf("POST text/plain = %d %s, want 415", w.Code, w.Body)
	}
	logs := e.logs.Lines(t)
	if len(logs) != 5 {
		t.Fatalf("%d log lines, want 5", len(logs))
	}
	if l := logs[0]; l["route"] != RouteCreateCharge || l["status"] != 503.0 || l["outcome"] != idempotency.OutcomeRejected ||
		l["error"] != ErrNoProvider.Error() || l["level"] != "ERROR" {
		t.Errorf("log line = %v, want the 503 of POST /v1/charges with its error", l)
	}
}
