package worker_test

import (
	"context"
	"maps"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/internal/lambdatest"
	"github.com/oncehq/once/internal/payments"
	"github.com/oncehq/once/internal/provider/simulator"
	"github.com/oncehq/once/internal/stream"
	"github.com/oncehq/once/internal/worker"
)

func TestNew(t *testing.T) {
	_, err := worker.New(worker.Config{})
	if err == nil {
		t.Fatal("New(Config{}) = nil error, want one naming the missing dependencies")
	}
	for _, name := range []string{"Charger", "Settler"} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("New(Config{}) error = %q, want it to name %s", err, name)
		}
	}
}

func TestChargeKey(t *testing.T) {
	id := "pay_abcdefghijklmnopqrstuvwx"
	if got, want := worker.ChargeKey("acme", id), "once:payment:acme:pay_abcdefghijklmnopqrstuvwx"; got != want {
		t.Errorf("ChargeKey(acme, %s) = %q, want %q", id, got, want)
	}
	if worker.ChargeKey("acme", id) == worker.ChargeKey("globex", id) {
		t.Errorf("ChargeKey gives two tenants' payment %s the same key", id)
	}
	// The longest tenant id (internal/auth) still makes a key the provider
	// accepts: 1-255 characters in 0x21-0x7E, not starting "id#".
	key := worker.ChargeKey(strings.Repeat("t", 64), id)
	if len(key) > simulator.MaxKeyLength || strings.HasPrefix(key, "id#") ||
		strings.IndexFunc(key, func(r rune) bool { return r < 0x21 || r > 0x7e }) >= 0 {
		t.Errorf("ChargeKey(64-character tenant) = %q, not a valid provider key", key)
	}
}

// TestPollerSettles runs the worker behind a Poller on the payments table,
// as the event source mapping does, until the payment settles.
func TestPollerSettles(t *testing.T) {
	t.Parallel()
	tests := []struct {
		source      string
		wantStatus  payments.Status
		wantFailure string
		wantCharges int
		wantMetric  string
		// wantLog is what the record's log line holds beyond its outcome
		// and status.
		wantLog map[string]any
	}{
		{simulator.TokenVisa, payments.StatusSucceeded, "", 1, worker.MetricCharged, map[string]any{"level": "INFO"}},
		{simulator.TokenDeclined, payments.StatusFailed, "card_declined", 1, worker.MetricFailed, map[string]any{"level": "INFO"}},
		// A token the API accepts and the provider does not know: settled
		// at once, with no charge, instead of failing the record forever.
		{"tok_mastercard", payments.StatusFailed, "provider_rejected", 0, worker.MetricFailed, map[string]any{
			"level": "WARN", "err": "provider: charge: status 400: invalid_request",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.source, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			run(t, e.pollerOptions(t, e.names.ByLogicalID["PaymentsTable"], e.worker.Handle))
			p := e.pay(t, tt.source)
			// The log line comes last, after the settle and the metric.
			lambdatest.WaitFor(t, 10*time.Second, "the payment's log line", func() bool {
				return len(e.recordLogs(t, p.ID)) > 0
			})

			want := p
			want.Status, want.FailureCode = tt.wantStatus, tt.wantFailure
			if tt.wantCharges > 0 {
				ch, err := e.provider.Lookup(t.Context(), worker.ChargeKey(p.Tenant, p.ID))
				if err != nil {
					t.Fatalf("provider Lookup: %v", err)
				}
				if ch.Amount != p.Amount || ch.Currency != p.Currency {
					t.Errorf("provider charge = %d %s, want %d %s", ch.Amount, ch.Currency, p.Amount, p.Currency)
				}
				want.ProviderChargeID = ch.ID
			}
			if tt.wantStatus == payments.StatusSucceeded {
				want.Refundable, want.Holds = p.Amount, map[string]int64{} // refundable in full
			}
			if diff := cmp.Diff(want, e.get(t, p)); diff != "" {
				t.Errorf("settled payment (-want +got):\n%s", diff)
			}
			if n := e.charges(t, p); n != tt.wantCharges {
				t.Errorf("charges under the payment's key = %d, want %d", n, tt.wantCharges)
			}
			if diff := cmp.Diff(map[string]int{tt.wantMetric: 1}, e.counts(t)); diff != "" {
				t.Errorf("metrics (-want +got):\n%s", diff)
			}
			logs := e.recordLogs(t, p.ID)
			if len(logs) != 1 {
				t.Fatalf("log lines for the payment = %v, want 1", logs)
			}
			wantLog := map[string]any{"tenant": "acme", "outcome": string(tt.wantStatus), "status": string(tt.wantStatus)}
			maps.Copy(wantLog, tt.wantLog)
			for k, v := range wantLog {
				if logs[0][k] != v {
					t.Errorf("log line %s = %v, want %v", k, logs[0][k], v)
				}
			}
			logText := e.logs.String()
			for _, secret := range []string{worker.ChargeKey(p.Tenant, p.ID), "tok_mastercard", "cus_42"} {
				if strings.Contains(logText, secret) {
					t.Errorf("the logs hold %q", secret)
				}
			}
		})
	}
}

// TestHandleRedelivery delivers one real stream record several times, in
// turn and at once: the provider charges once and the payment settles once.
func TestHandleRedelivery(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.pay(t, simulator.TokenVisa)
	q := e.pay(t, simulator.TokenVisa)
	recs := e.records(t, e.names.ByLogicalID["PaymentsTable"], 2)
	event := map[string]events.DynamoDBEvent{}
	for _, r := range recs {
		event[pkOf(r)] = events.DynamoDBEvent{Records: []events.DynamoDBEventRecord{r}}
	}

	t.Run("in turn", func(t *testing.T) {
		var chargeID string
		for i := range 3 {
			resp, err := e.worker.Handle(t.Context(), event[p.PK])
			if err != nil || len(resp.BatchItemFailures) != 0 {
				t.Fatalf("Handle() delivery %d = %+v, %v; want no failures", i+1, resp, err)
			}
			got := e.get(t, p)
			if i == 0 {
				chargeID = got.ProviderChargeID
			}
			if got.Status != payments.StatusSucceeded || got.ProviderChargeID != chargeID || chargeID == "" {
				t.Errorf("after delivery %d: status %s, charge %q; want succeeded, charge %q", i+1, got.Status, got.ProviderChargeID, chargeID)
			}
		}
		if n := e.charges(t, p); n != 1 {
			t.Errorf("charges = %d, want 1", n)
		}
		want := map[string]int{"INFO succeeded": 1, "INFO already_settled": 2}
		if diff := cmp.Diff(want, e.outcomes(t, p.ID)); diff != "" {
			t.Errorf("logged outcomes (-want +got):\n%s", diff)
		}
	})
	t.Run("at once", func(t *testing.T) {
		const deliveries = 8
		var wg sync.WaitGroup
		resps := make([]events.DynamoDBEventResponse, deliveries)
		errs := make([]error, deliveries)
		for i := range deliveries {
			wg.Go(func() { resps[i], errs[i] = e.worker.Handle(t.Context(), event[q.PK]) })
		}
		wg.Wait()
		for i := range deliveries {
			if errs[i] != nil || len(resps[i].BatchItemFailures) != 0 {
				t.Errorf("Handle() delivery %d = %+v, %v; want no failures", i+1, resps[i], errs[i])
			}
		}
		if got := e.get(t, q); got.Status != payments.StatusSucceeded || got.ProviderChargeID == "" {
			t.Errorf("payment = %s, charge %q; want succeeded with a charge", got.Status, got.ProviderChargeID)
		}
		if n := e.charges(t, q); n != 1 {
			t.Errorf("charges = %d, want 1", n)
		}
		want := map[string]int{"INFO succeeded": 1, "INFO already_settled": deliveries - 1}
		if diff := cmp.Diff(want, e.outcomes(t, q.ID)); diff != "" {
			t.Errorf("logged outcomes (-want +got):\n%s", diff)
		}
	})
	if diff := cmp.Diff(map[string]int{worker.MetricCharged: 2}, e.counts(t)); diff != "" {
		t.Errorf("metrics, one per payment (-want +got):\n%s", diff)
	}
}

// TestHandleProviderErrors checks that a charge the provider did not make,
// or whose outcome is unknown, fails the record and leaves the payment
// pending, and that the retry with the same key settles it correctly.
func TestHandleProviderErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tests := []struct {
		source string
		// wantCharges is the count after the failed delivery.
		wantCharges int
		// After the retry:
		wantRetryFails bool
		wantStatus     payments.Status
		wantOutcomes   map[string]int
	}{
		{
			source: simulator.TokenUnavailable, wantCharges: 0,
			wantRetryFails: true, wantStatus: payments.StatusPending,
			wantOutcomes: map[string]int{"WARN error": 2},
		},
		{
			// The simulator charges, then holds its answer past the
			// client's timeout: the retry gets the recorded charge.
			source: simulator.TokenTimeout, wantCharges: 1,
			wantRetryFails: false, wantStatus: payments.StatusSucceeded,
			wantOutcomes: map[string]int{"WARN error": 1, "INFO succeeded": 1},
		},
	}
	var pays []payments.Payment
	for _, tt := range tests {
		pays = append(pays, e.pay(t, tt.source))
	}
	recs := e.records(t, e.names.ByLogicalID["PaymentsTable"], len(tests))
	for i, tt := range tests {
		t.Run(tt.source, func(t *testing.T) {
			p, rec := pays[i], recs[i]
			if pkOf(rec) != p.PK {
				t.Fatalf("record %d is of %s, want %s", i, pkOf(rec), p.PK)
			}
			ev := events.DynamoDBEvent{Records: []events.DynamoDBEventRecord{rec}}
			resp, err := e.worker.Handle(t.Context(), ev)
			if diff := cmp.Diff([]string{rec.Change.SequenceNumber}, lambdatest.Failures(resp)); err != nil || diff != "" {
				t.Errorf("Handle() error = %v, batch item failures (-want +got):\n%s", err, diff)
			}
			if got := e.get(t, p); got.Status != payments.StatusPending {
				t.Errorf("after the failure: status %s, want pending", got.Status)
			}
			if n := e.charges(t, p); n != tt.wantCharges {
				t.Errorf("after the failure: charges = %d, want %d", n, tt.wantCharges)
			}

			resp, err = e.worker.Handle(t.Context(), ev)
			if err != nil || (len(resp.BatchItemFailures) != 0) != tt.wantRetryFails {
				t.Errorf("retry: Handle() = %+v, %v; want failures: %v", resp, err, tt.wantRetryFails)
			}
			if got := e.get(t, p); got.Status != tt.wantStatus {
				t.Errorf("after the retry: status %s, want %s", got.Status, tt.wantStatus)
			}
			if n := e.charges(t, p); n != tt.wantCharges {
				t.Errorf("after the retry: charges = %d, want %d", n, tt.wantCharges)
			}
			if diff := cmp.Diff(tt.wantOutcomes, e.outcomes(t, p.ID)); diff != "" {
				t.Errorf("logged outcomes (-want +got):\n%s", diff)
			}
		})
	}
	if diff := cmp.Diff(map[string]int{worker.MetricCharged: 1}, e.counts(t)); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}
}

// TestHandlePoisonInBatch checks stream.Process semantics: a record that
// does not decode fails with every later record, and the later ones are not
// applied out of order.
func TestHandlePoisonInBatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.pay(t, simulator.TokenVisa)
	poison := e.poison(t)
	c := e.pay(t, simulator.TokenVisa)
	recs := e.records(t, e.names.ByLogicalID["PaymentsTable"], 3)
	if got, want := []string{pkOf(recs[0]), pkOf(recs[1]), pkOf(recs[2])}, []string{a.PK, poison, c.PK}; !cmp.Equal(got, want) {
		t.Fatalf("records = %v, want %v", got, want)
	}

	resp, err := e.worker.Handle(t.Context(), events.DynamoDBEvent{Records: recs})
	if err != nil {
		t.Fatalf("Handle() error = %v", err)
	}
	want := []string{recs[1].Change.SequenceNumber, recs[2].Change.SequenceNumber}
	if diff := cmp.Diff(want, lambdatest.Failures(resp)); diff != "" {
		t.Errorf("batch item failures (-want +got):\n%s", diff)
	}
	if got := e.get(t, a); got.Status != payments.StatusSucceeded {
		t.Errorf("payment before the poison: %s, want succeeded", got.Status)
	}
	if got, n := e.get(t, c), e.charges(t, c); got.Status != payments.StatusPending || n != 0 {
		t.Errorf("payment after the poison: %s with %d charges, want pending with 0", got.Status, n)
	}
	var poisonLogs int
	for _, l := range e.logs.Lines(t) {
		if l["msg"] == "worker: record" && l["sequence_number"] == recs[1].Change.SequenceNumber {
			poisonLogs++
			if l["level"] != "ERROR" || l["outcome"] != "error" || l["err"] == nil {
				t.Errorf("poison record log line = %v, want an ERROR with outcome error and err", l)
			}
		}
	}
	if poisonLogs != 1 {
		t.Errorf("poison record log lines = %d, want 1", poisonLogs)
	}
}

// TestPollerDeadLettersPoison runs the worker behind a Poller configured as
// the template's mapping (bisect, bounded retries, on-failure destination):
// the poison record lands in the dead letter and the payments around it
// settle.
func TestPollerDeadLettersPoison(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	file := filepath.Join(t.TempDir(), "dlq-worker.jsonl")
	opts := e.pollerOptions(t, e.names.ByLogicalID["PaymentsTable"], e.worker.Handle)
	opts.BisectOnError = true
	opts.MaxRetryAttempts = 1
	opts.DeadLetterFile = file
	run(t, opts)

	a := e.pay(t, simulator.TokenVisa)
	poison := e.poison(t)
	c := e.pay(t, simulator.TokenVisa)
	lambdatest.WaitFor(t, 15*time.Second, "the payment after the poison to settle", func() bool {
		return len(e.recordLogs(t, c.ID)) > 0
	})

	for _, p := range []payments.Payment{a, c} {
		if got, n := e.get(t, p), e.charges(t, p); got.Status != payments.StatusSucceeded || n != 1 {
			t.Errorf("payment %s: %s with %d charges, want succeeded with 1", p.ID, got.Status, n)
		}
	}
	dead, err := stream.ReadDeadLetters(file)
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) != 1 || pkOf(dead[0].Record) != poison || dead[0].Reason != "batch item failure" || dead[0].Attempts != 2 {
		t.Errorf("dead letters = %+v, want the poison record %s after 2 attempts", dead, poison)
	}
	if diff := cmp.Diff(map[string]int{worker.MetricCharged: 2}, e.counts(t)); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}
}

// TestHandleIgnores feeds the worker real records that are not pending
// payments' INSERTs: none reaches the provider or changes anything.
func TestHandleIgnores(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	settled := e.pay(t, simulator.TokenVisa)
	settled.Status, settled.ProviderChargeID = payments.StatusSucceeded, "prch_1"
	e.put(t, e.names.ByLogicalID["PaymentsTable"], settled) // a MODIFY: the INSERT was pending
	p := e.pay(t, simulator.TokenVisa)
	if err := e.table.Settle(t.Context(), p.Tenant, p.ID, payments.StatusFailed, "", "card_declined"); err != nil {
		t.Fatal(err)
	}
	_, err := e.db.DeleteItem(t.Context(), &dynamodb.DeleteItemInput{
		TableName: aws.String(e.names.ByLogicalID["PaymentsTable"]),
		Key:       map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: p.PK}},
	})
	if err != nil {
		t.Fatal(err)
	}
	inserted := payments.New("acme", payments.Request{Amount: 1, Currency: "usd", Customer: "c", Source: "tok_visa"}, time.Now())
	inserted.Status = payments.StatusSucceeded
	e.put(t, e.names.ByLogicalID["PaymentsTable"], inserted) // an INSERT of a settled payment
	e.put(t, e.names.ByLogicalID["IdempotencyTable"], map[string]types.AttributeValue{
		"pk":     &types.AttributeValueMemberS{Value: "acme#0123abcd"},
		"tenant": &types.AttributeValueMemberS{Value: "acme"},
		"status": &types.AttributeValueMemberS{Value: "IN_PROGRESS"},
	})

	recs := e.records(t, e.names.ByLogicalID["PaymentsTable"], 6)
	other := e.records(t, e.names.ByLogicalID["IdempotencyTable"], 1)
	var names []string
	for _, r := range recs {
		names = append(names, r.EventName)
	}
	if diff := cmp.Diff([]string{"INSERT", "MODIFY", "INSERT", "MODIFY", "REMOVE", "INSERT"}, names); diff != "" {
		t.Fatalf("payments table records (-want +got):\n%s", diff)
	}
	byName := map[string]events.DynamoDBEventRecord{
		"MODIFY to settled":            recs[1],
		"MODIFY by Settle":             recs[3],
		"REMOVE":                       recs[4],
		"INSERT of a settled payment":  recs[5],
		"INSERT into another table":    other[0],
		"INSERT without a status":      withoutStatus(recs[0]),
		"INSERT with a numeric status": withStatus(recs[0], events.NewNumberAttribute("1")),
		"MODIFY to pending":            asModify(recs[0]),
	}
	before := e.requests.Load()
	for name, rec := range byName {
		t.Run(name, func(t *testing.T) {
			resp, err := e.worker.Handle(t.Context(), events.DynamoDBEvent{Records: []events.DynamoDBEventRecord{rec}})
			if err != nil || len(resp.BatchItemFailures) != 0 {
				t.Errorf("Handle(%s) = %+v, %v; want no failures", name, resp, err)
			}
		})
	}
	if n := e.requests.Load() - before; n != 0 {
		t.Errorf("requests to the provider = %d, want 0", n)
	}
	if got := e.get(t, settled); got.Status != payments.StatusSucceeded || got.ProviderChargeID != "prch_1" {
		t.Errorf("settled payment = %s, charge %q; want it unchanged", got.Status, got.ProviderChargeID)
	}
	if got := e.counts(t); len(got) != 0 {
		t.Errorf("metrics = %v, want none", got)
	}
	var ignored int
	for _, l := range e.logs.Lines(t) {
		if l["msg"] == "worker: record" {
			if l["outcome"] != "ignored" || l["level"] != "DEBUG" {
				t.Errorf("log line = %v, want a DEBUG line with outcome ignored", l)
			}
			ignored++
		}
	}
	if ignored != len(byName) {
		t.Errorf("log lines = %d, want %d (one per record)", ignored, len(byName))
	}
}

func withoutStatus(rec events.DynamoDBEventRecord) events.DynamoDBEventRecord {
	img := map[string]events.DynamoDBAttributeValue{}
	for k, v := range rec.Change.NewImage {
		if k != "status" {
			img[k] = v
		}
	}
	rec.Change.NewImage = img
	return rec
}

// asModify returns ins, the INSERT of a pending payment, as a MODIFY that
// leaves it pending: the filter passes only INSERTs.
func asModify(ins events.DynamoDBEventRecord) events.DynamoDBEventRecord {
	ins.EventName = "MODIFY"
	ins.Change.OldImage = ins.Change.NewImage
	return ins
}

func withStatus(rec events.DynamoDBEventRecord, status events.DynamoDBAttributeValue) events.DynamoDBEventRecord {
	rec = withoutStatus(rec)
	rec.Change.NewImage["status"] = status
	return rec
}

// TestHandleStopsWhenCancelled checks that a batch handed over with no time
// left is reported failed as a whole, and nothing is charged.
func TestHandleStopsWhenCancelled(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.pay(t, simulator.TokenVisa)
	recs := e.records(t, e.names.ByLogicalID["PaymentsTable"], 1)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	resp, err := e.worker.Handle(ctx, events.DynamoDBEvent{Records: recs})
	if diff := cmp.Diff([]string{recs[0].Change.SequenceNumber}, lambdatest.Failures(resp)); err != nil || diff != "" {
		t.Errorf("Handle(cancelled) error = %v, batch item failures (-want +got):\n%s", err, diff)
	}
	if got, n := e.get(t, p), e.charges(t, p); got.Status != payments.StatusPending || n != 0 {
		t.Errorf("payment = %s with %d charges, want pending with 0", got.Status, n)
	}
}
