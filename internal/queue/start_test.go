package queue_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/oncehq/once/internal/app"
	"github.com/oncehq/once/internal/checker"
	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/queue"
	"github.com/oncehq/once/internal/receipts"
	"github.com/oncehq/once/internal/sqstest"
	"github.com/oncehq/once/internal/sweeper"
	"github.com/oncehq/once/internal/worker"
)

// TestStartRefuses checks that a function that uses queues and cannot start
// says why and starts nothing: lambda.StartWithOptions, outside the Lambda
// runtime, would end the test binary.
func TestStartRefuses(t *testing.T) {
	empty := sqstest.Endpoint(t) // an SQS endpoint without queues
	wrap := func(b queue.Builder[any]) func(context.Context, func(string) string, *bool) error {
		return func(ctx context.Context, getenv func(string) string, built *bool) error {
			return queue.Start(ctx, getenv, func(ctx context.Context, cfg config.Config, c queue.Clients, opts app.Options) (any, error) {
				*built = true
				return b(ctx, cfg, c, opts)
			})
		}
	}
	anyOf := func(h any, err error) (any, error) { return h, err }
	fns := map[string]queue.Builder[any]{
		"worker": func(ctx context.Context, cfg config.Config, c queue.Clients, o app.Options) (any, error) {
			return anyOf(worker.Handler(ctx, cfg, c, o))
		},
		"retrier": func(ctx context.Context, cfg config.Config, c queue.Clients, o app.Options) (any, error) {
			return anyOf(worker.RetryHandler(ctx, cfg, c, o))
		},
		"sweeper": func(ctx context.Context, cfg config.Config, c queue.Clients, o app.Options) (any, error) {
			return anyOf(sweeper.Handler(ctx, cfg, c, o))
		},
		"checker": func(ctx context.Context, cfg config.Config, c queue.Clients, o app.Options) (any, error) {
			return anyOf(checker.Handler(ctx, cfg, c, o))
		},
		"receipts": func(ctx context.Context, cfg config.Config, c queue.Clients, o app.Options) (any, error) {
			return anyOf(receipts.Handler(ctx, cfg, c, o))
		},
		"resender": func(ctx context.Context, cfg config.Config, c queue.Clients, o app.Options) (any, error) {
			return anyOf(receipts.RetryHandler(ctx, cfg, c, o))
		},
	}
	tests := []struct {
		fn    string
		env   map[string]string
		names []string // what the error must name
		built bool     // the configuration is valid: build is called, and fails
	}{
		{fn: "worker", env: map[string]string{"ONCE_PROVIDER_TIMEOUT": "-1s", "ONCE_WORKER_RETRY_WINDOW": "0s", "ONCE_WORKER_RETRY_QUEUE": "a.fifo"},
			names: []string{"ONCE_PROVIDER_TIMEOUT", "ONCE_WORKER_RETRY_WINDOW", "ONCE_WORKER_RETRY_QUEUE"}},
		{fn: "worker", env: map[string]string{"SQS_ENDPOINT": empty}, names: []string{"ONCE_PROVIDER_URL"}, built: true},
		{fn: "retrier", env: map[string]string{"SQS_ENDPOINT": empty, "ONCE_PROVIDER_URL": "http://127.0.0.1:1"},
			names: []string{"ONCE_WORKER_RETRY_QUEUE", config.DefaultWorkerRetryQueue}, built: true},
		{fn: "sweeper", env: map[string]string{"ONCE_RETENTION": "forever", "SQS_ENDPOINT": "sqs"},
			names: []string{"ONCE_RETENTION", "SQS_ENDPOINT"}},
		{fn: "sweeper", env: map[string]string{"SQS_ENDPOINT": empty}, names: []string{"ONCE_CHECK_QUEUE", config.DefaultCheckQueue}, built: true},
		{fn: "checker", env: map[string]string{"SQS_ENDPOINT": empty, "ONCE_CHECK_QUEUE": "http://127.0.0.1:1/000000000000/nope"},
			names: nil, built: true},
		{fn: "receipts", env: map[string]string{"SQS_ENDPOINT": empty}, names: []string{"ONCE_MAIL_URL"}, built: true},
		{fn: "receipts", env: map[string]string{"SQS_ENDPOINT": empty, "ONCE_MAIL_URL": "http://127.0.0.1:1"},
			names: []string{"ONCE_RECEIPT_RETRY_QUEUE", config.DefaultReceiptRetryQueue}, built: true},
		{fn: "resender", env: map[string]string{"SQS_ENDPOINT": empty, "ONCE_MAIL_URL": "http://127.0.0.1:1"},
			names: []string{"ONCE_RECEIPT_RETRY_DLQ", config.DefaultReceiptRetryDLQ}, built: true},
	}
	for _, tt := range tests {
		t.Run(tt.fn+" "+strings.Join(tt.names, " "), func(t *testing.T) {
			// In Lambda, as here: the region is set (DynamoDB is AWS's, and
			// only an emulator's endpoint would default it).
			tt.env[config.EnvRegion] = "us-east-1"
			if tt.fn == "checker" {
				// A queue URL is taken as it is: the checker starts (and
				// lambda.Start would end the test), so only build it here.
				cfg, err := config.FromEnv(func(k string) string { return tt.env[k] })
				if err != nil {
					t.Fatal(err)
				}
				c, err := queue.NewClients(t.Context(), cfg)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := checker.Handler(t.Context(), cfg, c, app.Options{}); err != nil {
					t.Errorf("checker.Handler(queue URL) = %v, want it built without a call", err)
				}
				return
			}
			built := false
			err := wrap(fns[tt.fn])(t.Context(), func(k string) string { return tt.env[k] }, &built)
			if err == nil {
				t.Fatal("Start() = nil, want an error")
			}
			for _, name := range tt.names {
				if !strings.Contains(err.Error(), name) {
					t.Errorf("Start() error = %q, want it to name %s", err, name)
				}
			}
			if built != tt.built {
				t.Errorf("Start() called build: %v, want %v", built, tt.built)
			}
		})
	}
}

// TestBackoff checks the delays of retries: doubling from base, capped at
// MaxDelay, each between half of that and all of it.
func TestBackoff(t *testing.T) {
	for _, tt := range []struct {
		attempt int
		nominal time.Duration
	}{{1, time.Second}, {2, 2 * time.Second}, {3, 4 * time.Second}, {10, 512 * time.Second}, {11, queue.MaxDelay}, {1000, queue.MaxDelay}} {
		for range 50 {
			if got := queue.Backoff(time.Second, tt.attempt); got < tt.nominal/2 || got > tt.nominal {
				t.Fatalf("Backoff(1s, %d) = %v, want %v to %v", tt.attempt, got, tt.nominal/2, tt.nominal)
			}
		}
	}
	if got := queue.Backoff(0, 3); got != 0 {
		t.Errorf("Backoff(0, 3) = %v, want 0", got)
	}
}
