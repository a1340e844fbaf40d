package payments

import (
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestNewID(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id := NewID()
		if !ValidID(id) {
			t.Fatalf("NewID() = %q, not a ValidID", id)
		}
		if seen[id] {
			t.Fatalf("NewID() = %q twice", id)
		}
		seen[id] = true
	}
}

func TestValidID(t *testing.T) {
	tests := []struct {
		id   string
		want bool
	}{
		{"pay_abcdefghijklmnopqrstuvwx", true},
		{"pay_234567234567234567234567", true},
		{"pay_abcdefghijklmnopqrstuvw", false},   // 23
		{"pay_abcdefghijklmnopqrstuvwxy", false}, // 25
		{"pay_ABCDEFGHIJKLMNOPQRSTUVWX", false},
		{"pay_abcdefghijklmnopqrstuvw1", false},
		{"ch_abcdefghijklmnopqrstuvwxy", false},
		{"", false},
		{"pay_abcdefghijklmnopqrstu#vx", false},
	}
	for _, tt := range tests {
		if got := ValidID(tt.id); got != tt.want {
			t.Errorf("ValidID(%q) = %v, want %v", tt.id, got, tt.want)
		}
	}
}

func TestPaymentJSON(t *testing.T) {
	now := time.Unix(1700000000, 999_000_000)
	plain := Request{Amount: 2500, Currency: "eur", Customer: "cus_42", Source: "tok_visa"}
	tests := []struct {
		name   string
		req    Request
		settle func(*Payment)
		want   string
	}{
		{
			name: "without optional fields",
			req:  plain,
			want: `{"id":"%s","object":"payment","amount":2500,"amount_refunded":0,"currency":"eur","customer":"cus_42","description":null,"metadata":{},"status":"pending","provider_charge_id":null,"failure_code":null,"created":1700000000}`,
		},
		{
			name: "with description and metadata",
			req: Request{Amount: 1, Currency: "usd", Customer: "c", Description: "Order <1>",
				Metadata: map[string]string{"z": "1", "a": "2"}, Source: "tok_visa"},
			want: `{"id":"%s","object":"payment","amount":1,"amount_refunded":0,"currency":"usd","customer":"c","description":"Order \u003c1\u003e","metadata":{"a":"2","z":"1"},"status":"pending","provider_charge_id":null,"failure_code":null,"created":1700000000}`,
		},
		{
			name:   "succeeded",
			req:    plain,
			settle: func(p *Payment) { p.Status, p.ProviderChargeID = StatusSucceeded, "prch_1" },
			want:   `{"id":"%s","object":"payment","amount":2500,"amount_refunded":0,"currency":"eur","customer":"cus_42","description":null,"metadata":{},"status":"succeeded","provider_charge_id":"prch_1","failure_code":null,"created":1700000000}`,
		},
		{
			name: "declined",
			req:  plain,
			settle: func(p *Payment) {
				p.Status, p.ProviderChargeID, p.FailureCode = StatusFailed, "prch_2", "card_declined"
			},
			want: `{"id":"%s","object":"payment","amount":2500,"amount_refunded":0,"currency":"eur","customer":"cus_42","description":null,"metadata":{},"status":"failed","provider_charge_id":"prch_2","failure_code":"card_declined","created":1700000000}`,
		},
		{
			name:   "rejected by the provider, nothing charged",
			req:    plain,
			settle: func(p *Payment) { p.Status, p.FailureCode = StatusFailed, "provider_rejected" },
			want:   `{"id":"%s","object":"payment","amount":2500,"amount_refunded":0,"currency":"eur","customer":"cus_42","description":null,"metadata":{},"status":"failed","provider_charge_id":null,"failure_code":"provider_rejected","created":1700000000}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := New("acme", tt.req, now)
			if tt.settle != nil {
				tt.settle(&p)
			}
			got, err := p.MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			if want := strings.Replace(tt.want, "%s", p.ID, 1); string(got) != want {
				t.Errorf("MarshalJSON() =\n%s\nwant\n%s", got, want)
			}
		})
	}
}

func TestItem(t *testing.T) {
	p := New("acme", Request{Amount: 2500, Currency: "eur", Customer: "cus_42", Source: "tok_visa"}, time.Unix(1700000000, 5))
	item, err := attributevalue.MarshalMap(p)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]types.AttributeValue{
		"pk":       &types.AttributeValueMemberS{Value: "acme#" + p.ID},
		"id":       &types.AttributeValueMemberS{Value: p.ID},
		"tenant":   &types.AttributeValueMemberS{Value: "acme"},
		"amount":   &types.AttributeValueMemberN{Value: "2500"},
		"currency": &types.AttributeValueMemberS{Value: "eur"},
		"customer": &types.AttributeValueMemberS{Value: "cus_42"},
		"source":   &types.AttributeValueMemberS{Value: "tok_visa"},
		"status":   &types.AttributeValueMemberS{Value: "pending"},
		"created":  &types.AttributeValueMemberN{Value: "1700000000"},
	}
	if diff := cmp.Diff(want, item, cmpopts.IgnoreUnexported(types.AttributeValueMemberS{}, types.AttributeValueMemberN{})); diff != "" {
		t.Errorf("item mismatch (-want +got):\n%s", diff)
	}
	var back Payment
	if err := attributevalue.UnmarshalMap(item, &back); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(p, back); diff != "" {
		t.Errorf("item round trip mismatch (-want +got):\n%s", diff)
	}
}
