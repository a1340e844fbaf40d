package orders

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/problem"
)

func TestDecode(t *testing.T) {
	got, err := Decode([]byte(`{"amount": 5, "currency": "EUR", "customer": "c", "source": "tok_visa", "email": "Ada.Lovelace+orders@Example.co.uk", "metadata": {"a": "b"}, "description": null}`))
	if err != nil {
		t.Fatalf("Decode() error = %v", err)
	}
	want := Request{Amount: 5, Currency: "eur", Customer: "c", Source: "tok_visa", Email: "Ada.Lovelace+orders@Example.co.uk", Metadata: map[string]string{"a": "b"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Decode() mismatch (-want +got):\n%s", diff)
	}

	long := strings.Repeat("a", 64) + "@" + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + "." + strings.Repeat("d", 57) + ".com"
	if len(long) != MaxEmailLength {
		t.Fatalf("test address has %d characters, want %d", len(long), MaxEmailLength)
	}
	if _, err := Decode(body("email", long)); err != nil {
		t.Errorf("an address of %d characters: %v, want it accepted", MaxEmailLength, err)
	}
	tests := []struct {
		name  string
		body  []byte
		field string
	}{
		{"email missing", []byte(`{"amount": 5, "currency": "eur", "customer": "c", "source": "tok_visa"}`), "email"},
		{"email not a string", body("email", 5), "email"},
		{"email too long", body("email", "a"+long), "email"},
		{"no at", body("email", "ada.example.com"), "email"},
		{"two ats", body("email", "ada@home@example.com"), "email"},
		{"no domain dot", body("email", "ada@localhost"), "email"},
		{"display name", body("email", "Ada <ada@example.com>"), "email"},
		{"space", body("email", "ada @example.com"), "email"},
		{"control character", body("email", "ada\n@example.com"), "email"},
		{"non-ASCII", body("email", "adä@example.com"), "email"},
		{"local part too long", body("email", strings.Repeat("a", 65)+"@example.com"), "email"},
		{"hyphen at a label's end", body("email", "ada@example-.com"), "email"},
		{"numeric top-level label", body("email", "ada@10.0.0.1"), "email"},
		{"empty label", body("email", "ada@example..com"), "email"},
		{"source missing", []byte(`{"amount": 5, "currency": "eur", "customer": "c", "email": "a@example.com"}`), "source"},
		{"source null", body("source", nil), "source"},
		{"amount zero", body("amount", 0), "amount"},
		{"currency unknown", body("currency", "xyz"), "currency"},
		{"customer empty", body("customer", ""), "customer"},
		{"unknown field", body("cc", "b@example.com"), "cc"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode(tt.body)
			var fe *problem.FieldError
			if !errors.As(err, &fe) || fe.Field != tt.field {
				t.Errorf("Decode(%s) error = %v, want a *problem.FieldError for %q", tt.body, err, tt.field)
			}
		})
	}
}

// body is a valid create-order body with field set to v.
func body(field string, v any) []byte {
	m := map[string]any{"amount": 5, "currency": "eur", "customer": "c", "source": "tok_visa", "email": "a@example.com"}
	m[field] = v
	b, _ := json.Marshal(m)
	return b
}

func TestID(t *testing.T) {
	key := idempotency.NewKey("acme", "order-2001")
	a, b := ID(key, "fp1"), ID(key, "fp2")
	if !ValidID(a) || !ValidID(b) || a == b {
		t.Errorf("ID(key, fp1) = %q, ID(key, fp2) = %q; want two valid, distinct IDs", a, b)
	}
	if again := ID(key, "fp1"); again != a {
		t.Errorf("ID is not stable: %q, then %q", a, again)
	}
	if other := ID(idempotency.NewKey("globex", "order-2001"), "fp1"); other == a {
		t.Errorf("one raw key under two tenants names one order %q", a)
	}
	for _, bad := range []string{"", "ord_", "pay_abcdefghijklmnopqrstuvwx", "ord_abcdefghijklmnopqrstuvw1", "ord_ABCDEFGHIJKLMNOPQRSTUVWX", a + "a"} {
		if ValidID(bad) {
			t.Errorf("ValidID(%q) = true, want false", bad)
		}
	}
}

func TestOrderJSON(t *testing.T) {
	o := New("acme", "ord_abcdefghijklmnopqrstuvwx", Request{Amount: 5, Currency: "eur", Customer: "c", Source: "tok_visa", Email: "a@example.com"},
		time.Unix(1767225600, 900_000_000))
	got, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"id":"ord_abcdefghijklmnopqrstuvwx","object":"order","amount":5,"currency":"eur","customer":"c","email":"a@example.com",` +
		`"description":null,"metadata":{},"status":"created","charge":null,"failure_code":null,"recovery_point":"order_created",` +
		`"receipt":null,"receipt_sent_at":null,"created":1767225600}`
	if string(got) != want {
		t.Errorf("created order JSON = %s, want %s", got, want)
	}
	o.Status, o.Charge, o.RecoveryPoint, o.Receipt, o.ReceiptSentAt, o.Description = StatusPaid, "prch_1", PointFinished, ReceiptSent, 1767225700, "d"
	got, _ = json.Marshal(o)
	for _, part := range []string{`"status":"paid"`, `"charge":"prch_1"`, `"recovery_point":"finished"`, `"receipt":"sent"`, `"receipt_sent_at":1767225700`, `"description":"d"`} {
		if !strings.Contains(string(got), part) {
			t.Errorf("paid order JSON = %s, want %s in it", got, part)
		}
	}
	if strings.Contains(string(got), "acme") || strings.Contains(string(got), "tok_visa") {
		t.Errorf("order JSON = %s renders the tenant or the source", got)
	}

	resp, err := paidResponse(o, "prch_1")
	if err != nil {
		t.Fatal(err)
	}
	wantBody := `{"id":"ord_abcdefghijklmnopqrstuvwx","object":"order","amount":5,"currency":"eur","customer":"c","email":"a@example.com",` +
		`"description":"d","metadata":{},"status":"paid","charge":"prch_1","receipt":"queued","created":1767225600}`
	if resp.Status != 201 || string(resp.Body) != wantBody || resp.Header["Location"] != "/v1/orders/ord_abcdefghijklmnopqrstuvwx" {
		t.Errorf("paidResponse = %d %v %s, want 201, Location and %s", resp.Status, resp.Header, resp.Body, wantBody)
	}
}

func TestReceiptJob(t *testing.T) {
	o := New("acme", "ord_abcdefghijklmnopqrstuvwx", Request{Amount: 4200, Currency: "eur", Customer: "cus_42", Source: "tok_visa",
		Email: "a@example.com", Description: "Order 2001"}, time.Unix(1767225600, 0))
	j := NewReceiptJob(o, "prch_1")
	if j.ID != "rcpt_abcdefghijklmnopqrstuvwx" || j.PK != "acme#"+j.ID || j.OrderPK != o.PK || j.To != o.Email || j.State != "queued" || j.Kind != "receipt" {
		t.Errorf("NewReceiptJob = %+v", j)
	}
	for _, part := range []string{o.ID, "4200 EUR", "prch_1", "Order 2001"} {
		if !strings.Contains(j.Text, part) {
			t.Errorf("receipt text %q lacks %q", j.Text, part)
		}
	}
}
