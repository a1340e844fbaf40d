package operator_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	dynamodbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/operator"
	"github.com/oncehq/once/internal/payments"
	"github.com/oncehq/once/internal/refunds"
)

// meanwhile is a DynamoDB client that runs fn once, just before its first
// GetItem of the idempotency table: what another writer does between the
// listing's Scan and its reads of a hold's record and hold.
type meanwhile struct {
	*dynamodb.Client
	table string
	once  sync.Once
	fn    func()
}

func (m *meanwhile) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	if aws.ToString(in.TableName) == m.table {
		m.once.Do(m.fn)
	}
	return m.Client.GetItem(ctx, in, opts...)
}

// staleHoldsMeanwhile runs oncectl holds -stale -json -all with fn run
// between its Scan and its first read of a record.
func (e *env) staleHoldsMeanwhile(t *testing.T, fn func()) ([]holdLine, string) {
	t.Helper()
	cfg, err := config.FromEnv(func(k string) string { return e.vars[k] })
	if err != nil {
		t.Fatal(err)
	}
	db := &meanwhile{Client: e.db, table: e.names.ByLogicalID["IdempotencyTable"], fn: fn}
	var out, errOut strings.Builder
	tool := operator.New(cfg, db, e.sqs, &out, &errOut)
	if code := tool.Run(t.Context(), []string{"holds", "-stale", "-json", "-all"}); code != 0 {
		t.Fatalf("holds -stale = exit %d: %s", code, errOut.String())
	}
	return decodeLines(t, out.String()), errOut.String()
}

// TestStaleHoldsSettledMeanwhile: a hold settled between the listing's Scan
// and its read of the hold's record (released, completed, or its amount
// changed) is not listed: the listing re-reads the hold after the record.
func TestStaleHoldsSettledMeanwhile(t *testing.T) {
	tests := []struct {
		name  string
		hold  heldBy
		other func(t *testing.T, e *env, s stored)
	}{
		{
			// The reconciler finds no refund: it releases the key, giving
			// the hold back, and deletes the record.
			name: "released",
			hold: heldBy{pay: "p", tenant: "acme", raw: "declined", amount: 700, status: idempotency.StatusUnknown, ago: time.Minute, expires: time.Hour},
			other: func(t *testing.T, e *env, s stored) {
				rec, err := e.store.Get(t.Context(), s.key)
				if err != nil {
					t.Fatal(err)
				}
				tables := refunds.Tables{Payments: e.names.ByLogicalID["PaymentsTable"], Refunds: e.names.ByLogicalID["RefundsTable"]}
				if err := e.store.Release(t.Context(), s.key, rec.LeaseToken, []idempotency.Effect{tables.Release(s.key, s.p.ID)}); err != nil {
					t.Fatal(err)
				}
			},
		},
		{
			// The refund's request completes: the hold moves to
			// amount_refunded, the record is COMPLETED (201).
			name: "completed",
			hold: heldBy{pay: "p", tenant: "acme", raw: "done", amount: 700, status: idempotency.StatusInProgress, ago: time.Second, expires: time.Minute},
			other: func(t *testing.T, e *env, s stored) {
				e.updateHold(t, s, "SET amount_refunded = :a REMOVE #h.#k", 700)
				rec := refundRecord(s.key, idempotency.StatusCompleted, 0, 24*time.Hour)
				rec.Response.Status, rec.Response.Body = 201, []byte(`{"id":"re_x"}`)
				e.put(t, rec)
			},
		},
		{
			name: "amount changed",
			hold: heldBy{pay: "p", tenant: "acme", raw: "changed", amount: 700, status: idempotency.StatusUnknown, ago: 2 * time.Hour, expires: time.Hour},
			other: func(t *testing.T, e *env, s stored) {
				e.updateHold(t, s, "SET #h.#k = :a", 500)
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			s := e.makeHolds(t, []heldBy{tt.hold})[tt.hold.raw]
			lines, errOut := e.staleHoldsMeanwhile(t, func() { tt.other(t, e, s) })
			if len(lines) != 0 {
				t.Errorf("holds -stale -all listed %+v, want nothing: the hold was settled between the Scan and the record's read", lines)
			}
			if !strings.Contains(errOut, "1 hold(s) settled while the listing read them") || !strings.Contains(errOut, "0 hold(s) listed") {
				t.Errorf("stderr %q, want the hold settled meanwhile counted, and none listed", errOut)
			}
		})
	}
}

// updateHold runs update (on #h.#k, s's hold, with :a = a) on s's payment.
func (e *env) updateHold(t *testing.T, s stored, update string, a int64) {
	t.Helper()
	if _, err := e.db.UpdateItem(t.Context(), &dynamodb.UpdateItemInput{
		TableName:                 aws.String(e.names.ByLogicalID["PaymentsTable"]),
		Key:                       map[string]dynamodbtypes.AttributeValue{payments.KeyAttr: &dynamodbtypes.AttributeValueMemberS{Value: s.p.PK}},
		UpdateExpression:          aws.String(update),
		ExpressionAttributeNames:  map[string]string{"#h": payments.AttrHolds, "#k": s.key.Hash},
		ExpressionAttributeValues: map[string]dynamodbtypes.AttributeValue{":a": &dynamodbtypes.AttributeValueMemberN{Value: strconv.FormatInt(a, 10)}},
	}); err != nil {
		t.Fatal(err)
	}
}
