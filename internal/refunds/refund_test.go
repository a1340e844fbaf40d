package refunds

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/problem"
	"github.com/oncehq/once/internal/payments"
	"github.com/oncehq/once/internal/provider"
)

const payment = "pay_abcdefghijklmnopqrstuvwx"

func TestDecode(t *testing.T) {
	tests := []struct {
		name  string
		body  string
		want  Request
		field string // the invalid field, when the body is refused
	}{
		{name: "minimal", body: `{"payment": "` + payment + `"}`, want: Request{Payment: payment}},
		{name: "everything", body: `{"payment": "` + payment + `", "amount": 5, "reason": "fraudulent", "metadata": {"a": "b"}}`,
			want: Request{Payment: payment, Amount: 5, Reason: "fraudulent", Metadata: map[string]string{"a": "b"}}},
		{name: "nulls", body: `{"payment": "` + payment + `", "reason": null, "metadata": null}`, want: Request{Payment: payment}},
		{name: "no payment", body: `{"amount": 5}`, field: "payment"},
		{name: "payment of another shape", body: `{"payment": "ch_1"}`, field: "payment"},
		{name: "payment null", body: `{"payment": null}`, field: "payment"},
		{name: "amount zero", body: `{"payment": "` + payment + `", "amount": 0}`, field: "amount"},
		{name: "amount null", body: `{"payment": "` + payment + `", "amount": null}`, field: "amount"},
		{name: "amount too large", body: `{"payment": "` + payment + `", "amount": 100000000}`, field: "amount"},
		{name: "reason", body: `{"payment": "` + payment + `", "reason": "other"}`, field: "reason"},
		{name: "reason a number", body: `{"payment": "` + payment + `", "reason": 1}`, field: "reason"},
		{name: "metadata", body: `{"payment": "` + payment + `", "metadata": []}`, field: "metadata"},
		{name: "unknown", body: `{"payment": "` + payment + `", "charge": "ch_1"}`, field: "charge"},
		{name: "duplicate", body: `{"payment": "` + payment + `", "amount": 1, "amount": 2}`, field: "amount"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Decode([]byte(tt.body))
			if tt.field != "" {
				var fe *problem.FieldError
				if !errors.As(err, &fe) || fe.Field != tt.field {
					t.Errorf("Decode() = %+v, %v; want a FieldError for %s", got, err, tt.field)
				}
				return
			}
			if err != nil {
				t.Fatalf("Decode() error = %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Decode() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestID(t *testing.T) {
	key := idempotency.NewKey("acme", "refund-1")
	id := ID(key)
	if !ValidID(id) || id == ID(idempotency.NewKey("globex", "refund-1")) || id != ID(key) {
		t.Errorf("ID() = %s: want a valid ID, stable for the key and distinct across tenants", id)
	}
	for _, bad := range []string{"", "re_", "re_0123456789abcdef0123456", "re_0123456789ABCDEF01234567", "ch_0123456789abcdef01234567", payment} {
		if ValidID(bad) {
			t.Errorf("ValidID(%q) = true, want false", bad)
		}
	}
}

func TestResponse(t *testing.T) {
	key := idempotency.NewKey("acme", "refund-1")
	id := ID(key)
	created := time.Unix(1700000000, 999_000_000)
	rec := func(body string) idempotency.Record {
		canonical, err := idempotency.Canonical([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		return idempotency.Record{Key: key, Status: idempotency.StatusUnknown, External: true, Request: canonical, CreatedAt: created}
	}
	made := provider.Refund{ID: "prre_1", Charge: "prch_1", Status: provider.StatusSucceeded, Amount: 700, Currency: "EUR"}
	header := map[string]string{"Content-Type": "application/json", "Location": "/v1/refunds/" + id}
	tests := []struct {
		name string
		rec  idempotency.Record
		want idempotency.Response
	}{
		{
			name: "everything",
			rec:  rec(`{"payment":"` + payment + `","amount":700,"reason":"duplicate","metadata":{"z":"1","a":"<2>"}}`),
			want: idempotency.Response{Status: http.StatusCreated, Header: header, Body: []byte(`{"id":"` + id + `","object":"refund","payment":"` + payment +
				`","amount":700,"currency":"eur","reason":"duplicate","metadata":{"a":"\u003c2\u003e","z":"1"},"status":"succeeded","provider_refund_id":"prre_1","created":1700000000}`)},
		},
		{
			name: "the rest of the payment",
			rec:  rec(`{"payment":"` + payment + `"}`),
			want: idempotency.Response{Status: http.StatusCreated, Header: header, Body: []byte(`{"id":"` + id + `","object":"refund","payment":"` + payment +
				`","amount":700,"currency":"eur","reason":null,"metadata":{},"status":"succeeded","provider_refund_id":"prre_1","created":1700000000}`)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Response(tt.rec, made)
			if err != nil {
				t.Fatalf("Response() error = %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Response() mismatch (-want +got):\n%s", diff)
			}
		})
	}
	for name, bad := range map[string]struct {
		rec idempotency.Record
		res provider.Refund
	}{
		"another amount":   {rec(`{"payment":"` + payment + `","amount":701}`), made},
		"not succeeded":    {rec(`{"payment":"` + payment + `"}`), provider.Refund{ID: "prre_1", Status: "pending", Amount: 700}},
		"no creation time": {idempotency.Record{Key: key, Request: []byte(`{"payment":"` + payment + `"}`)}, made},
		"no request":       {idempotency.Record{Key: key, CreatedAt: created}, made},
	} {
		if got, err := Response(bad.rec, bad.res); err == nil {
			t.Errorf("%s: Response() = %s, want an error", name, got.Body)
		}
	}
}

// TestRejectHold checks the answer to a hold that failed, by the payment as
// it stands.
func TestRejectHold(t *testing.T) {
	key := idempotency.NewKey("acme", "refund-1")
	tests := []struct {
		name    string
		payment *payments.Payment
		status  int
		code    string
		detail  string
	}{
		{"no payment", nil, 404, "not_found", ""},
		{"pending", &payments.Payment{ID: payment, Status: payments.StatusPending, Amount: 100}, 400, "payment_not_refundable", ""},
		{"failed", &payments.Payment{ID: payment, Status: payments.StatusFailed, Amount: 100}, 400, "payment_not_refundable", ""},
		{"too little left", &payments.Payment{ID: payment, Status: payments.StatusSucceeded, Amount: 100, Refundable: 40, Holds: map[string]int64{"other": 60}},
			400, "amount_exceeds_refundable", "The amount is more than is left to refund of this payment: 40, counting refunds in progress."},
		{"nothing left", &payments.Payment{ID: payment, Status: payments.StatusSucceeded, Amount: 100, AmountRefunded: 100, Holds: map[string]int64{}},
			400, "amount_exceeds_refundable", "Nothing is left to refund of this payment, counting refunds in progress."},
		{"settled before refunds", &payments.Payment{ID: payment, Status: payments.StatusSucceeded, Amount: 100}, 500, "internal_error", ""},
		{"held for the key already", &payments.Payment{ID: payment, Status: payments.StatusSucceeded, Amount: 100, Refundable: 40, Holds: map[string]int64{key.Hash: 60}},
			500, "internal_error", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var current map[string]types.AttributeValue
			if tt.payment != nil {
				av, err := attributevalue.MarshalMap(*tt.payment)
				if err != nil {
					t.Fatal(err)
				}
				if _, ok := av[payments.AttrRefundable]; !ok && tt.payment.Holds != nil {
					// Settle writes both; a 0 is omitted from the struct's
					// item, not from DynamoDB's.
					av[payments.AttrRefundable] = &types.AttributeValueMemberN{Value: "0"}
				}
				current = av
			}
			err := rejectHold(key)(current)
			d := problem.For(err)
			if d.Status != tt.status || d.Code != tt.code || tt.detail != "" && d.Detail != tt.detail {
				t.Errorf("rejectHold() = %v: %d %s %q, want %d %s %q", err, d.Status, d.Code, d.Detail, tt.status, tt.code, tt.detail)
			}
		})
	}
}
