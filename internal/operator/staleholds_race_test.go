package operator_test

import (
	"context"
	"encoding/json"
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

// meanwhile is a DynamoDB client that runs fn just before its first GetItem
// of the idempotency table (before every one with always): what another
// writer does between a command's read of a payment and its reads of its
// holds' records, and its read of the payment again.
type meanwhile struct {
	*dynamodb.Client
	table  string
	once   sync.Once
	always bool
	fn     func()
}

func (m *meanwhile) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	if aws.ToString(in.TableName) == m.table {
		if m.always {
			m.fn()
		} else {
			m.once.Do(m.fn)
		}
	}
	return m.Client.GetItem(ctx, in, opts...)
}

// staleHoldsMeanwhile runs oncectl holds -stale -json -all with fn run
// between its Scan and its first read of a record.
func (e *env) staleHoldsMeanwhile(t *testing.T, fn func()) ([]holdLine, string) {
	t.Helper()
	code, out, errOut := e.runMeanwhile(t, &meanwhile{fn: fn}, "holds", "-stale", "-json", "-all")
	if code != 0 {
		t.Fatalf("holds -stale = exit %d: %s", code, errOut)
	}
	return decodeLines(t, out), errOut
}

// runMeanwhile runs oncectl args through m, a client whose fn another
// writer runs between the command's reads.
func (e *env) runMeanwhile(t *testing.T, m *meanwhile, args ...string) (int, string, string) {
	t.Helper()
	cfg, err := config.FromEnv(func(k string) string { return e.vars[k] })
	if err != nil {
		t.Fatal(err)
	}
	m.Client, m.table = e.db, e.names.ByLogicalID["IdempotencyTable"]
	var out, errOut strings.Builder
	tool := operator.New(cfg, m, e.sqs, &out, &errOut)
	code := tool.Run(t.Context(), args)
	return code, out.String(), errOut.String()
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
			name:  "released",
			hold:  heldBy{pay: "p", tenant: "acme", raw: "declined", amount: 700, status: idempotency.StatusUnknown, ago: time.Minute, expires: time.Hour},
			other: releaseHold,
		},
		{
			// The refund's request completes: the hold moves to
			// amount_refunded, the record is COMPLETED (201).
			name:  "completed",
			hold:  heldBy{pay: "p", tenant: "acme", raw: "done", amount: 700, status: idempotency.StatusInProgress, ago: time.Second, expires: time.Minute},
			other: completeHold,
		},
		{
			name:  "amount changed",
			hold:  heldBy{pay: "p", tenant: "acme", raw: "changed", amount: 700, status: idempotency.StatusUnknown, ago: 2 * time.Hour, expires: time.Hour},
			other: changeHold,
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

// TestHoldsSettledMeanwhile: oncectl holds PAYMENT shows the payment as it
// is after a hold settled between its read of the payment and its read of
// the hold's record (released, completed, or its amount changed), never the
// hold beside the settled record: it reads the payment again after the
// records. A payment whose holds change at every attempt is an error, not
// a view.
func TestHoldsSettledMeanwhile(t *testing.T) {
	type view struct {
		AmountRefunded int64 `json:"amount_refunded"`
		Refundable     int64 `json:"refundable"`
		Holds          []struct {
			KeyHash      string `json:"key_hash"`
			Amount       int64  `json:"amount"`
			RecordStatus string `json:"record_status"`
		} `json:"holds"`
	}
	tests := []struct {
		name  string
		hold  heldBy
		other func(t *testing.T, e *env, s stored)
		// want: the hold's amount and its record's status shown, none
		// when 0; the payment's amount_refunded.
		wantAmount   int64
		wantStatus   idempotency.Status
		wantRefunded int64
	}{
		{
			name:  "released",
			hold:  heldBy{pay: "p", tenant: "acme", raw: "declined", amount: 700, status: idempotency.StatusUnknown, ago: time.Minute, expires: time.Hour},
			other: releaseHold,
		},
		{
			name:         "completed",
			hold:         heldBy{pay: "p", tenant: "acme", raw: "done", amount: 700, status: idempotency.StatusInProgress, ago: time.Second, expires: time.Minute},
			other:        completeHold,
			wantRefunded: 700,
		},
		{
			name:       "amount changed",
			hold:       heldBy{pay: "p", tenant: "acme", raw: "changed", amount: 700, status: idempotency.StatusUnknown, ago: 2 * time.Hour, expires: time.Hour},
			other:      changeHold,
			wantAmount: 500,
			wantStatus: idempotency.StatusUnknown,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			s := e.makeHolds(t, []heldBy{tt.hold})[tt.hold.raw]
			code, out, errOut := e.runMeanwhile(t, &meanwhile{fn: func() { tt.other(t, e, s) }}, "holds", s.p.PK)
			if code != 0 {
				t.Fatalf("holds = exit %d: %s", code, errOut)
			}
			var got view
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatalf("holds printed %q: %v", out, err)
			}
			switch {
			case tt.wantAmount == 0 && len(got.Holds) != 0:
				t.Errorf("holds shows %+v, want no hold: it was settled between the payment's read and the record's", got.Holds)
			case tt.wantAmount != 0 && (len(got.Holds) != 1 || got.Holds[0].Amount != tt.wantAmount || got.Holds[0].RecordStatus != string(tt.wantStatus)):
				t.Errorf("holds shows %+v, want one hold of %d, its record %s", got.Holds, tt.wantAmount, tt.wantStatus)
			}
			if got.AmountRefunded != tt.wantRefunded {
				t.Errorf("amount_refunded = %d, want %d, as the payment is after the settlement", got.AmountRefunded, tt.wantRefunded)
			}
		})
	}

	t.Run("changing at every attempt", func(t *testing.T) {
		e := newEnv(t)
		h := heldBy{pay: "p", tenant: "acme", raw: "busy", amount: 700, status: idempotency.StatusUnknown, ago: time.Minute, expires: time.Hour}
		s := e.makeHolds(t, []heldBy{h})[h.raw]
		amount := int64(700)
		m := &meanwhile{always: true, fn: func() { amount--; e.updateHold(t, s, "SET #h.#k = :a", amount) }}
		code, out, errOut := e.runMeanwhile(t, m, "holds", s.p.PK)
		if code == 0 || out != "" || !strings.Contains(errOut, "changed while they were read") {
			t.Errorf("holds = exit %d, stdout %q, stderr %q; want a failure saying the holds kept changing, no view", code, out, errOut)
		}
		if reads := 700 - amount; reads != 3 {
			t.Errorf("holds read the records %d times, want 3 (bounded)", reads)
		}
	})
}

// releaseHold is the reconciler finding no refund for s's key meanwhile:
// it releases the key, giving the hold back, and deletes the record.
func releaseHold(t *testing.T, e *env, s stored) {
	rec, err := e.store.Get(t.Context(), s.key)
	if err != nil {
		t.Fatal(err)
	}
	tables := refunds.Tables{Payments: e.names.ByLogicalID["PaymentsTable"], Refunds: e.names.ByLogicalID["RefundsTable"]}
	if err := e.store.Release(t.Context(), s.key, rec.LeaseToken, []idempotency.Effect{tables.Release(s.key, s.p.ID)}); err != nil {
		t.Fatal(err)
	}
}

// completeHold is s's refund request completing meanwhile: its hold of
// 700 moves to amount_refunded, its record is COMPLETED (201).
func completeHold(t *testing.T, e *env, s stored) {
	e.updateHold(t, s, "SET amount_refunded = :a REMOVE #h.#k", 700)
	rec := refundRecord(s.key, idempotency.StatusCompleted, 0, 24*time.Hour)
	rec.Response.Status, rec.Response.Body = 201, []byte(`{"id":"re_x"}`)
	e.put(t, rec)
}

// changeHold is s's hold changing to 500 meanwhile.
func changeHold(t *testing.T, e *env, s stored) {
	e.updateHold(t, s, "SET #h.#k = :a", 500)
}
