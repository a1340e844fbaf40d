package dynamo_test

import (
	"bytes"
	"crypto/rand"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/dynamo"
)

// TestInvalidTenantNothingWritten: a tenant outside the rule that the
// deployment's tenant function returns (with '#', control characters, more
// than the tenant rule allows, invalid UTF-8) is refused 403 tenant_invalid, on
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
		{"C1 control character", "acme\u009b31m", http.StatusForbidden, "tenant_invalid"},
		{"invalid UTF-8", "acme\xff", http.StatusForbidden, "tenant_invalid"},
		{"one byte too long", strings.Repeat("é", idempotency.MaxTenantLength/2) + "a", http.StatusForbidden, "tenant_invalid"},
		{"over-long", strings.Repeat("a", 3000), http.StatusForbidden, "tenant_invalid"},
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

// TestValidTenantsStored: every class of tenant the rule allows (an
// assumed-role ARN, spaces, non-ASCII, one of exactly MaxTenantLength
// bytes) completes a request on DynamoDB and replays it, in every mode. The
// longest tenant's answer is large enough to be chunked, and its record
// gets a restore mark, so the store's longest derived partition keys (a
// chunk's, a restore mark's) are written and read back at the limit.
func TestValidTenantsStored(t *testing.T) {
	store, client, names := newStore(t)
	table := names.ByLogicalID["IdempotencyTable"]
	big := make([]byte, 1<<20) // incompressible: three chunks
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	longest := strings.Repeat("é", idempotency.MaxTenantLength/2-1) + "Z "
	if len(longest) != idempotency.MaxTenantLength {
		t.Fatalf("longest tenant is %d bytes, want %d", len(longest), idempotency.MaxTenantLength)
	}
	tests := []struct {
		name, tenant string
		body         []byte
	}{
		{"assumed-role ARN", "arn:aws:sts::123456789012:assumed-role/" + strings.Repeat("r", 64) + "/" + strings.Repeat("s", 64), []byte("ok")},
		{"spaces and unicode", "Société Générale – 東京 🚀", []byte("ok")},
		{"longest", longest, []byte("ok")},
		{"longest, chunked answer", longest, big},
	}
	for _, mode := range []idempotency.Mode{idempotency.Atomic, idempotency.Leased, idempotency.External} {
		for _, tt := range tests {
			t.Run(mode.String()+"/"+tt.name, func(t *testing.T) {
				mw, err := idempotency.New(idempotency.Config{Store: store, Tenant: func(*http.Request) (string, bool) { return tt.tenant, true }})
				if err != nil {
					t.Fatal(err)
				}
				runs := 0
				h := wrap(t, mw, mode, "POST /v1/notes", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if _, ok := idempotency.Begin(w, r); !ok {
						return
					}
					runs++
					w.Header().Set("Content-Type", "application/octet-stream")
					w.WriteHeader(http.StatusCreated)
					_, _ = w.Write(tt.body)
				}))
				raw := t.Name()
				for attempt := range 2 {
					w, obs := post(h, raw, `{}`)
					if w.Code != http.StatusCreated || !bytes.Equal(w.Body.Bytes(), tt.body) {
						t.Fatalf("attempt %d = %d (%d bytes, outcome %s, err %.300s), want 201 with the %d-byte answer",
							attempt, w.Code, w.Body.Len(), obs.Outcome, obs.Err, len(tt.body))
					}
					if attempt == 1 && mode != idempotency.Atomic && w.Header().Get(idempotency.ReplayedHeader) != "true" {
						t.Errorf("attempt 1 was not a replay (handler ran %d times)", runs)
					}
				}
				key := idempotency.NewKey(tt.tenant, raw)
				if rec, err := store.Get(t.Context(), key); err != nil || rec.Status != idempotency.StatusCompleted || !bytes.Equal(rec.Response.Body, tt.body) {
					t.Fatalf("Get = %s (%d bytes), %v; want COMPLETED with the answer", rec.Status, len(rec.Response.Body), err)
				}
				if len(tt.body) > 1000 {
					chunks := chunkItems(t, client, table, key)
					if len(chunks) < 3 {
						t.Fatalf("%d chunk items, want 3 or more", len(chunks))
					}
					for _, c := range chunks {
						pk := c[dynamo.AttrPK].(*types.AttributeValueMemberS).Value
						if len(pk) > 2048-900 { // MaxTenantLength's documented margin
							t.Errorf("chunk partition key of %d bytes, want at most %d", len(pk), 2048-900)
						}
					}
					// A restore mark: the other suffix the store appends.
					id := strings.Repeat("f", 32) // a DynamoDB Streams event ID's length
					if err := store.Mark(t.Context(), key, id, time.Now().Add(time.Hour)); err != nil {
						t.Fatalf("Mark = %v", err)
					}
					if ok, err := store.Marked(t.Context(), key, id); err != nil || !ok {
						t.Fatalf("Marked = %v, %v; want true", ok, err)
					}
				}
			})
		}
	}
}
