package simulator_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/internal/provider/simulator"
)

// postRefund sends POST /v1/refunds with body under key.
func (e *env) postRefund(t *testing.T, key, body string) answer {
	t.Helper()
	return e.postTo(t, "/v1/refunds", key, []byte(body))
}

// chargeID makes a tok_visa charge of 1999 under key and returns its id.
func (e *env) chargeID(t *testing.T, key string) string {
	t.Helper()
	a := e.post(t, key, request(simulator.TokenVisa))
	if a.status != http.StatusCreated {
		t.Fatalf("charge = %d %s", a.status, a.body)
	}
	return a.json(t)["id"].(string)
}

func TestRefundWire(t *testing.T) {
	e := newEnv(t)
	charge := e.chargeID(t, "charge-for-refund")
	body := `{"charge": "` + charge + `", "amount": 700, "reason": "duplicate", "metadata": {"ticket": "T-1"}}`
	first := e.postRefund(t, "refund-1", body)
	if first.status != http.StatusCreated {
		t.Fatalf("POST /v1/refunds = %d %s, want 201", first.status, first.body)
	}
	got := first.json(t)
	id, _ := got["id"].(string)
	delete(got, "id")
	want := map[string]any{
		"object": "refund", "status": "succeeded", "amount": 700.0, "currency": "usd", "charge": charge,
		"reason": "duplicate", "metadata": map[string]any{"ticket": "T-1"}, "created": float64(now.Unix()),
		"idempotency_key": "refund-1",
	}
	if diff := cmp.Diff(want, got); diff != "" || !strings.HasPrefix(id, "prre_") {
		t.Errorf("refund (-want +got):\n%s (id %q)", diff, id)
	}

	replay := e.postRefund(t, "refund-1", body)
	if replay.status != http.StatusCreated || !bytes.Equal(replay.body, first.body) || replay.header.Get(simulator.ReplayedHeader) != "true" {
		t.Errorf("replay = %d %v %s, want the first answer replayed", replay.status, replay.header, replay.body)
	}
	// The whole remaining amount when the request names none.
	rest := e.postRefund(t, "refund-2", `{"charge": "`+charge+`"}`)
	if rest.status != http.StatusCreated || rest.json(t)["amount"] != 1299.0 {
		t.Errorf("refund of the rest = %d %s, want 201 of 1299", rest.status, rest.body)
	}
	if a := e.postRefund(t, "refund-3", `{"charge": "`+charge+`"}`); a.status != http.StatusBadRequest ||
		!strings.Contains(string(a.body), `"code":"charge_already_refunded"`) {
		t.Errorf("refund of a refunded charge = %d %s, want 400 charge_already_refunded", a.status, a.body)
	}

	list := e.get(t, "/v1/refunds?charge="+charge)
	var l struct {
		Object  string
		Data    []map[string]any
		HasMore bool `json:"has_more"`
	}
	if err := json.Unmarshal(list.body, &l); err != nil || list.status != http.StatusOK || l.Object != "list" || len(l.Data) != 2 || l.HasMore {
		t.Fatalf("list = %d %s (%v), want the two refunds", list.status, list.body, err)
	}
	if l.Data[0]["id"] != id && l.Data[1]["id"] != id {
		t.Errorf("list = %s, want refund %s in it", list.body, id)
	}
	byKey := e.get(t, "/v1/refunds?idempotency_key=refund-1")
	if byKey.status != http.StatusOK || byKey.json(t)["id"] != id {
		t.Errorf("lookup by key = %d %s, want refund %s", byKey.status, byKey.body, id)
	}
	for _, path := range []string{"/v1/refunds?idempotency_key=never", "/v1/refunds?charge=prch_never"} {
		if a := e.get(t, path); a.status != http.StatusNotFound || !strings.Contains(string(a.body), `"code":"resource_missing"`) {
			t.Errorf("GET %s = %d %s, want 404 resource_missing", path, a.status, a.body)
		}
	}
	for _, path := range []string{"/v1/refunds", "/v1/refunds?charge=a&idempotency_key=b", "/v1/refunds?charge=a&charge=b"} {
		if a := e.get(t, path); a.status != http.StatusBadRequest {
			t.Errorf("GET %s = %d %s, want 400", path, a.status, a.body)
		}
	}
}

func TestRefundInvalidRequests(t *testing.T) {
	e := newEnv(t)
	charge := e.chargeID(t, "charge-invalid-refunds")
	tests := []struct {
		name, key, body, param string
	}{
		{"no key", "", `{"charge": "` + charge + `"}`, "Idempotency-Key"},
		{"refund namespace key", "re#1", `{"charge": "` + charge + `"}`, "Idempotency-Key"},
		{"no charge", "k1", `{"amount": 1}`, "charge"},
		{"amount zero", "k2", `{"charge": "` + charge + `", "amount": 0}`, "amount"},
		{"amount string", "k3", `{"charge": "` + charge + `", "amount": "1"}`, "amount"},
		{"reason", "k4", `{"charge": "` + charge + `", "reason": "changed_mind"}`, "reason"},
		{"unknown field", "k5", `{"charge": "` + charge + `", "currency": "usd"}`, ""},
		{"metadata", "k6", `{"charge": "` + charge + `", "metadata": {"k": "` + strings.Repeat("v", 501) + `"}}`, "metadata"},
		{"unknown charge", "k7", `{"charge": "prch_never"}`, "charge"},
		{"too much", "k8", `{"charge": "` + charge + `", "amount": 2000}`, "amount"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := e.postRefund(t, tt.key, tt.body)
			if a.status != http.StatusBadRequest {
				t.Fatalf("POST = %d %s, want 400", a.status, a.body)
			}
			if got := a.json(t)["error"].(map[string]any)["param"]; tt.param != "" && got != tt.param {
				t.Errorf("param = %v, want %s", got, tt.param)
			}
		})
	}
	// A charge key cannot be in the refunds' namespace either.
	if a := e.post(t, "re#charge", request(simulator.TokenVisa)); a.status != http.StatusBadRequest {
		t.Errorf("charge under re#charge = %d %s, want 400", a.status, a.body)
	}
}
