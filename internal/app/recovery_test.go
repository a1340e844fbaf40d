package app_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/oncehq/once/internal/charges"
	"github.com/oncehq/once/internal/reconciler"
	"github.com/oncehq/once/internal/sweeper"

	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/internal/app"
	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/dynamotest"
	"github.com/oncehq/once/internal/lambdatest"
	"github.com/oncehq/once/internal/provider"
)

// TestSweeperAndReconciler runs the composed sweeper and reconciler behind
// Pollers on the idempotency table: an abandoned charge reservation removed
// without a user identity after its lease (as LocalStack's TTL does) is
// restored and completed with httpapi.ChargeResponse's answer. The lease
// ended minutes before the removal, because DynamoDB Local rounds a stream
// record's ApproximateCreationDateTime down to the minute.
func TestSweeperAndReconciler(t *testing.T) {
	f := newFixture(t)
	cfg := f.config(t, map[string]string{
		config.EnvProviderTimeout: "500ms",
		config.EnvProviderSettle:  "500ms",
	})
	var sweeperOut, reconcilerOut lambdatest.Buffer
	sweep, err := sweeper.Handler(t.Context(), cfg, f.clients, app.Options{Logger: slog.New(slog.DiscardHandler), Metrics: &sweeperOut})
	if err != nil {
		t.Fatalf("Sweeper() error = %v", err)
	}
	reconcile, err := reconciler.Handler(cfg, f.client, app.Options{Logger: slog.New(slog.DiscardHandler), Metrics: &reconcilerOut})
	if err != nil {
		t.Fatalf("Reconciler() error = %v", err)
	}
	f.poll(t, f.names.ByLogicalID["IdempotencyTable"], sweep)
	f.poll(t, f.names.ByLogicalID["IdempotencyTable"], reconcile)

	body := []byte(`{"amount":1999,"currency":"usd","customer":"cus_1","source":"tok_visa"}`)
	canonical, err := idempotency.Canonical(body)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	key := idempotency.NewKey("acme", "order-1")
	store := dynamo.New(f.client, f.names.ByLogicalID["IdempotencyTable"])
	res := idempotency.Record{
		Key: key, Status: idempotency.StatusInProgress, Route: "POST /v1/charges",
		Fingerprint: idempotency.Fingerprint("POST", "POST /v1/charges", canonical), External: true,
		LeaseToken: idempotency.NewToken(), ExpiresAt: now.Add(-2 * time.Minute), Request: canonical,
		CreatedAt: now.Add(-time.Minute), UpdatedAt: now.Add(-time.Minute),
	}
	if err := store.Reserve(t.Context(), res, nil, res.CreatedAt); err != nil {
		t.Fatal(err)
	}
	stored, err := store.Get(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	pc := provider.New(f.providerURL, nil)
	charge, err := pc.Charge(t.Context(), res.ForwardKey(), provider.ChargeRequest{Amount: 1999, Currency: "usd", Customer: "cus_1", Source: "tok_visa"})
	if err != nil {
		t.Fatal(err)
	}
	dynamotest.Delete(t, f.client, f.names.ByLogicalID["IdempotencyTable"], key.ID())

	deadline := time.Now().Add(15 * time.Second)
	var got idempotency.Record
	for {
		got, err = store.Get(t.Context(), key)
		if err == nil && got.Status == idempotency.StatusCompleted {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("15s after the removal: Get() = %s, %v; want COMPLETED", got.Status, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	want, err := charges.Response(stored, charge)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&want, got.Response); diff != "" {
		t.Errorf("stored response mismatch (-want +got):\n%s", diff)
	}
	for _, m := range []struct {
		out  *lambdatest.Buffer
		want []string
	}{
		{&sweeperOut, []string{`"Service":"sweeper"`, `"zombie_swept":1`, `"reconcile_scheduled":1`}},
		{&reconcilerOut, []string{`"Service":"reconciler"`, `"reconcile_resolved":1`}},
	} {
		for _, s := range m.want {
			if !strings.Contains(m.out.String(), s) {
				t.Errorf("metrics %q lack %s", m.out.String(), s)
			}
		}
	}
}
