package operator_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
// of the idempotency table or TransactGetItems (before every one with
// always): what another writer does between a command's read of a payment
// and its reads of its holds' records.
type meanwhile struct {
	*dynamodb.Client
	table  string
	once   sync.Once
	always bool
	fn     func()
	// elsewhere, when set, runs before every GetItem of another table
	// (the payments table's).
	elsewhere func()
}

func (m *meanwhile) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	switch {
	case aws.ToString(in.TableName) == m.table:
		m.run()
	case m.elsewhere != nil:
		m.elsewhere()
	}
	return m.Client.GetItem(ctx, in, opts...)
}

// TransactGetItems runs fn first too: a TransactGetItems reads records.
func (m *meanwhile) TransactGetItems(ctx context.Context, in *dynamodb.TransactGetItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactGetItemsOutput, error) {
	m.run()
	return m.Client.TransactGetItems(ctx, in, opts...)
}

func (m *meanwhile) run() {
	if m.always {
		m.fn()
	} else {
		m.once.Do(m.fn)
	}
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

// TestHoldsSettledMeanwhile: oncectl holds PAYMENT shows the payment and
// its holds' records as one snapshot, whatever another writer does after
// its first read of the payment: a hold released, completed, changed, or
// released and reserved again under the same key (which restores the
// payment exactly, so that reading the payment twice around the records
// cannot tell); a refund reserved meanwhile is read again with its key;
// one reserved at every attempt is an error after 3, not a view; and a
// payment with more holds than one snapshot reads is shown too.
func TestHoldsSettledMeanwhile(t *testing.T) {
	type shown struct {
		KeyHash      string `json:"key_hash"`
		Amount       int64  `json:"amount"`
		RecordStatus string `json:"record_status"`
		NoRecord     bool   `json:"no_record"`
	}
	type view struct {
		AmountRefunded int64   `json:"amount_refunded"`
		Refundable     int64   `json:"refundable"`
		Holds          []shown `json:"holds"`
	}
	holds := func(t *testing.T, e *env, m *meanwhile, pk string) view {
		t.Helper()
		code, out, errOut := e.runMeanwhile(t, m, "holds", pk)
		if code != 0 {
			t.Fatalf("holds = exit %d: %s", code, errOut)
		}
		var got view
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("holds printed %q: %v", out, err)
		}
		return got
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
			got := holds(t, e, &meanwhile{fn: func() { tt.other(t, e, s) }}, s.p.PK)
			switch {
			case tt.wantAmount == 0 && len(got.Holds) != 0:
				t.Errorf("holds shows %+v, want no hold: it was settled between the payment's read and the record's", got.Holds)
			case tt.wantAmount != 0 && (len(got.Holds) != 1 || got.Holds[0].Amount != tt.wantAmount || got.Holds[0].RecordStatus != string(tt.wantStatus) || got.Holds[0].NoRecord):
				t.Errorf("holds shows %+v, want one hold of %d, its record %s", got.Holds, tt.wantAmount, tt.wantStatus)
			}
			if got.AmountRefunded != tt.wantRefunded {
				t.Errorf("amount_refunded = %d, want %d, as the payment is after the settlement", got.AmountRefunded, tt.wantRefunded)
			}
		})
	}

	t.Run("released and reserved again", func(t *testing.T) {
		// The key is released just before its record is read, and
		// reserved again, holding the same amount, just before the
		// payment is read again: the payment ends as it began, and only
		// the record tells. A hold shown beside no record would never
		// have existed. (The snapshot reads the payment with the
		// records, so the second stage never runs against it: this
		// guards against reading them apart again, which showed the
		// hold with no record.)
		e := newEnv(t)
		h := heldBy{pay: "p", tenant: "acme", raw: "again", amount: 700, status: idempotency.StatusUnknown, ago: time.Minute, expires: time.Hour}
		s := e.makeHolds(t, []heldBy{h})[h.raw]
		released, again := false, false
		m := &meanwhile{
			fn: func() { releaseHold(t, e, s); released = true },
			elsewhere: func() {
				if released && !again {
					again = true
					e.updateHold(t, s, "SET #h.#k = :a, refundable = refundable - :a", 700)
					e.put(t, refundRecord(s.key, idempotency.StatusInProgress, 0, time.Minute))
				}
			},
		}
		got := holds(t, e, m, s.p.PK)
		for _, h := range got.Holds {
			if h.NoRecord || h.RecordStatus != string(idempotency.StatusInProgress) {
				t.Errorf("holds shows %+v: a hold beside a record it never went with (want none, or the new reservation's)", h)
			}
		}
	})

	// reserve gives s's payment a new hold of 100, with its record, named
	// name.
	reserve := func(t *testing.T, e *env, s stored, name string) {
		k := idempotency.NewKey(s.tenant, rawKey(name))
		e.updateHold(t, stored{heldBy: s.heldBy, p: s.p, key: k}, "SET #h.#k = :a, refundable = refundable - :a", 100)
		e.put(t, refundRecord(k, idempotency.StatusInProgress, 0, time.Minute))
	}

	t.Run("reserved meanwhile", func(t *testing.T) {
		e := newEnv(t)
		h := heldBy{pay: "p", tenant: "acme", raw: "first", amount: 700, status: idempotency.StatusUnknown, ago: time.Minute, expires: time.Hour}
		s := e.makeHolds(t, []heldBy{h})[h.raw]
		got := holds(t, e, &meanwhile{fn: func() { reserve(t, e, s, "second") }}, s.p.PK)
		if len(got.Holds) != 2 || got.Holds[0].RecordStatus == "" || got.Holds[1].RecordStatus == "" {
			t.Errorf("holds shows %+v, want both holds, each with its record", got.Holds)
		}
	})

	t.Run("reserved at every attempt", func(t *testing.T) {
		e := newEnv(t)
		h := heldBy{pay: "p", tenant: "acme", raw: "busy", amount: 700, status: idempotency.StatusUnknown, ago: time.Minute, expires: time.Hour}
		s := e.makeHolds(t, []heldBy{h})[h.raw]
		n := 0
		m := &meanwhile{always: true, fn: func() { n++; reserve(t, e, s, fmt.Sprintf("new-%d", n)) }}
		code, out, errOut := e.runMeanwhile(t, m, "holds", s.p.PK)
		if code == 0 || out != "" || !strings.Contains(errOut, "changed while they were read") {
			t.Errorf("holds = exit %d, stdout %q, stderr %q; want a failure saying the holds kept changing, no view", code, out, errOut)
		}
		if n != 3 {
			t.Errorf("holds read the records %d times, want 3 (bounded)", n)
		}
	})

	// 99 holds and their payment are one TransactGetItems of 100 items,
	// DynamoDB's most; 100 holds are read apart.
	for _, n := range []int{99, 100} {
		t.Run(fmt.Sprintf("%d holds", n), func(t *testing.T) {
			e := newEnv(t)
			var many []heldBy
			for i := range n {
				many = append(many, heldBy{pay: "p", tenant: "acme", raw: fmt.Sprintf("h%03d", i), amount: 10, status: idempotency.StatusUnknown, ago: time.Minute, expires: time.Hour})
			}
			made := e.makeHolds(t, many)
			s := made["h000"]
			got := holds(t, e, &meanwhile{fn: func() { releaseHold(t, e, s) }}, s.p.PK)
			if len(got.Holds) != n-1 {
				t.Errorf("holds shows %d holds, want %d: the %d made, less the one released between the reads", len(got.Holds), n-1, n)
			}
			for _, h := range got.Holds {
				if h.KeyHash == s.key.Hash || h.RecordStatus != string(idempotency.StatusUnknown) {
					t.Errorf("holds shows %+v, want only the holds left, each with its UNKNOWN record", h)
				}
			}
		})
	}
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

// TestConflicted: only a transaction cancelled by writes in flight on its
// items is read again; one cancelled for another reason (throttled, a
// validation error) is its own error.
func TestConflicted(t *testing.T) {
	reasons := func(codes ...string) error {
		var rs []dynamodbtypes.CancellationReason
		for _, c := range codes {
			rs = append(rs, dynamodbtypes.CancellationReason{Code: aws.String(c)})
		}
		return fmt.Errorf("wrapped: %w", &dynamodbtypes.TransactionCanceledException{CancellationReasons: rs})
	}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"other error", errors.New("boom"), false},
		{"no reasons", reasons(), false},
		{"conflict", reasons("None", "TransactionConflict", "None"), true},
		{"all conflict", reasons("TransactionConflict", "TransactionConflict"), true},
		{"only none", reasons("None", "None"), false},
		{"throttled", reasons("None", "ThrottlingError"), false},
		{"conflict and throttled", reasons("TransactionConflict", "ProvisionedThroughputExceeded"), false},
		{"validation", reasons("ValidationError"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := operator.Conflicted(tt.err); got != tt.want {
				t.Errorf("Conflicted(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}
