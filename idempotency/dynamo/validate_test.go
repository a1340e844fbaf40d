package dynamo_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/dynamo"
	"github.com/oncehq/once/idempotency/recovery"
)

// TestMisconfiguredStoreRefused: a Store without a client (a constructor's
// error ignored) or without a table name (an environment variable not set)
// is refused by idempotency.New, naming what is missing, rather than
// panicking at the first request or answering every request 500.
func TestMisconfiguredStoreRefused(t *testing.T) {
	client := dynamodb.New(dynamodb.Options{Region: "us-east-1"})
	var nilClient *dynamodb.Client
	tests := []struct {
		name  string
		store *dynamo.Store
		want  []string // what the error names; none: no error
	}{
		{"configured", dynamo.New(client, "records"), nil},
		{"nil client", dynamo.New(nil, "records"), []string{"client"}},
		{"nil *dynamodb.Client", dynamo.New(nilClient, "records"), []string{"client"}},
		{"empty table", dynamo.New(client, ""), []string{"table"}},
		{"neither", dynamo.New(nilClient, ""), []string{"client", "table"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			verr := tt.store.Validate()
			_, err := idempotency.New(idempotency.Config{Store: tt.store, Tenant: func(*http.Request) (string, bool) { return "acme", true }})
			if tt.want == nil {
				if verr != nil || err != nil {
					t.Errorf("Validate() = %v, New() = %v; want no errors", verr, err)
				}
				return
			}
			if err == nil || verr == nil {
				t.Fatalf("Validate() = %v, New() = %v; want errors naming %q", verr, err, tt.want)
			}
			if !errors.Is(err, dynamo.ErrMisconfigured) {
				t.Errorf("New() = %v, want an error matching dynamo.ErrMisconfigured", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("New() = %v, want it to name the %s", err, w)
				}
			}
			// The recovery functions refuse it at start-up too.
			resolvers := idempotency.Resolvers{"POST /v1/charges": idempotency.ResolverFunc(
				func(context.Context, idempotency.Record) (idempotency.Resolution, error) {
					return idempotency.Resolution{}, nil
				})}
			_, serr := recovery.NewSweeper(recovery.SweeperConfig{Store: tt.store})
			_, cerr := recovery.NewChecker(recovery.CheckerConfig{Store: tt.store, Queue: noQueue{}})
			_, rerr := recovery.NewReconciler(recovery.ReconcilerConfig{Store: tt.store, Resolvers: resolvers})
			for name, err := range map[string]error{"NewSweeper": serr, "NewChecker": cerr, "NewReconciler": rerr} {
				if !errors.Is(err, dynamo.ErrMisconfigured) {
					t.Errorf("recovery.%s = %v, want an error matching dynamo.ErrMisconfigured", name, err)
				}
			}
		})
	}
}

// noQueue is a recovery.Queue that is never sent to.
type noQueue struct{}

func (noQueue) Send(context.Context, string, time.Duration) error { return errors.New("not sent") }
