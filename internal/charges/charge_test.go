package charges

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/problem"
	"github.com/oncehq/once/internal/payments"
	"github.com/oncehq/once/internal/provider"
)

func TestID(t *testing.T) {
	key := idempotency.NewKey("acme", "order-1001")
	// "ch_" + sha256("acme#" + sha256("order-1001") + "\n" + "prch_1")[:24]
	if got, want := ID(key, "prch_1"), "ch_"+sha256Hex(key.ID() + "\nprch_1")[:24]; got != want {
		t.Errorf("ID(%s, prch_1) = %q, want %q", key.ID(), got, want)
	}
	ids := map[string]string{}
	for _, tt := range []struct {
		tenant, key, charge string
	}{
		{"acme", "k", "prch_1"},
		{"globex", "k", "prch_1"}, // one raw key under two tenants
		{"acme", "k", "prch_2"},   // a new charge under a reused key
		{"acme", "k2", "prch_1"},
	} {
		id := ID(idempotency.NewKey(tt.tenant, tt.key), tt.charge)
		if !strings.HasPrefix(id, "ch_") || len(id) != 27 {
			t.Errorf("ID(%s, %s, %s) = %q, want ch_ and 24 hex characters", tt.tenant, tt.key, tt.charge, id)
		}
		if other, ok := ids[id]; ok {
			t.Errorf("ID(%s, %s, %s) = %q, as for %s", tt.tenant, tt.key, tt.charge, id, other)
		}
		ids[id] = tt.tenant + " " + tt.key + " " + tt.charge
	}
	if ID(idempotency.NewKey("acme", "k"), "prch_1") != ID(idempotency.NewKey("acme", "k"), "prch_1") {
		t.Error("ID is not deterministic")
	}
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
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
		ID: ID(key, "prch_1"), Amount: 5, Currency: "eur", Customer: "c", Description: "d", Metadata: map[string]string{"a": "b"},
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
