package charges

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/problem"
	"github.com/oncehq/once/internal/payments"
	"github.com/oncehq/once/internal/provider"
)

func TestID(t *testing.T) {
	tests := []struct {
		key  idempotency.Key
		want string
	}{
		// "ch_" + sha256("acme#" + sha256("order-1001"))[:24]
		{idempotency.NewKey("acme", "order-1001"), "ch_b46cca13f2601d2bb01935c5"},
	}
	for _, tt := range tests {
		if got := ID(tt.key); got != tt.want {
			t.Errorf("ID(%s) = %q, want %q", tt.key.ID(), got, tt.want)
		}
	}
	a, b := ID(idempotency.NewKey("acme", "k")), ID(idempotency.NewKey("globex", "k"))
	if a == b {
		t.Errorf("ID of one raw key under two tenants = %q for both, want distinct", a)
	}
}

func TestDecode(t *testing.T) {
	got, err := Decode([]byte(`{"amount":5,"currency":"EUR","customer":"c","source":"tok_visa","metadata":{"a":"b"}}`))
	if err != nil {
		t.Fatalf("Decode() error = %v", err)
	}
	want := payments.Request{Amount: 5, Currency: "eur", Customer: "c", Source: "tok_visa", Metadata: map[string]string{"a": "b"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Decode() mismatch (-want +got):\n%s", diff)
	}
	_, err = Decode([]byte(`{"amount":5,"currency":"EUR","customer":"c"}`))
	var verr *problem.FieldError
	if !errors.As(err, &verr) || verr.Field != "source" {
		t.Errorf("Decode(no source) error = %v, want a *problem.FieldError for source", err)
	}
}

func TestNewAndProviderRequest(t *testing.T) {
	key := idempotency.NewKey("acme", "k")
	req := payments.Request{Amount: 5, Currency: "eur", Customer: "c", Description: "d", Metadata: map[string]string{"a": "b"}, Source: "tok_visa"}
	got := New(key, req, "prch_1", time.Unix(1700000000, 999_999_999).In(time.FixedZone("X", 3600)))
	want := Charge{
		ID: ID(key), Amount: 5, Currency: "eur", Customer: "c", Description: "d", Metadata: map[string]string{"a": "b"},
		ProviderChargeID: "prch_1", Created: time.Unix(1700000000, 0).UTC(),
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("New() mismatch (-want +got):\n%s", diff)
	}
	wantReq := provider.ChargeRequest{Amount: 5, Currency: "eur", Source: "tok_visa", Customer: "c", Description: "d", Metadata: map[string]string{"a": "b"}}
	if diff := cmp.Diff(wantReq, ProviderRequest(req)); diff != "" {
		t.Errorf("ProviderRequest() mismatch (-want +got):\n%s", diff)
	}
}
