package app_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/internal/app"
	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/dynamotest"
	"github.com/oncehq/once/internal/httpapi"
	"github.com/oncehq/once/internal/idempotency"
	"github.com/oncehq/once/internal/provider"
	"github.com/oncehq/once/internal/provider/simulator"
	"github.com/oncehq/once/internal/store/dynamo"
	"github.com/oncehq/once/internal/stream"
)

func TestReconcilerNeedsProviderURL(t *testing.T) {
	cfg, err := config.FromEnv(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := app.Reconciler(cfg, nil, app.Options{}); err == nil || !strings.Contains(err.Error(), config.EnvProviderURL) {
		t.Errorf("Reconciler(no provider URL) error = %v, want one naming %s", err, config.EnvProviderURL)
	}
}

// recoveryBuffer is a bytes.Buffer safe for concurrent use.
type recoveryBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *recoveryBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *recoveryBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestSweeperAndReconciler runs the composed sweeper and reconciler behind
// Pollers on the idempotency table: an abandoned charge reservation removed
// without a user identity after its lease (as LocalStack's TTL does) is
// restored and completed with httpapi.ChargeResponse's answer. The lease
// ended minutes before the removal, because DynamoDB Local rounds a stream
// record's ApproximateCreationDateTime down to the minute.
func TestSweeperAndReconciler(t *testing.T) {
	client := dynamotest.Client(t)
	names := dynamotest.Tables(t, client)
	srv := httptest.NewServer(simulator.New(simulator.Options{DB: client, Table: names.Provider}))
	t.Cleanup(srv.Close)
	env := map[string]string{
		config.EnvIdempotencyTable: names.Idempotency,
		config.EnvProviderURL:      srv.URL,
		config.EnvProviderTimeout:  "500ms",
		config.EnvDynamoDBEndpoint: dynamotest.Endpoint(t),
	}
	cfg, err := config.FromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	var sweeperOut, reconcilerOut recoveryBuffer
	sweep, err := app.Sweeper(cfg, client, app.Options{Logger: slog.New(slog.DiscardHandler), Metrics: &sweeperOut})
	if err != nil {
		t.Fatalf("Sweeper() error = %v", err)
	}
	reconcile, err := app.Reconciler(cfg, client, app.Options{Logger: slog.New(slog.DiscardHandler), Metrics: &reconcilerOut})
	if err != nil {
		t.Fatalf("Reconciler() error = %v", err)
	}
	for _, h := range []stream.Handler{sweep, reconcile} {
		p, err := stream.NewPoller(stream.PollerOptions{
			Client: dynamotest.Streams(t), DB: client, Table: names.Idempotency, Handler: h,
			PollInterval: 20 * time.Millisecond, Logger: slog.New(slog.DiscardHandler),
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- p.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
	}

	body := []byte(`{"amount":1999,"currency":"usd","customer":"cus_1","source":"tok_visa"}`)
	canonical, err := idempotency.Canonical(body)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	key := idempotency.NewKey("acme", "order-1")
	store := dynamo.New(client, names.Idempotency)
	res := idempotency.Record{
		Key: key, Status: idempotency.StatusInProgress, Route: "POST /v1/charges",
		Fingerprint: idempotency.Fingerprint("POST", "POST /v1/charges", canonical), External: true,
		LeaseToken: idempotency.NewToken(), ExpiresAt: now.Add(-2 * time.Minute), Request: canonical,
		CreatedAt: now.Add(-time.Minute), UpdatedAt: now.Add(-time.Minute),
	}
	if err := store.Reserve(t.Context(), res, res.CreatedAt); err != nil {
		t.Fatal(err)
	}
	stored, err := store.Get(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	pc := provider.New(srv.URL, nil)
	charge, err := pc.Charge(t.Context(), key.Forward(), provider.ChargeRequest{Amount: 1999, Currency: "usd", Customer: "cus_1", Source: "tok_visa"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.DeleteItem(t.Context(), &dynamodb.DeleteItemInput{
		TableName: aws.String(names.Idempotency),
		Key:       map[string]types.AttributeValue{dynamo.AttrPK: &types.AttributeValueMemberS{Value: key.ID()}},
	}); err != nil {
		t.Fatal(err)
	}

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
	want, err := httpapi.ChargeResponse(stored, charge)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&want, got.Response); diff != "" {
		t.Errorf("stored response mismatch (-want +got):\n%s", diff)
	}
	for _, m := range []struct {
		out  *recoveryBuffer
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
