package dynamo_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/dynamo"
)

// TestInvalidTenantNothingWritten: a tenant outside the rule that the
// deployment's tenant function returns (with '#', control characters, more
// than DynamoDB keys hold, non-ASCII) is refused 403 tenant_invalid, on
// every retry, and nothing reaches the tables; an empty one is 401.
func TestInvalidTenantNothingWritten(t *testing.T) {
	store, client, names := newStore(t)
	records, payments := names.ByLogicalID["IdempotencyTable"], names.ByLogicalID["PaymentsTable"]
	tests := []struct {
		name, tenant string
		status       int
		code         string
	}{
		{"hash", "acme#x", http.StatusForbidden, "tenant_invalid"},
		{"control characters", "acme\x00\r\n", http.StatusForbidden, "tenant_invalid"},
		{"over-long", strings.Repeat("a", 3000), http.StatusForbidden, "tenant_invalid"},
		{"unicode", "acmé", http.StatusForbidden, "tenant_invalid"},
		{"empty", "", http.StatusUnauthorized, "unauthorized"},
	}
	for _, mode := range []idempotency.Mode{idempotency.Atomic, idempotency.Leased, idempotency.External} {
		for _, tt := range tests {
			t.Run(mode.String()+"/"+tt.name, func(t *testing.T) {
				mw, err := idempotency.New(idempotency.Config{Store: store, Tenant: func(*http.Request) (string, bool) { return tt.tenant, true }})
				if err != nil {
					t.Fatal(err)
				}
				h := wrap(t, mw, mode, "POST /v1/notes", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					call, ok := idempotency.Begin(w, r)
					if !ok {
						return
					}
					call.AddEffect(dynamo.Insert(payments, "pk", map[string]string{"pk": call.Key().ID()}))
					w.WriteHeader(http.StatusCreated)
				}))
				for attempt := range 3 {
					w, obs := post(h, "k1", `{}`)
					if w.Code != tt.status || !strings.Contains(w.Body.String(), `"code":"`+tt.code+`"`) || obs.StoreCalls != 0 {
						t.Errorf("attempt %d = %d %s (%d store calls, outcome %s, err %.200q), want %d %s, no store call",
							attempt, w.Code, w.Body, obs.StoreCalls, obs.Outcome, obs.Err, tt.status, tt.code)
					}
				}
			})
		}
	}
	for _, table := range []string{records, payments} {
		out, err := client.Scan(t.Context(), &dynamodb.ScanInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true)})
		if err != nil {
			t.Fatal(err)
		}
		if out.Count != 0 {
			t.Errorf("%s holds %d items after refused tenants, want 0", table, out.Count)
		}
	}
}
