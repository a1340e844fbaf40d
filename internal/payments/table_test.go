package payments

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/internal/dynamoclient"
	"github.com/oncehq/once/internal/dynamotest"
)

func put(t *testing.T, client *dynamodb.Client, table string, p Payment) {
	t.Helper()
	item, err := attributevalue.MarshalMap(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.PutItem(t.Context(), &dynamodb.PutItemInput{TableName: aws.String(table), Item: item}); err != nil {
		t.Fatal(err)
	}
}

func TestTable(t *testing.T) {
	client := dynamotest.Client(t)
	names := dynamotest.Tables(t, client)
	tbl := NewTable(client, names.ByLogicalID["PaymentsTable"])
	now := time.Unix(1700000000, 0).UTC()
	p := New("acme", Request{Amount: 2500, Currency: "eur", Customer: "cus_42", Description: "d",
		Metadata: map[string]string{"order": "1001"}, Source: "tok_visa"}, now)
	put(t, client, names.ByLogicalID["PaymentsTable"], p)

	t.Run("get", func(t *testing.T) {
		got, err := tbl.Get(t.Context(), "acme", p.ID)
		if err != nil {
			t.Fatalf("Get() error = %v", err)
		}
		if diff := cmp.Diff(p, got); diff != "" {
			t.Errorf("Get() mismatch (-want +got):\n%s", diff)
		}
	})
	t.Run("other tenant", func(t *testing.T) {
		if _, err := tbl.Get(t.Context(), "globex", p.ID); !errors.Is(err, ErrNotFound) {
			t.Errorf("Get(globex) error = %v, want ErrNotFound", err)
		}
	})
	t.Run("unknown id", func(t *testing.T) {
		if _, err := tbl.Get(t.Context(), "acme", NewID()); !errors.Is(err, ErrNotFound) {
			t.Errorf("Get(unknown) error = %v, want ErrNotFound", err)
		}
	})
	t.Run("settle", func(t *testing.T) {
		if err := tbl.Settle(t.Context(), "acme", p.ID, StatusSucceeded, "ch_1", ""); err != nil {
			t.Fatalf("Settle() error = %v", err)
		}
		got, err := tbl.Get(t.Context(), "acme", p.ID)
		if err != nil {
			t.Fatal(err)
		}
		want := p
		want.Status, want.ProviderChargeID = StatusSucceeded, "ch_1"
		want.Refundable, want.Holds = p.Amount, map[string]int64{} // refundable in full
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("after Settle() mismatch (-want +got):\n%s", diff)
		}
		err = tbl.Settle(t.Context(), "acme", p.ID, StatusFailed, "", "card_declined")
		var np *NotPendingError
		if !errors.As(err, &np) || !errors.Is(err, ErrNotPending) {
			t.Fatalf("second Settle() error = %v, want *NotPendingError", err)
		}
		if np.Payment.Status != StatusSucceeded {
			t.Errorf("NotPendingError.Payment.Status = %q, want succeeded", np.Payment.Status)
		}
	})
	t.Run("settle failed", func(t *testing.T) {
		q := New("acme", Request{Amount: 1, Currency: "usd", Customer: "c", Source: "tok_visa"}, now)
		put(t, client, names.ByLogicalID["PaymentsTable"], q)
		if err := tbl.Settle(t.Context(), "acme", q.ID, StatusFailed, "", "card_declined"); err != nil {
			t.Fatalf("Settle(failed) error = %v", err)
		}
		got, _ := tbl.Get(t.Context(), "acme", q.ID)
		if got.Status != StatusFailed || got.FailureCode != "card_declined" || got.ProviderChargeID != "" {
			t.Errorf("after Settle(failed) = %+v, want failed with card_declined", got)
		}
	})
	t.Run("settle missing", func(t *testing.T) {
		err := tbl.Settle(t.Context(), "globex", p.ID, StatusSucceeded, "ch_1", "")
		if !errors.Is(err, ErrNotFound) {
			t.Errorf("Settle(other tenant) error = %v, want ErrNotFound", err)
		}
		if _, err := tbl.Get(t.Context(), "globex", p.ID); !errors.Is(err, ErrNotFound) {
			t.Errorf("Settle(other tenant) created an item: Get error = %v", err)
		}
	})
	t.Run("settle arguments", func(t *testing.T) {
		for _, tc := range []struct {
			status           Status
			charge, failCode string
		}{
			{StatusSucceeded, "", ""},
			{StatusFailed, "ch_1", ""},
			{StatusPending, "ch_1", "x"},
		} {
			if err := tbl.Settle(t.Context(), "acme", p.ID, tc.status, tc.charge, tc.failCode); err == nil || errors.Is(err, ErrNotPending) {
				t.Errorf("Settle(%q, %q, %q) error = %v, want an argument error", tc.status, tc.charge, tc.failCode, err)
			}
		}
	})
	t.Run("missing table is not an outage", func(t *testing.T) {
		_, err := NewTable(client, "no-such-table").Get(t.Context(), "acme", p.ID)
		if err == nil || errors.Is(err, ErrUnavailable) || errors.Is(err, ErrNotFound) {
			t.Errorf("Get(no such table) error = %v, want a plain error", err)
		}
	})
}

func TestTableUnavailable(t *testing.T) {
	dynamotest.Endpoint(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	cfg, err := dynamoclient.Config(ctx, dynamoclient.Options{Endpoint: "http://127.0.0.1:1", MaxAttempts: 2})
	if err != nil {
		t.Fatal(err)
	}
	tbl := NewTable(dynamoclient.New(cfg, "http://127.0.0.1:1"), "once-payments")
	if _, err := tbl.Get(ctx, "acme", NewID()); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Get() against a closed port error = %v, want ErrUnavailable", err)
	}
}
