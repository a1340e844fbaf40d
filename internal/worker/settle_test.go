package worker_test

import (
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/internal/payments"
	"github.com/oncehq/once/internal/provider/simulator"
	"github.com/oncehq/once/internal/sqstest"
	"github.com/oncehq/once/internal/worker"
)

// failingCalls is an HTTP client for the DynamoDB SDK in front of DynamoDB
// Local that, while down is set, fails every call of one operation (op:
// the payments table's UpdateItem is the settle, its GetItem the read of a
// payment) before it is sent, as a connection reset would; it counts the
// calls failed so and those DynamoDB answered 200.
type failingCalls struct {
	op   string
	next interface {
		Do(*http.Request) (*http.Response, error)
	}
	down             atomic.Bool
	failed, answered atomic.Int64
}

func (s *failingCalls) Do(r *http.Request) (*http.Response, error) {
	match := r.Header.Get("X-Amz-Target") == "DynamoDB_20120810."+s.op
	if match && s.down.Load() {
		s.failed.Add(1)
		return nil, errors.New("injected: connection reset during " + s.op)
	}
	resp, err := s.next.Do(r)
	if match && err == nil && resp.StatusCode == http.StatusOK {
		s.answered.Add(1)
	}
	return resp, err
}

// settlesThrough returns a payments table on e's whose settles go through
// a new failingCalls, and that failingCalls (answered: settles written).
func (e *retryEnv) settlesThrough(t *testing.T) (*payments.Table, *failingCalls) {
	t.Helper()
	return e.failingThrough(t, "UpdateItem")
}

// readsThrough returns a payments table on e's whose reads of a payment go
// through a new failingCalls, and that failingCalls.
func (e *retryEnv) readsThrough(t *testing.T) (*payments.Table, *failingCalls) {
	t.Helper()
	return e.failingThrough(t, "GetItem")
}

func (e *retryEnv) failingThrough(t *testing.T, op string) (*payments.Table, *failingCalls) {
	t.Helper()
	s := &failingCalls{op: op}
	db := dynamodb.New(e.db.Options(), func(o *dynamodb.Options) {
		s.next = o.HTTPClient
		o.HTTPClient = s
		o.RetryMaxAttempts = 1
	})
	return payments.NewTable(db, e.names.ByLogicalID["PaymentsTable"]), s
}

// TestGivingUpSettleFailureEndsAtTheHorizon: a settle that cannot be
// written after a successful look-up is sent back only before the look-up
// horizon, as a failed look-up is: at the horizon it fails the message,
// which in AWS goes on to the dead-letter queue (alarmed), the payment
// still pending; before it, it is sent back with one more look-up counted.
// Each failed settle counts worker_settle_failed once, sent back or failed,
// and no worker_lookup_failed: the look-up succeeded.
func TestGivingUpSettleFailureEndsAtTheHorizon(t *testing.T) {
	t.Parallel()
	e := newRetryEnv(t)
	table, settles := e.settlesThrough(t)
	settles.down.Store(true)
	w := e.worker_(t, sqstest.Sender(t, e.sqs, e.url), func(c *worker.Config) { c.Settler = table })
	for _, tc := range []struct {
		name       string
		after      time.Duration // the clock, after the first look-up was due
		wantFailed bool
	}{
		{name: "before the horizon", after: time.Hour},
		{name: "the horizon reached", after: worker.DefaultLookUpHorizon, wantFailed: true},
	} {
		p := e.pay(t, simulator.TokenVisa)
		e.charge(t, p)
		e.now = p.Created.Add(retryWindow + providerTimeout + tc.after)
		body := `{"tenant":"` + p.Tenant + `","payment":"` + p.ID + `","attempt":9,"lookups":1}`
		before := e.counts(t)
		resp, err := w.HandleRetries(t.Context(), events.SQSEvent{Records: []events.SQSMessage{{MessageId: "m", Body: body}}})
		var want []events.SQSBatchItemFailure
		if tc.wantFailed {
			want = []events.SQSBatchItemFailure{{ItemIdentifier: "m"}}
		}
		if diff := cmp.Diff(want, resp.BatchItemFailures); err != nil || diff != "" {
			t.Errorf("%s: HandleRetries() error %v, batch item failures (-want +got):\n%s", tc.name, err, diff)
		}
		if got := e.get(t, p); got.Status != payments.StatusPending {
			t.Errorf("%s: payment = %s, want pending", tc.name, got.Status)
		}
		var wantSent []retryMessage
		wantCounts := map[string]int{worker.MetricSettleFailed: 1}
		if !tc.wantFailed {
			wantSent = []retryMessage{{Tenant: p.Tenant, Payment: p.ID, Attempt: 9, LookUps: 2}}
			wantCounts[worker.MetricRetried] = 1
		}
		if diff := cmp.Diff(wantSent, e.sent(t, 5*time.Second)); diff != "" {
			t.Errorf("%s: sent back (-want +got):\n%s", tc.name, diff)
		}
		if diff := cmp.Diff(wantCounts, e.countsSince(t, before)); diff != "" {
			t.Errorf("%s: metrics counted (-want +got):\n%s", tc.name, diff)
		}
	}
	if n := settles.answered.Load(); n != 0 || settles.failed.Load() != 2 {
		t.Errorf("settles written = %d, failed = %d; want 0 and 2", n, settles.failed.Load())
	}
}

// TestStreamCountsFailedSettles: the payments table refuses the settles
// (UpdateItem) while the stream worker charges three payments: one the
// provider charges, one it answers 503 (nothing charged), one whose answer
// is lost (maybe charged). Each goes to the retry queue, and only the
// settle that failed counts worker_settle_failed: a provider failure is
// not a settle failure, even one that may have charged. The retrier then
// retries within the window, each retry that charges and cannot settle
// counting worker_settle_failed once, until the table is back and the
// payment settles, charged once.
func TestStreamCountsFailedSettles(t *testing.T) {
	t.Parallel()
	e := newRetryEnv(t)
	table, settles := e.settlesThrough(t)
	settles.down.Store(true)
	w := e.worker_(t, sqstest.Sender(t, e.sqs, e.url), func(c *worker.Config) { c.Settler = table })
	charged := e.pay(t, simulator.TokenVisa)
	e.pay(t, simulator.TokenUnavailable)
	e.pay(t, simulator.TokenTimeout)
	recs := e.records(t, e.names.ByLogicalID["PaymentsTable"], 3)
	resp, err := w.Handle(t.Context(), events.DynamoDBEvent{Records: recs})
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("Handle() = %+v, %v; want no failures", resp, err)
	}
	if n := settles.failed.Load(); n != 1 {
		t.Fatalf("settles failed = %d, want 1 (the charged payment's)", n)
	}
	if diff := cmp.Diff(map[string]int{worker.MetricSettleFailed: 1, worker.MetricRetried: 3}, e.counts(t)); diff != "" {
		t.Errorf("metrics after the stream (-want +got):\n%s", diff)
	}

	// The retrier, within the window: only the charged payment reaches
	// its settle (the others meet the provider again); its message is
	// kept to itself so that the other two do not run the test long.
	var msgs []retryMessage
	for len(msgs) < 3 {
		more := e.sent(t, 3*time.Second)
		if len(more) == 0 {
			break
		}
		msgs = append(msgs, more...)
	}
	var m retryMessage
	for _, got := range msgs {
		if got.Payment == charged.ID {
			m = got
		}
	}
	if m.Payment == "" || m.Unknown.IsZero() {
		t.Fatalf("retries sent = %+v, want the charged payment's, maybe charged", msgs)
	}
	e.retryNow(t, w, charged, retryMessage{Attempt: m.Attempt, Unknown: m.Unknown})
	failed, _ := e.drain(t, w, 30*time.Second, func() bool { return settles.failed.Load() >= 3 })
	if failed != 0 {
		t.Errorf("%d messages failed during the outage, want none", failed)
	}
	counts := e.counts(t)
	if got, want := counts[worker.MetricSettleFailed], int(settles.failed.Load()); got != want {
		t.Errorf("%s = %d, want %d: one per failed settle", worker.MetricSettleFailed, got, want)
	}
	if counts[worker.MetricLookUpFailed]+counts[worker.MetricReadFailed] != 0 {
		t.Errorf("metrics = %v, want no failed look-up or read", counts)
	}
	settles.down.Store(false)
	if f, _ := e.drain(t, w, 30*time.Second, func() bool { return e.get(t, charged).Status != payments.StatusPending }); f != 0 {
		t.Errorf("%d messages failed after the outage, want none", f)
	}
	if got := e.get(t, charged); got.Status != payments.StatusSucceeded {
		t.Errorf("payment = %s, want succeeded", got.Status)
	}
	if n := e.charges(t, charged); n != 1 {
		t.Errorf("provider charges = %d, want 1", n)
	}
	after := e.counts(t)
	if after[worker.MetricSettleFailed] != int(settles.failed.Load()) || after[worker.MetricCharged] != 1 {
		t.Errorf("metrics = %v after the outage, want %s = %d (settles failed) and one charged", after, worker.MetricSettleFailed, settles.failed.Load())
	}
}

// TestRetryCountsFailedSettles: within the payment's retry window, the
// retrier's attempt meets a payments table that refuses the settle.
// An attempt the provider charged, or declined, has a settle to write:
// it fails, the payment is sent back as an attempt that may have charged,
// and worker_settle_failed counts once. An attempt the provider answered
// 503, or whose answer was lost, never reaches the settle: it counts
// worker_retried only.
func TestRetryCountsFailedSettles(t *testing.T) {
	t.Parallel()
	e := newRetryEnv(t)
	table, settles := e.settlesThrough(t)
	settles.down.Store(true)
	w := e.worker_(t, sqstest.Sender(t, e.sqs, e.url), func(c *worker.Config) { c.Settler = table })
	for _, tc := range []struct {
		name       string
		source     string
		wantSettle bool // a settle was tried, and failed
	}{
		{"charged", simulator.TokenVisa, true},
		{"declined", simulator.TokenDeclined, true},
		{"503, nothing charged", simulator.TokenUnavailable, false},
		{"the answer lost", simulator.TokenTimeout, false},
	} {
		p := e.pay(t, tc.source)
		e.now = p.Created.Add(time.Minute)
		before, settlesBefore := e.counts(t), settles.failed.Load()
		e.retryNow(t, w, p, retryMessage{Attempt: 2})
		if got := e.get(t, p); got.Status != payments.StatusPending {
			t.Errorf("%s: payment = %s, want pending", tc.name, got.Status)
		}
		wantCounts, wantFailed := map[string]int{worker.MetricRetried: 1}, int64(0)
		if tc.wantSettle {
			wantCounts[worker.MetricSettleFailed] = 1
			wantFailed = 1
		}
		if n := settles.failed.Load() - settlesBefore; n != wantFailed {
			t.Errorf("%s: settles failed = %d, want %d", tc.name, n, wantFailed)
		}
		if diff := cmp.Diff(wantCounts, e.countsSince(t, before)); diff != "" {
			t.Errorf("%s: metrics counted (-want +got):\n%s", tc.name, diff)
		}
		next := e.sent(t, 5*time.Second)
		if len(next) != 1 || next[0].Payment != p.ID || next[0].Attempt != 3 || next[0].Unknown.IsZero() == (tc.source != simulator.TokenUnavailable) {
			t.Errorf("%s: sent %+v, want attempt 3, maybe charged unless the 503", tc.name, next)
		}
	}
}
