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
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/oncehq/once/internal/app"
	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/dynamotest"
	"github.com/oncehq/once/internal/payments"
	"github.com/oncehq/once/internal/provider/simulator"
	"github.com/oncehq/once/internal/stream"
)

func TestWorkerNeedsProviderURL(t *testing.T) {
	cfg, err := config.FromEnv(func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := app.Worker(cfg, nil, app.Options{}); err == nil || !strings.Contains(err.Error(), config.EnvProviderURL) {
		t.Errorf("Worker(no provider URL) error = %v, want one naming %s", err, config.EnvProviderURL)
	}
}

// TestWorkerSettles runs the composed handler behind a Poller on the
// payments table, against the provider simulator.
func TestWorkerSettles(t *testing.T) {
	client := dynamotest.Client(t)
	names := dynamotest.Tables(t, client)
	srv := httptest.NewServer(simulator.New(simulator.Options{DB: client, Table: names.Provider}))
	t.Cleanup(srv.Close)
	env := map[string]string{
		config.EnvPaymentsTable:    names.Payments,
		config.EnvProviderURL:      srv.URL,
		config.EnvDynamoDBEndpoint: dynamotest.Endpoint(t),
	}
	cfg, err := config.FromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	var out lockedBuffer
	h, err := app.Worker(cfg, client, app.Options{Logger: slog.New(slog.DiscardHandler), Metrics: &out})
	if err != nil {
		t.Fatalf("Worker() error = %v", err)
	}
	p, err := stream.NewPoller(stream.PollerOptions{
		Client: dynamotest.Streams(t), DB: client, Table: names.Payments, Handler: h,
		PollInterval: 20 * time.Millisecond, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	pay := payments.New("acme", payments.Request{Amount: 100, Currency: "usd", Customer: "c", Source: simulator.TokenVisa}, time.Now())
	item, err := attributevalue.MarshalMap(pay)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.PutItem(t.Context(), &dynamodb.PutItemInput{TableName: aws.String(names.Payments), Item: item}); err != nil {
		t.Fatal(err)
	}
	table := payments.NewTable(client, names.Payments)
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

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
