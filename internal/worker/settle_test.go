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
