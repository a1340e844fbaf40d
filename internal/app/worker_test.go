package app_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/oncehq/once/internal/worker"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/oncehq/once/internal/app"
	"github.com/oncehq/once/internal/lambdatest"
	"github.com/oncehq/once/internal/payments"
	"github.com/oncehq/once/internal/provider/simulator"
)

// TestWorkerSettles runs the composed handler behind a Poller on the
// payments table, against the provider simulator.
func TestWorkerSettles(t *testing.T) {
	f := newFixture(t)
	cfg := f.config(t, map[string]string{})
	var out lambdatest.Buffer
	h, err := worker.Handler(t.Context(), cfg, f.clients, app.Options{Logger: slog.New(slog.DiscardHandler), Metrics: &out})
	if err != nil {
		t.Fatalf("Worker() error = %v", err)
	}
	f.poll(t, f.names.ByLogicalID["PaymentsTable"], h)

	pay := payments.New("acme", payments.Request{Amount: 100, Currency: "usd", Customer: "c", Source: simulator.TokenVisa}, time.Now())
	item, err := attributevalue.MarshalMap(pay)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.PutItem(t.Context(), &dynamodb.PutItemInput{TableName: aws.String(f.names.ByLogicalID["PaymentsTable"]), Item: item}); err != nil {
		t.Fatal(err)
	}
	table := payments.NewTable(f.client, f.names.ByLogicalID["PaymentsTable"])
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := table.Get(t.Context(), pay.Tenant, pay.ID)
		if err != nil {
			t.Fatal(err)
		}
		// The metric is written once the settle has returned.
		m := out.String()
		if got.Status == payments.StatusSucceeded && got.ProviderChargeID != "" &&
			strings.Contains(m, `"Service":"worker","worker_charged":1`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 10s: payment %s, metrics %q; want succeeded, worker_charged with Service=worker", got.Status, m)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
