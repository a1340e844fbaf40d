package charges

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/problem"
	"github.com/oncehq/once/internal/provider"
)

func TestResponse(t *testing.T) {
	key := idempotency.NewKey("acme", "order-1001")
	id := ID(key, "prch_1")
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
			want: idempotency.Response{Status: http.StatusPaymentRequired, Header: map[string]string{"Content-Type": problem.ContentType}, Body: []byte(
				`{"type":"https://github.com/oncehq/once/blob/main/README.md#card_declined","title":"Card declined","status":402,` +
					`"detail":"The payment provider declined the charge; nothing was charged. This answer is final for this Idempotency-Key: to try again, use a new key.",` +
					`"code":"card_declined"}`)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Response(tt.rec, tt.c)
			if err != nil {
				t.Fatalf("Response() error = %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Response() mismatch (-want +got):\n%s", diff)
			}
		})
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
			if got, err := Response(tt.rec, tt.c); err == nil {
				t.Errorf("Response() = %+v, nil; want an error", got)
			}
		})
	}
}

// TestResolverWithoutProvider: the resolver of a route without a provider
// cannot tell, and says so.
func TestResolverWithoutProvider(t *testing.T) {
	if _, err := NewResolver(nil).Resolve(context.Background(), idempotency.Record{}); err == nil {
		t.Error("Resolve() without a provider = nil error, want one")
	}
}
