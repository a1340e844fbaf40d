package worker_test

import (
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/internal/payments"
	"github.com/oncehq/once/internal/provider/simulator"
	"github.com/oncehq/once/internal/sqstest"
	"github.com/oncehq/once/internal/worker"
)

// redriven replaces e's retry queue with one whose redrive policy moves a
// message received maxReceives times to a dead-letter queue, its
// visibility timeout 1s, as the template's WorkerRetryQueue does with its
// own numbers; it returns the dead-letter queue's URL.
func (e *retryEnv) redriven(t *testing.T, maxReceives int) string {
	t.Helper()
	dlq := sqstest.Queue(t, e.sqs, "retries-dlq", nil)
	policy := fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":%d}`, sqstest.ARN(t, e.sqs, dlq), maxReceives)
	e.url = sqstest.Queue(t, e.sqs, "retries-redriven", map[string]string{"VisibilityTimeout": "1", "RedrivePolicy": policy})
	return dlq
}

// pump receives e's retry queue's messages and hands each to w, as the
// event source mapping does: a message that fails is not deleted, so the
// queue delivers it again after its visibility timeout, and moves it to its
// dead-letter queue after its maxReceiveCount. It stops once done returns
// true, and fails the test after wait; it returns how many messages failed.
func (e *retryEnv) pump(t *testing.T, w *worker.Worker, wait time.Duration, done func() bool) (failed int) {
	t.Helper()
	for deadline := time.Now().Add(wait); !done(); {
		if time.Now().After(deadline) {
			t.Fatalf("not done after %v: %d messages failed", wait, failed)
		}
		for _, m := range sqstest.Receive(t, e.sqs, e.url, time.Second, true) {
			resp, err := w.HandleRetries(t.Context(), events.SQSEvent{Records: []events.SQSMessage{{MessageId: aws.ToString(m.MessageId), Body: aws.ToString(m.Body)}}})
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.BatchItemFailures) > 0 {
				failed++
				continue
			}
			if _, err := e.sqs.DeleteMessage(t.Context(), &sqs.DeleteMessageInput{QueueUrl: aws.String(e.url), ReceiptHandle: m.ReceiptHandle}); err != nil {
				t.Fatal(err)
			}
		}
	}
	return failed
}

// deadLetters counts the messages in the dead-letter queue at url.
func (e *retryEnv) deadLetters(t *testing.T, url string) int {
	t.Helper()
	visible, inFlight, delayed := sqstest.Counts(t, e.sqs, url)
	n := 0
	for _, c := range []string{visible, inFlight, delayed} {
		v, err := strconv.Atoi(c)
		if err != nil {
			t.Fatalf("queue count %q: %v", c, err)
		}
		n += v
	}
	return n
}

// readsSentBack counts the failed reads of payment id that the retrier
// logged as sent back.
func (e *retryEnv) readsSentBack(t *testing.T, id string) (n int, first time.Time) {
	t.Helper()
	for _, l := range e.logs.Lines(t) {
		if l["msg"] == "worker: retry" && l["payment"] == id && l["read_again"] == true && l["outcome"] == "retrying" {
			if n++; n == 1 {
				at, err := time.Parse(time.RFC3339Nano, l["time"].(string))
				if err != nil {
					t.Fatal(err)
				}
				first = at
			}
		}
	}
	return n, first
}

// readOutage starts a payments table outage for reads: a payment p, its
// retry (one attempt made) on a redriven retry queue (maxReceives, its
// dead-letter queue dlq) and a worker w whose reads of p fail while
// reads.down is set (set now), its RetryBase 100ms and its LookUpHorizon
// horizon (the default when zero).
func readOutage(t *testing.T, maxReceives int, horizon time.Duration) (e *retryEnv, p payments.Payment, w *worker.Worker, reads *failingCalls, dlq string) {
	t.Helper()
	e = newRetryEnv(t)
	dlq = e.redriven(t, maxReceives)
	p = e.pay(t, simulator.TokenVisa)
	table, reads := e.readsThrough(t)
	w = e.worker_(t, sqstest.Sender(t, e.sqs, e.url), func(c *worker.Config) {
		c.Settler = table
		c.RetryBase = 100 * time.Millisecond
		c.LookUpHorizon = horizon
	})
	reads.down.Store(true)
	body, err := worker.RetryBody(p.Tenant, p.ID, 1, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if err := sqstest.Sender(t, e.sqs, e.url).Send(t.Context(), body, 0); err != nil {
		t.Fatal(err)
	}
	return e, p, w, reads, dlq
}

// TestRetryOutlastsAReadOutage: the payments table cannot be read (every
// GetItem fails, as a connection reset would) when a payment's retry is
// delivered, for longer than the retry queue's receives last (5 receives,
// 1s visibility, in the test). The retrier sends the message back itself,
// with a backoff, one more failed read counted in it, rather than failing
// it: no message fails, none reaches the dead-letter queue, and once the
// table answers again the payment is charged once and settled. The retry
// queue's delays and redrive policy are real (the local SQS).
func TestRetryOutlastsAReadOutage(t *testing.T) {
	t.Parallel()
	e, p, w, reads, dlq := readOutage(t, 5, 0)
	// More failed reads than the queue's receives: each would have been a
	// receive, and the fifth failure a dead letter.
	failed := e.pump(t, w, 60*time.Second, func() bool { return reads.failed.Load() >= 7 || e.deadLetters(t, dlq) > 0 })
	if got := e.get(t, p); got.Status != payments.StatusPending {
		t.Fatalf("payment = %s during the outage, want pending", got.Status)
	}
	reads.down.Store(false)
	failed += e.pump(t, w, 60*time.Second, func() bool {
		return e.get(t, p).Status != payments.StatusPending || e.deadLetters(t, dlq) > 0
	})
	if failed != 0 {
		t.Errorf("%d messages failed, want none", failed)
	}
	if n := e.deadLetters(t, dlq); n != 0 {
		t.Errorf("dead letters = %d, want 0", n)
	}
	if got := e.get(t, p); got.Status != payments.StatusSucceeded || got.ProviderChargeID == "" {
		t.Errorf("payment = %s, charge %q; want succeeded with a charge", got.Status, got.ProviderChargeID)
	}
	if n := e.charges(t, p); n != 1 {
		t.Errorf("provider charges = %d, want 1", n)
	}
	sent, _ := e.readsSentBack(t, p.ID)
	if n := int(reads.failed.Load()); sent != n || n < 7 {
		t.Errorf("failed reads sent back = %d of %d, want each of at least 7", sent, n)
	}
	if counts := e.counts(t); counts[worker.MetricRetried] != sent || counts[worker.MetricReadFailed] != sent || counts[worker.MetricCharged] != 1 {
		t.Errorf("metrics = %v, want %s = %s = %d (the failed reads, each sent back) and %s = 1",
			counts, worker.MetricRetried, worker.MetricReadFailed, sent, worker.MetricCharged)
	}
	if visible, inFlight, delayed := sqstest.Counts(t, e.sqs, e.url); visible+inFlight+delayed != "000" {
		t.Errorf("retry queue holds %s visible, %s in flight, %s delayed; want none", visible, inFlight, delayed)
	}
}

// TestRetryReadsEndAtTheHorizon: the payments table cannot be read from
// the first delivery of a payment's retry on. The retrier sends the message
// back again and again, then, LookUpHorizon (3s in the test) after the
// first failed read, fails it: the queue delivers it again (2 receives in
// the test) and moves it to the dead-letter queue (alarmed in AWS). The
// loop ends by itself; nothing is charged, the payment stays pending.
func TestRetryReadsEndAtTheHorizon(t *testing.T) {
	t.Parallel()
	const horizon = 3 * time.Second
	e, p, w, _, dlq := readOutage(t, 2, horizon)
	failed := e.pump(t, w, 60*time.Second, func() bool { return e.deadLetters(t, dlq) > 0 })
	sent, first := e.readsSentBack(t, p.ID)
	failedAt := e.failures(t, p.ID)
	if failed != 2 || len(failedAt) != 2 || failedAt[0].Before(first.Add(horizon)) {
		t.Errorf("the message failed %d times, at %v; want twice, at the horizon (%v after the first failed read, %v) or after",
			failed, failedAt, horizon, first)
	}
	if sent < 2 {
		t.Errorf("%d failed reads sent back before the horizon, want several", sent)
	}
	if n := e.deadLetters(t, dlq); n != 1 {
		t.Errorf("dead letters = %d, want 1", n)
	}
	if got := e.get(t, p); got.Status != payments.StatusPending {
		t.Errorf("payment = %s, want pending", got.Status)
	}
	if n := e.charges(t, p); n != 0 {
		t.Errorf("provider charges = %d, want 0", n)
	}
	// Every failed read counts, the sent back ones and those past the
	// horizon that failed the message alike.
	if got, want := e.counts(t)[worker.MetricReadFailed], sent+failed; got != want {
		t.Errorf("%s = %d, want %d (%d sent back, %d failed)", worker.MetricReadFailed, got, want, sent, failed)
	}
}

// TestRetryReadFailureSendsBack: what a failed read of the payment sends
// back, on a fixed clock: the message with the run of failed reads it
// starts or continues (its first failure's time kept, never later than
// now; one more read counted), nothing once LookUpHorizon has passed since
// that first failure (the message fails); and a read that succeeds clears
// the run from what it sends next. Each failed read counts
// worker_read_failed once, whether sent back or failed; a read that
// succeeds counts none.
func TestRetryReadFailureSendsBack(t *testing.T) {
	t.Parallel()
	e := newRetryEnv(t)
	p := e.pay(t, simulator.TokenVisa)
	now := p.Created.Add(time.Minute)
	e.now = now
	table, reads := e.readsThrough(t)
	w := e.worker_(t, sqstest.Sender(t, e.sqs, e.url), func(c *worker.Config) {
		c.Settler = table
		c.RetryBase = 10 * time.Millisecond // every send due within a second
	})
	m := retryMessage{Tenant: p.Tenant, Payment: p.ID, Attempt: 3}
	with := func(readFailed time.Time, reads int) retryMessage {
		m := m
		m.ReadFailed, m.Reads = readFailed, reads
		return m
	}
	tests := []struct {
		name       string
		readsDown  bool
		in         retryMessage
		wantFailed bool
		wantSent   []retryMessage
		wantCounts map[string]int
	}{
		{name: "the first failed read", readsDown: true, in: m, wantSent: []retryMessage{with(now, 1)},
			wantCounts: map[string]int{worker.MetricReadFailed: 1, worker.MetricRetried: 1}},
		{name: "a run of failed reads", readsDown: true, in: with(now.Add(-time.Hour), 4), wantSent: []retryMessage{with(now.Add(-time.Hour), 5)},
			wantCounts: map[string]int{worker.MetricReadFailed: 1, worker.MetricRetried: 1}},
		{name: "a run's first failure in the future", readsDown: true, in: with(now.Add(time.Hour), 2), wantSent: []retryMessage{with(now, 3)},
			wantCounts: map[string]int{worker.MetricReadFailed: 1, worker.MetricRetried: 1}},
		{name: "the horizon reached", readsDown: true, in: with(now.Add(-worker.DefaultLookUpHorizon), 9), wantFailed: true,
			wantCounts: map[string]int{worker.MetricReadFailed: 1}},
		{name: "a read that succeeds", in: with(now.Add(-time.Hour), 4), wantSent: []retryMessage{{Tenant: p.Tenant, Payment: p.ID, Attempt: 4}},
			wantCounts: map[string]int{worker.MetricRetried: 1}},
	}
	e.chargesDown.Store(true) // an attempt after a read that succeeds is sent back as such
	for _, tt := range tests {
		before := e.counts(t)
		reads.down.Store(tt.readsDown)
		b, _ := json.Marshal(tt.in)
		resp, err := w.HandleRetries(t.Context(), events.SQSEvent{Records: []events.SQSMessage{{MessageId: "m", Body: string(b)}}})
		var want []events.SQSBatchItemFailure
		if tt.wantFailed {
			want = []events.SQSBatchItemFailure{{ItemIdentifier: "m"}}
		}
		if diff := cmp.Diff(want, resp.BatchItemFailures); err != nil || diff != "" {
			t.Errorf("%s: HandleRetries() error %v, batch item failures (-want +got):\n%s", tt.name, err, diff)
		}
		if diff := cmp.Diff(tt.wantSent, e.sent(t, 5*time.Second)); diff != "" {
			t.Errorf("%s: sent back (-want +got):\n%s", tt.name, diff)
		}
		if diff := cmp.Diff(tt.wantCounts, e.countsSince(t, before)); diff != "" {
			t.Errorf("%s: metrics counted (-want +got):\n%s", tt.name, diff)
		}
	}
	if n := e.charges(t, p); n != 0 {
		t.Errorf("provider charges = %d, want 0", n)
	}
}
