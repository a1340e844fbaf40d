package worker_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/internal/lambdatest"
	"github.com/oncehq/once/internal/metrics"
	"github.com/oncehq/once/internal/payments"
	"github.com/oncehq/once/internal/provider"
	"github.com/oncehq/once/internal/provider/simulator"
	"github.com/oncehq/once/internal/sqstest"
	"github.com/oncehq/once/internal/worker"
)

const retryWindow = time.Hour

// retryEnv is an env whose worker sends transient failures to a retry
// queue on a local SQS endpoint, with its clock at now().
type retryEnv struct {
	*env
	sqs *sqs.Client
	url string
	now time.Time
	w   *worker.Worker
}

func newRetryEnv(t *testing.T) *retryEnv {
	t.Helper()
	e := &retryEnv{env: newEnv(t)}
	e.sqs = sqstest.Client(t, sqstest.Endpoint(t))
	e.url = sqstest.Queue(t, e.sqs, "retries", nil)
	e.w = e.worker_(t, sqstest.Sender(t, e.sqs, e.url))
	return e
}

// worker_ builds a worker on e sending retries to q, its Config changed by
// each of with.
func (e *retryEnv) worker_(t *testing.T, q worker.Queue, with ...func(*worker.Config)) *worker.Worker {
	t.Helper()
	cfg := worker.Config{
		Charger:     e.provider,
		Settler:     e.table,
		Logger:      slog.New(slog.NewJSONHandler(&e.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Metrics:     metrics.New(&e.metrics, "once", map[string]string{"Service": "worker"}),
		Retries:     q,
		RetryWindow: retryWindow,
		RetryBase:   time.Second,
		CallTimeout: providerTimeout,
		Now: func() time.Time {
			if e.now.IsZero() {
				return time.Now()
			}
			return e.now
		},
	}
	for _, f := range with {
		f(&cfg)
	}
	w, err := worker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// retryMessage is the worker's retry message as the test reads it.
type retryMessage struct {
	Tenant  string    `json:"tenant"`
	Payment string    `json:"payment"`
	Attempt int       `json:"attempt"`
	Unknown time.Time `json:"unknown"`
	LookUps int       `json:"lookups"`
	// ReadFailed and Reads are the run of failed reads of the payment.
	ReadFailed time.Time `json:"read_failed"`
	Reads      int       `json:"reads"`
}

// sent receives (and deletes) the retries on the queue, waiting up to wait
// for the first.
func (e *retryEnv) sent(t *testing.T, wait time.Duration) (msgs []retryMessage) {
	t.Helper()
	for _, m := range sqstest.Receive(t, e.sqs, e.url, wait, false) {
		var r retryMessage
		if err := json.Unmarshal([]byte(aws.ToString(m.Body)), &r); err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, r)
	}
	return msgs
}

// TestStreamHandsTransientFailuresToRetries checks that a payment whose
// charge fails transiently does not fail its stream record: it goes to the
// retry queue, delayed, and the record after it is charged in the same
// batch.
func TestStreamHandsTransientFailuresToRetries(t *testing.T) {
	t.Parallel()
	e := newRetryEnv(t)
	down := e.pay(t, simulator.TokenUnavailable)
	lost := e.pay(t, simulator.TokenTimeout)
	good := e.pay(t, simulator.TokenVisa)
	recs := e.records(t, e.names.ByLogicalID["PaymentsTable"], 3)
	resp, err := e.w.Handle(t.Context(), events.DynamoDBEvent{Records: recs})
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("Handle() = %+v, %v; want no failures", resp, err)
	}
	if got := e.get(t, good); got.Status != payments.StatusSucceeded {
		t.Errorf("the payment after the failing ones = %s, want succeeded in the same batch", got.Status)
	}
	for _, p := range []payments.Payment{down, lost} {
		if got := e.get(t, p); got.Status != payments.StatusPending {
			t.Errorf("payment %s = %s, want pending (retried later)", p.ID, got.Status)
		}
	}
	for _, l := range e.logs.Lines(t) {
		if l["msg"] == "worker: record" && l["outcome"] == "retrying" {
			// The first retry comes after the base delay, jittered.
			if d, err := time.ParseDuration(l["retry_in"].(string)); err != nil || d < 500*time.Millisecond || d > time.Second {
				t.Errorf("payment %v retry_in = %v, want 0.5s to 1s", l["payment"], l["retry_in"])
			}
		}
	}
	msgs := e.sent(t, 3*time.Second)
	for len(msgs) < 2 {
		more := e.sent(t, 2*time.Second)
		if len(more) == 0 {
			break
		}
		msgs = append(msgs, more...)
	}
	byID := map[string]retryMessage{}
	for _, m := range msgs {
		byID[m.Payment] = m
	}
	if m := byID[down.ID]; m.Tenant != "acme" || m.Attempt != 1 || !m.Unknown.IsZero() {
		t.Errorf("retry of the 503 = %+v, want attempt 1, nothing charged", m)
	}
	if m := byID[lost.ID]; m.Attempt != 1 || m.Unknown.IsZero() {
		t.Errorf("retry of the lost answer = %+v, want attempt 1 with the time of the unknown outcome", m)
	}
	if diff := cmp.Diff(map[string]int{worker.MetricCharged: 1, worker.MetricRetried: 2}, e.counts(t)); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int{"WARN retrying": 1}, e.outcomes(t, down.ID)); diff != "" {
		t.Errorf("logged outcomes of the 503 (-want +got):\n%s", diff)
	}
}

// TestStreamDefersWhatTheInvocationCannotFit checks that a payment met with
// less time left in the invocation than one charge needs is not charged:
// it goes to the retry queue as nothing charged, and the batch does not
// fail; with time enough the same payments are charged.
func TestStreamDefersWhatTheInvocationCannotFit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		left     time.Duration // before the invocation's deadline
		deferred bool
	}{
		{"less than the budget left", 2 * time.Second, true},
		{"the budget left", time.Minute, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newRetryEnv(t)
			w := e.worker_(t, sqstest.Sender(t, e.sqs, e.url), func(c *worker.Config) { c.Budget = 10 * time.Second })
			pays := []payments.Payment{e.pay(t, simulator.TokenVisa), e.pay(t, simulator.TokenVisa), e.pay(t, simulator.TokenVisa)}
			recs := e.records(t, e.names.ByLogicalID["PaymentsTable"], len(pays))
			ctx, cancel := context.WithTimeout(t.Context(), tc.left)
			defer cancel()
			resp, err := w.Handle(ctx, events.DynamoDBEvent{Records: recs})
			if err != nil || len(resp.BatchItemFailures) != 0 {
				t.Fatalf("Handle() = %+v, %v; want no failures", resp, err)
			}
			wantStatus, wantCharges, wantCounts := payments.StatusSucceeded, 1, map[string]int{worker.MetricCharged: 3}
			if tc.deferred {
				wantStatus, wantCharges, wantCounts = payments.StatusPending, 0, map[string]int{worker.MetricRetried: 3}
			}
			for _, p := range pays {
				if got := e.get(t, p); got.Status != wantStatus {
					t.Errorf("payment %s = %s, want %s", p.ID, got.Status, wantStatus)
				}
				if n := e.charges(t, p); n != wantCharges {
					t.Errorf("provider charges of %s = %d, want %d", p.ID, n, wantCharges)
				}
			}
			if diff := cmp.Diff(wantCounts, e.counts(t)); diff != "" {
				t.Errorf("metrics (-want +got):\n%s", diff)
			}
			if !tc.deferred {
				return
			}
			var msgs []retryMessage
			for len(msgs) < len(pays) {
				more := e.sent(t, 3*time.Second)
				if len(more) == 0 {
					break
				}
				msgs = append(msgs, more...)
			}
			if len(msgs) != len(pays) {
				t.Fatalf("retries queued = %d, want %d", len(msgs), len(pays))
			}
			for _, m := range msgs {
				if m.Attempt != 1 || !m.Unknown.IsZero() {
					t.Errorf("retry %+v, want attempt 1, nothing charged", m)
				}
			}
		})
	}
}

// TestStreamFailsWhenRetriesCannotBeSent checks that a transient failure
// that cannot reach the retry queue fails its record, as without a queue.
func TestStreamFailsWhenRetriesCannotBeSent(t *testing.T) {
	t.Parallel()
	e := newRetryEnv(t)
	w := e.worker_(t, sqstest.Sender(t, e.sqs, e.url+"-missing"))
	e.pay(t, simulator.TokenUnavailable)
	recs := e.records(t, e.names.ByLogicalID["PaymentsTable"], 1)
	resp, err := w.Handle(t.Context(), events.DynamoDBEvent{Records: recs})
	if diff := cmp.Diff([]string{recs[0].Change.SequenceNumber}, lambdatest.Failures(resp)); err != nil || diff != "" {
		t.Errorf("Handle() error = %v, batch item failures (-want +got):\n%s", err, diff)
	}
}

func TestHandleRetries(t *testing.T) {
	t.Parallel()
	e := newRetryEnv(t)
	tests := []struct {
		name   string
		source string
		// setup runs before the message is handled; it returns the message.
		setup func(t *testing.T, p payments.Payment) retryMessage
		// at is the clock, relative to the payment's creation.
		at          time.Duration
		wantStatus  payments.Status
		wantFailure string
		wantCharge  bool
		wantCharges int
		wantNext    *retryMessage // the next retry sent, with Unknown compared as set or not
		wantCalls   int64         // requests to the provider
		wantMetrics map[string]int
	}{
		{
			name: "provider back: charged", source: simulator.TokenVisa, at: time.Minute,
			wantStatus: payments.StatusSucceeded, wantCharge: true, wantCharges: 1, wantCalls: 1,
			wantMetrics: map[string]int{worker.MetricCharged: 1},
		},
		{
			name: "still unavailable: the next attempt, later", source: simulator.TokenUnavailable, at: time.Minute,
			wantStatus: payments.StatusPending, wantNext: &retryMessage{Attempt: 3}, wantCalls: 1,
			wantMetrics: map[string]int{worker.MetricRetried: 1},
		},
		{
			name: "window just over, nothing charged: looked up once no attempt can be in flight", source: simulator.TokenUnavailable, at: retryWindow,
			wantStatus: payments.StatusPending, wantNext: &retryMessage{Attempt: 2},
			wantMetrics: map[string]int{worker.MetricRetried: 1},
		},
		{
			name: "window over, nothing charged, no charge: failed", source: simulator.TokenUnavailable, at: retryWindow + providerTimeout,
			wantStatus: payments.StatusFailed, wantFailure: "provider_unavailable", wantCalls: 1, // the look-up
			wantMetrics: map[string]int{worker.MetricFailed: 1},
		},
		{
			name: "window over, nothing charged in this chain, the charge exists: succeeded", source: simulator.TokenVisa, at: retryWindow + providerTimeout,
			setup: func(t *testing.T, p payments.Payment) retryMessage {
				e.charge(t, p)
				return retryMessage{Attempt: 7}
			},
			wantStatus: payments.StatusSucceeded, wantCharge: true, wantCharges: 1, wantCalls: 1, // the look-up
			wantMetrics: map[string]int{worker.MetricCharged: 1},
		},
		{
			name: "window over, an answer was lost, the charge exists: succeeded", source: simulator.TokenVisa, at: retryWindow + time.Minute,
			setup: func(t *testing.T, p payments.Payment) retryMessage {
				e.charge(t, p)
				return retryMessage{Attempt: 7, Unknown: p.Created.Add(retryWindow - time.Minute)}
			},
			wantStatus: payments.StatusSucceeded, wantCharge: true, wantCharges: 1, wantCalls: 1, // the look-up
			wantMetrics: map[string]int{worker.MetricCharged: 1},
		},
		{
			name: "window over, an answer was lost, no charge: failed", source: simulator.TokenUnavailable, at: retryWindow + time.Minute,
			setup: func(t *testing.T, p payments.Payment) retryMessage {
				return retryMessage{Attempt: 7, Unknown: p.Created.Add(retryWindow - time.Minute)}
			},
			wantStatus: payments.StatusFailed, wantFailure: "provider_unavailable", wantCalls: 1,
			wantMetrics: map[string]int{worker.MetricFailed: 1},
		},
		{
			name: "window over, an answer was lost just now: looked up once no call can be in flight", source: simulator.TokenUnavailable, at: retryWindow,
			setup: func(t *testing.T, p payments.Payment) retryMessage {
				return retryMessage{Attempt: 7, Unknown: p.Created.Add(retryWindow - 100*time.Millisecond)}
			},
			wantStatus: payments.StatusPending, wantNext: &retryMessage{Attempt: 7, Unknown: time.Unix(1, 0)},
			wantMetrics: map[string]int{worker.MetricRetried: 1},
		},
		{
			name: "already settled: nothing", source: simulator.TokenVisa, at: time.Minute,
			setup: func(t *testing.T, p payments.Payment) retryMessage {
				if err := e.table.Settle(t.Context(), p.Tenant, p.ID, payments.StatusFailed, "", "card_declined"); err != nil {
					t.Fatal(err)
				}
				return retryMessage{Attempt: 2}
			},
			wantStatus: payments.StatusFailed, wantFailure: "card_declined", wantMetrics: map[string]int{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := e.pay(t, tt.source)
			m := retryMessage{Attempt: 2}
			if tt.setup != nil {
				m = tt.setup(t, p)
			}
			m.Tenant, m.Payment = p.Tenant, p.ID
			body, _ := json.Marshal(m)
			e.now = p.Created.Add(tt.at)
			before := e.counts(t)
			calls := e.requests.Load()
			resp, err := e.w.HandleRetries(t.Context(), events.SQSEvent{Records: []events.SQSMessage{{MessageId: "m1", Body: string(body)}}})
			if err != nil || len(resp.BatchItemFailures) != 0 {
				t.Fatalf("HandleRetries() = %+v, %v; want no failures", resp, err)
			}
			got := e.get(t, p)
			if got.Status != tt.wantStatus || got.FailureCode != tt.wantFailure || (got.ProviderChargeID != "") != tt.wantCharge {
				t.Errorf("payment = %s %q charge %q; want %s %q, charge %v", got.Status, got.FailureCode, got.ProviderChargeID, tt.wantStatus, tt.wantFailure, tt.wantCharge)
			}
			if n := e.charges(t, p); n != tt.wantCharges {
				t.Errorf("charges = %d, want %d", n, tt.wantCharges)
			}
			if n := e.requests.Load() - calls; n != tt.wantCalls {
				t.Errorf("provider requests = %d, want %d", n, tt.wantCalls)
			}
			if tt.wantNext == nil {
				if visible, inFlight, delayed := sqstest.Counts(t, e.sqs, e.url); visible+inFlight+delayed != "000" {
					t.Errorf("retry queue holds %s visible, %s in flight, %s delayed; want no next retry", visible, inFlight, delayed)
				}
			}
			var next []retryMessage
			if tt.wantNext != nil {
				next = e.sent(t, 5*time.Second) // the next attempt comes 2s to 4s later
			}
			switch {
			case tt.wantNext != nil && (len(next) != 1 || next[0].Attempt != tt.wantNext.Attempt || next[0].Payment != p.ID ||
				next[0].Unknown.IsZero() != tt.wantNext.Unknown.IsZero()):
				t.Errorf("next retries = %+v, want one: %+v", next, *tt.wantNext)
			}
			got2 := map[string]int{}
			for k, v := range e.counts(t) {
				if n := v - before[k]; n != 0 {
					got2[k] = n
				}
			}
			if diff := cmp.Diff(tt.wantMetrics, got2); diff != "" {
				t.Errorf("metrics (-want +got):\n%s", diff)
			}
		})
	}
}

// TestHandleRetriesFailures checks which messages fail (and so come back,
// then go to the dead-letter queue) and which are dropped.
func TestHandleRetriesFailures(t *testing.T) {
	t.Parallel()
	e := newRetryEnv(t)
	gone, _ := json.Marshal(retryMessage{Tenant: "acme", Payment: payments.NewID(), Attempt: 2})
	resp, err := e.w.HandleRetries(t.Context(), events.SQSEvent{Records: []events.SQSMessage{
		{MessageId: "not-json", Body: "{"},
		{MessageId: "no-payment", Body: `{"tenant":"acme","payment":"nope","attempt":1}`},
		{MessageId: "gone", Body: string(gone)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	want := []events.SQSBatchItemFailure{{ItemIdentifier: "not-json"}, {ItemIdentifier: "no-payment"}}
	if diff := cmp.Diff(want, resp.BatchItemFailures); diff != "" {
		t.Errorf("batch item failures (-want +got):\n%s", diff)
	}
}

// TestBackoff checks the delays between attempts: doubling from the base,
// jittered within the upper half, capped at SQS's 15 minutes, spread.
func TestBackoff(t *testing.T) {
	t.Parallel()
	e := newRetryEnv(t)
	p := e.pay(t, simulator.TokenUnavailable)
	e.now = p.Created.Add(time.Minute)
	seen := map[time.Duration]bool{}
	for attempt := 1; attempt <= 14; attempt++ {
		body, _ := json.Marshal(retryMessage{Tenant: p.Tenant, Payment: p.ID, Attempt: attempt})
		resp, err := e.w.HandleRetries(t.Context(), events.SQSEvent{Records: []events.SQSMessage{{MessageId: "m", Body: string(body)}}})
		if err != nil || len(resp.BatchItemFailures) != 0 {
			t.Fatalf("HandleRetries() = %+v, %v", resp, err)
		}
		var delay time.Duration
		for _, l := range e.logs.Lines(t) {
			if l["msg"] == "worker: retry" && l["outcome"] == "retrying" && l["attempt"] == float64(attempt+1) {
				delay, _ = time.ParseDuration(l["retry_in"].(string))
			}
		}
		d := min(time.Second<<attempt, worker.MaxRetryDelay)
		if delay < d/2 || delay > d {
			t.Errorf("attempt %d: retry in %v, want %v to %v", attempt+1, delay, d/2, d)
		}
		seen[delay] = true
	}
	if len(seen) < 10 {
		t.Errorf("%d distinct delays over 14 attempts: want them jittered", len(seen))
	}
	if _, err := e.sqs.PurgeQueue(t.Context(), &sqs.PurgeQueueInput{QueueUrl: aws.String(e.url)}); err != nil {
		t.Fatal(err)
	}
}

// TestRetryBody checks that RetryBody writes the message the worker sends
// (byte for byte, for a lost answer and for a 503) and refuses one the
// retrier would not take.
func TestRetryBody(t *testing.T) {
	t.Parallel()
	e := newRetryEnv(t)
	e.pay(t, simulator.TokenUnavailable)
	e.pay(t, simulator.TokenTimeout)
	recs := e.records(t, e.names.ByLogicalID["PaymentsTable"], 2)
	if resp, err := e.w.Handle(t.Context(), events.DynamoDBEvent{Records: recs}); err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("Handle() = %+v, %v; want no failures", resp, err)
	}
	var bodies []string
	for deadline := time.Now().Add(10 * time.Second); len(bodies) < 2 && time.Now().Before(deadline); {
		for _, m := range sqstest.Receive(t, e.sqs, e.url, 2*time.Second, false) {
			bodies = append(bodies, aws.ToString(m.Body))
		}
	}
	if len(bodies) != 2 {
		t.Fatalf("%d retries sent, want 2", len(bodies))
	}
	for _, sent := range bodies {
		var m retryMessage
		if err := json.Unmarshal([]byte(sent), &m); err != nil {
			t.Fatal(err)
		}
		got, err := worker.RetryBody(m.Tenant, m.Payment, m.Attempt, m.Unknown)
		if err != nil || got != sent {
			t.Errorf("RetryBody(%+v) = %q, %v; want the worker's %q", m, got, err, sent)
		}
	}
	id := payments.NewID()
	for _, tt := range []struct {
		tenant, id string
		attempts   int
	}{
		{"acme", "pay_short", 1},
		{"not a tenant", id, 1},
		{"acme", id, 0},
	} {
		if got, err := worker.RetryBody(tt.tenant, tt.id, tt.attempts, time.Time{}); err == nil {
			t.Errorf("RetryBody(%q, %q, %d) = %q, want an error", tt.tenant, tt.id, tt.attempts, got)
		}
	}
}

// TestStreamAfterTheWindowChargesNothing: a stream record met after its
// payment's retry window has ended (a window shorter than the mapping's
// MaximumRecordAgeInSeconds, a record redelivered after the invocation
// that made its first attempt crashed) is not charged: the retrier may have
// settled the payment failed at the window's end, and a charge now would
// take money for a failed payment. It goes to the retrier, which charges no
// more after the window: it does nothing to a settled payment and looks the
// charge of a pending one up, the stream's earlier delivery may have made
// it.
func TestStreamAfterTheWindowChargesNothing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		settled    bool // by the retrier at the window's end
		wantStatus payments.Status
	}{
		{"settled failed at the window's end", true, payments.StatusFailed},
		{"still pending", false, payments.StatusFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newRetryEnv(t)
			p := e.pay(t, simulator.TokenVisa)
			recs := e.records(t, e.names.ByLogicalID["PaymentsTable"], 1)
			if tc.settled {
				if err := e.table.Settle(t.Context(), p.Tenant, p.ID, payments.StatusFailed, "", "provider_unavailable"); err != nil {
					t.Fatal(err)
				}
			}
			e.now = p.Created.Add(retryWindow + time.Minute)
			resp, err := e.w.Handle(t.Context(), events.DynamoDBEvent{Records: recs})
			if err != nil || len(resp.BatchItemFailures) != 0 {
				t.Fatalf("Handle() = %+v, %v; want no failures", resp, err)
			}
			if n := e.charges(t, p); n != 0 {
				t.Fatalf("provider charges after the window = %d, want 0", n)
			}
			msgs := e.sent(t, 3*time.Second)
			if len(msgs) != 1 || msgs[0].Payment != p.ID || msgs[0].Unknown.IsZero() {
				t.Fatalf("retries = %+v, want one of %s saying an attempt may have charged", msgs, p.ID)
			}
			// The retrier, once a look-up can tell.
			e.now = msgs[0].Unknown.Add(providerTimeout + time.Second)
			body, err := worker.RetryBody(msgs[0].Tenant, msgs[0].Payment, msgs[0].Attempt, msgs[0].Unknown)
			if err != nil {
				t.Fatal(err)
			}
			rresp, err := e.w.HandleRetries(t.Context(), events.SQSEvent{Records: []events.SQSMessage{{MessageId: "m1", Body: body}}})
			if err != nil || len(rresp.BatchItemFailures) != 0 {
				t.Fatalf("HandleRetries() = %+v, %v; want no failures", rresp, err)
			}
			if got := e.get(t, p); got.Status != tc.wantStatus || got.FailureCode != "provider_unavailable" {
				t.Errorf("payment = %s %q, want %s provider_unavailable", got.Status, got.FailureCode, tc.wantStatus)
			}
			if n := e.charges(t, p); n != 0 {
				t.Errorf("provider charges = %d, want 0", n)
			}
		})
	}
}

// charge charges p under its worker key, as a delivery that crashed before
// its settle did: the charge is made, the payment stays pending.
func (e *retryEnv) charge(t *testing.T, p payments.Payment) provider.Charge {
	t.Helper()
	ch, err := e.provider.Charge(t.Context(), worker.ChargeKey(p.Tenant, p.ID), worker.ChargeRequest(p))
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// retryNow hands the retry of p described by m to w, and fails the test
// unless it is processed.
func (e *retryEnv) retryNow(t *testing.T, w *worker.Worker, p payments.Payment, m retryMessage) {
	t.Helper()
	m.Tenant, m.Payment = p.Tenant, p.ID
	body, _ := json.Marshal(m)
	resp, err := w.HandleRetries(t.Context(), events.SQSEvent{Records: []events.SQSMessage{{MessageId: "m", Body: string(body)}}})
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("HandleRetries(%+v) = %+v, %v; want no failures", m, resp, err)
	}
}

// TestGivingUpLooksTheChargeUp: a stream invocation charges a payment and
// crashes before its settle; its record, delivered again, and every retry
// after it meet a provider answering 503 until the payment's retry window
// ends. No attempt of that chain saw an ambiguous answer, and still the
// payment is charged: at the window's end the retrier looks the charge up
// and settles the payment succeeded with it, never failed over a real
// charge. The stream and the retrier run on a clock 3s before the window's
// end and the retry queue's delays are real.
func TestGivingUpLooksTheChargeUp(t *testing.T) {
	t.Parallel()
	e := newRetryEnv(t)
	p := e.pay(t, simulator.TokenVisa)
	recs := e.records(t, e.names.ByLogicalID["PaymentsTable"], 1)
	ch := e.charge(t, p)
	e.chargesDown.Store(true)
	offset := p.Created.Add(retryWindow - 3*time.Second).Sub(time.Now())
	w := e.worker_(t, sqstest.Sender(t, e.sqs, e.url), func(c *worker.Config) {
		c.Now = func() time.Time { return time.Now().Add(offset) }
	})
	resp, err := w.Handle(t.Context(), events.DynamoDBEvent{Records: recs})
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("Handle() = %+v, %v; want no failures", resp, err)
	}
	for deadline := time.Now().Add(30 * time.Second); e.get(t, p).Status == payments.StatusPending; {
		if time.Now().After(deadline) {
			t.Fatal("payment still pending 30s after its retry window's end")
		}
		for _, m := range sqstest.Receive(t, e.sqs, e.url, time.Second, false) {
			resp, err := w.HandleRetries(t.Context(), events.SQSEvent{Records: []events.SQSMessage{{MessageId: aws.ToString(m.MessageId), Body: aws.ToString(m.Body)}}})
			if err != nil || len(resp.BatchItemFailures) != 0 {
				t.Fatalf("HandleRetries() = %+v, %v; want no failures", resp, err)
			}
		}
	}
	got := e.get(t, p)
	if got.Status != payments.StatusSucceeded || got.ProviderChargeID != ch.ID || got.FailureCode != "" {
		t.Errorf("payment = %s, charge %q, failure %q; want succeeded with the charge %s", got.Status, got.ProviderChargeID, got.FailureCode, ch.ID)
	}
	if n := e.charges(t, p); n != 1 {
		t.Errorf("provider charges = %d, want 1", n)
	}
	retried, attempts := 0, 0
	for _, l := range e.logs.Lines(t) {
		if l["outcome"] == "retrying" {
			retried++
			if l["msg"] == "worker: retry" && l["look_up"] == nil {
				attempts++
			}
		}
	}
	if attempts == 0 {
		t.Error("no retry met the outage: the test did not make the retrier try")
	}
	if diff := cmp.Diff(map[string]int{worker.MetricCharged: 1, worker.MetricRetried: retried}, e.counts(t)); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}
	if visible, inFlight, delayed := sqstest.Counts(t, e.sqs, e.url); visible+inFlight+delayed != "000" {
		t.Errorf("retry queue holds %s visible, %s in flight, %s delayed; want none", visible, inFlight, delayed)
	}
}

// TestGivingUpWaitsForTheLastAttempt: two copies of one retry message (SQS
// delivers at least once), one handled just before the payment's window
// ends, the other at its end. The copy at the end makes no attempt and
// settles nothing while the other's charge may still be on its way to the
// provider: it looks the charge up once CallTimeout has passed since the
// window's end, so the payment ends succeeded with the one charge made,
// never failed over it.
func TestGivingUpWaitsForTheLastAttempt(t *testing.T) {
	t.Parallel()
	e := newRetryEnv(t)
	p := e.pay(t, simulator.TokenVisa)
	end := p.Created.Add(retryWindow)
	at := func(d time.Duration) func(*worker.Config) {
		return func(c *worker.Config) { c.Now = func() time.Time { return end.Add(d) } }
	}
	q := sqstest.Sender(t, e.sqs, e.url)
	late, early := e.worker_(t, q, at(0)), e.worker_(t, q, at(-100*time.Millisecond))
	m := retryMessage{Attempt: 4}
	e.retryNow(t, late, p, m)
	if got := e.get(t, p); got.Status != payments.StatusPending {
		t.Fatalf("payment = %s after the copy at the window's end; want pending until no attempt can be in flight", got.Status)
	}
	e.retryNow(t, early, p, m)
	ch, err := e.provider.Lookup(t.Context(), worker.ChargeKey(p.Tenant, p.ID))
	if err != nil {
		t.Fatal(err)
	}
	msgs := e.sent(t, 3*time.Second)
	if len(msgs) != 1 || msgs[0].Attempt != m.Attempt {
		t.Fatalf("retries sent = %+v, want the look-up of the copy at the window's end", msgs)
	}
	after := e.worker_(t, q, at(providerTimeout))
	e.retryNow(t, after, p, msgs[0])
	got := e.get(t, p)
	if got.Status != payments.StatusSucceeded || got.ProviderChargeID != ch.ID {
		t.Errorf("payment = %s, charge %q; want succeeded with the charge %s", got.Status, got.ProviderChargeID, ch.ID)
	}
	if n := e.charges(t, p); n != 1 {
		t.Errorf("provider charges = %d, want 1", n)
	}
	if diff := cmp.Diff(map[string]int{worker.MetricCharged: 1, worker.MetricRetried: 1}, e.counts(t)); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}
}

// TestGivingUpNeedsTheProvidersAnswer: at the window's end a payment is
// settled only on the provider's answer to the look-up of its charge. A
// look-up that fails leaves it pending; before the look-up horizon the
// retrier sends the message back itself, with a backoff and one more
// look-up counted, and the message succeeds; once the horizon is reached
// the message fails, and the queue delivers it again and, after its
// maxReceiveCount, moves it to its dead-letter queue. Each failed look-up
// counts worker_lookup_failed once, whether sent back or failed.
func TestGivingUpNeedsTheProvidersAnswer(t *testing.T) {
	t.Parallel()
	e := newRetryEnv(t)
	e.lookupsDown.Store(true)
	for _, tc := range []struct {
		name    string
		charged bool
		// after is the clock, after the time of the first look-up.
		after       time.Duration
		lookUps     int
		wantFailed  bool
		wantLookUps int // of the message sent back
	}{
		{name: "charged", charged: true, wantLookUps: 1},
		{name: "not charged", wantLookUps: 1},
		{name: "charged, sent back before", charged: true, after: time.Hour, lookUps: 1, wantLookUps: 2},
		{name: "charged, the horizon reached", charged: true, after: worker.DefaultLookUpHorizon, lookUps: 80, wantFailed: true},
		{name: "not charged, the horizon reached", after: worker.DefaultLookUpHorizon + time.Minute, lookUps: 80, wantFailed: true},
	} {
		p := e.pay(t, simulator.TokenVisa)
		if tc.charged {
			e.charge(t, p)
		}
		e.now = p.Created.Add(retryWindow + providerTimeout + tc.after)
		body, _ := json.Marshal(retryMessage{Tenant: p.Tenant, Payment: p.ID, Attempt: 9, LookUps: tc.lookUps})
		before := e.counts(t)
		resp, err := e.w.HandleRetries(t.Context(), events.SQSEvent{Records: []events.SQSMessage{{MessageId: "m", Body: string(body)}}})
		var want []events.SQSBatchItemFailure
		if tc.wantFailed {
			want = []events.SQSBatchItemFailure{{ItemIdentifier: "m"}}
		}
		if diff := cmp.Diff(want, resp.BatchItemFailures); err != nil || diff != "" {
			t.Errorf("%s: HandleRetries() error %v, batch item failures (-want +got):\n%s", tc.name, err, diff)
		}
		if got := e.get(t, p); got.Status != payments.StatusPending {
			t.Errorf("%s: payment = %s %q, want pending", tc.name, got.Status, got.FailureCode)
		}
		var next []retryMessage
		if !tc.wantFailed {
			next = e.sent(t, 5*time.Second)
		}
		if visible, inFlight, delayed := sqstest.Counts(t, e.sqs, e.url); visible+inFlight+delayed != "000" {
			t.Errorf("%s: retry queue holds %s visible, %s in flight, %s delayed after the messages sent back", tc.name, visible, inFlight, delayed)
		}
		wantCounts := map[string]int{worker.MetricLookUpFailed: 1}
		if !tc.wantFailed {
			wantCounts[worker.MetricRetried] = 1
			if len(next) != 1 || next[0].Payment != p.ID || next[0].Attempt != 9 || next[0].LookUps != tc.wantLookUps {
				t.Errorf("%s: sent back %+v, want one, attempt 9, %d look-ups", tc.name, next, tc.wantLookUps)
			}
		}
		if diff := cmp.Diff(wantCounts, e.countsSince(t, before)); diff != "" {
			t.Errorf("%s: metrics counted (-want +got):\n%s", tc.name, diff)
		}
	}
	if got := e.counts(t); got[worker.MetricCharged]+got[worker.MetricFailed] != 0 {
		t.Errorf("metrics = %v, want no settlement", got)
	}
}

// drain receives the retry queue's messages and hands each to w until done
// returns true, for at most wait; it returns how many messages failed (a
// batch item failure: in AWS, a receive counting towards the dead-letter
// queue) and how many were handled.
func (e *retryEnv) drain(t *testing.T, w *worker.Worker, wait time.Duration, done func() bool) (failed, handled int) {
	t.Helper()
	for deadline := time.Now().Add(wait); !done(); {
		if time.Now().After(deadline) {
			t.Fatalf("not done after %v: %d messages handled, %d failed", wait, handled, failed)
		}
		for _, m := range sqstest.Receive(t, e.sqs, e.url, time.Second, false) {
			resp, err := w.HandleRetries(t.Context(), events.SQSEvent{Records: []events.SQSMessage{{MessageId: aws.ToString(m.MessageId), Body: aws.ToString(m.Body)}}})
			if err != nil {
				t.Fatal(err)
			}
			handled++
			failed += len(resp.BatchItemFailures)
		}
	}
	return failed, handled
}

// failedLookUps counts the look-ups the retrier logged as failed, and sent
// back, for payment id.
func (e *retryEnv) failedLookUps(t *testing.T, id string) int {
	t.Helper()
	n := 0
	for _, l := range e.logs.Lines(t) {
		if l["msg"] == "worker: retry" && l["payment"] == id && l["look_up"] == true && l["outcome"] == "retrying" && l["err"] != nil {
			n++
		}
	}
	return n
}

// TestGivingUpOutlastsAnOutage: at the end of the payment's retry window,
// and for a few seconds after, the provider's look-ups answer 503, or the
// look-up succeeds and the settle on its answer cannot be written (the
// payments table unreachable). Either way the retrier sends the message
// back itself, with a backoff, one more look-up counted, and looks the
// charge up (and settles) again until the outage ends. The payment ends
// settled once, as the provider's record says (succeeded with the charge an
// earlier delivery made, failed provider_unavailable with none), no message
// ever fails (none would reach the dead-letter queue), and nothing is
// charged after the window. The retry queue's delays are real. Each failed
// look-up counts worker_lookup_failed, each failed settle
// worker_settle_failed, and neither counts the other.
func TestGivingUpOutlastsAnOutage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		charged bool
		// settles: the settle cannot be written, rather than the look-up
		// made.
		settles bool
	}{
		{"look-ups down, charged", true, false},
		{"look-ups down, not charged", false, false},
		{"settles down, charged", true, true},
		{"settles down, not charged", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newRetryEnv(t)
			p := e.pay(t, simulator.TokenVisa)
			var ch provider.Charge
			if tc.charged {
				ch = e.charge(t, p)
			}
			table, settles := e.settlesThrough(t)
			down, tried := &e.lookupsDown, func() bool { return e.failedLookUps(t, p.ID) >= 3 }
			if tc.settles {
				down, tried = &settles.down, func() bool { return settles.failed.Load() >= 3 }
			}
			down.Store(true)
			offset := p.Created.Add(retryWindow + providerTimeout).Sub(time.Now())
			w := e.worker_(t, sqstest.Sender(t, e.sqs, e.url), func(c *worker.Config) {
				c.Settler = table
				c.Now = func() time.Time { return time.Now().Add(offset) }
			})
			e.retryNow(t, w, p, retryMessage{Attempt: 9})
			failed, _ := e.drain(t, w, 30*time.Second, tried)
			if got := e.get(t, p); got.Status != payments.StatusPending {
				t.Fatalf("payment = %s %q during the outage, want pending", got.Status, got.FailureCode)
			}
			// Every failure so far was sent back (none failed the
			// message: checked below), and logged so.
			sentBack := e.failedLookUps(t, p.ID)
			wantCounts := map[string]int{worker.MetricLookUpFailed: sentBack}
			if tc.settles {
				wantCounts = map[string]int{worker.MetricSettleFailed: sentBack}
				if n := int(settles.failed.Load()); n != sentBack {
					t.Errorf("settles failed = %d, sent back = %d; want each sent back", n, sentBack)
				}
			}
			if got := e.counts(t); got[worker.MetricLookUpFailed] != wantCounts[worker.MetricLookUpFailed] || got[worker.MetricSettleFailed] != wantCounts[worker.MetricSettleFailed] {
				t.Errorf("metrics = %v during the outage, want %v", got, wantCounts)
			}
			down.Store(false)
			f, _ := e.drain(t, w, 30*time.Second, func() bool { return e.get(t, p).Status != payments.StatusPending })
			if failed += f; failed != 0 {
				t.Errorf("%d messages failed, want none: each would count towards the dead-letter queue", failed)
			}
			got := e.get(t, p)
			want := payments.StatusFailed
			wantCode, wantCharges := "provider_unavailable", 0
			if tc.charged {
				want, wantCode, wantCharges = payments.StatusSucceeded, "", 1
			}
			if got.Status != want || got.FailureCode != wantCode || got.ProviderChargeID != ch.ID {
				t.Errorf("payment = %s %q, charge %q; want %s %q, charge %q", got.Status, got.FailureCode, got.ProviderChargeID, want, wantCode, ch.ID)
			}
			if n := e.charges(t, p); n != wantCharges {
				t.Errorf("provider charges = %d, want %d", n, wantCharges)
			}
			if n := settles.answered.Load(); n != 1 {
				t.Errorf("settles written = %d, want 1", n)
			}
			counts := e.counts(t)
			if counts[worker.MetricCharged]+counts[worker.MetricFailed] != 1 {
				t.Errorf("settlements counted = %v, want 1", counts)
			}
			if counts[worker.MetricLookUpFailed] != wantCounts[worker.MetricLookUpFailed] || counts[worker.MetricSettleFailed] != wantCounts[worker.MetricSettleFailed] {
				t.Errorf("metrics = %v after the outage, want %v: a look-up or settle that succeeds counts neither", counts, wantCounts)
			}
			if visible, inFlight, delayed := sqstest.Counts(t, e.sqs, e.url); visible+inFlight+delayed != "000" {
				t.Errorf("retry queue holds %s visible, %s in flight, %s delayed; want none", visible, inFlight, delayed)
			}
		})
	}
}

// TestGivingUpEndsAtTheHorizon: the provider's look-ups answer 503 from the
// end of the payment's retry window past its look-up horizon (3s in the
// test). The retrier looks the charge up again and again, with a backoff,
// then, with the horizon reached, fails the message as before: in AWS it
// goes to the dead-letter queue (alarmed), and the payment stays pending,
// never settled on a guess. Every failed look-up counts
// worker_lookup_failed, those sent back and the one that failed the message.
func TestGivingUpEndsAtTheHorizon(t *testing.T) {
	t.Parallel()
	const horizon = 3 * time.Second
	e := newRetryEnv(t)
	p := e.pay(t, simulator.TokenVisa)
	e.charge(t, p)
	e.lookupsDown.Store(true)
	offset := p.Created.Add(retryWindow + providerTimeout).Sub(time.Now())
	now := func() time.Time { return time.Now().Add(offset) }
	w := e.worker_(t, sqstest.Sender(t, e.sqs, e.url), func(c *worker.Config) {
		c.Now = now
		c.LookUpHorizon = horizon
	})
	e.retryNow(t, w, p, retryMessage{Attempt: 9})
	var failedAt []time.Time
	e.drain(t, w, 30*time.Second, func() bool {
		failedAt = e.failures(t, p.ID)
		return len(failedAt) > 0
	})
	if end := p.Created.Add(retryWindow + providerTimeout + horizon); len(failedAt) != 1 || failedAt[0].Add(offset).Before(end) {
		t.Errorf("the message failed at %v (on the worker's clock), want once, at the horizon %v or after", failedAt, end)
	}
	n := e.failedLookUps(t, p.ID)
	if n < 2 {
		t.Errorf("%d look-ups sent back before the horizon, want several", n)
	}
	if got, want := e.counts(t)[worker.MetricLookUpFailed], n+len(failedAt); got != want {
		t.Errorf("%s = %d, want %d (%d sent back, %d failed)", worker.MetricLookUpFailed, got, want, n, len(failedAt))
	}
	if got := e.get(t, p); got.Status != payments.StatusPending {
		t.Errorf("payment = %s %q past the horizon, want pending", got.Status, got.FailureCode)
	}
	if n := e.charges(t, p); n != 1 {
		t.Errorf("provider charges = %d, want 1 (the one made before)", n)
	}
}

// failures returns when the retrier logged an "error" outcome for payment
// id (a message that failed), on the real clock.
func (e *retryEnv) failures(t *testing.T, id string) []time.Time {
	t.Helper()
	var out []time.Time
	for _, l := range e.logs.Lines(t) {
		if l["msg"] == "worker: retry" && l["payment"] == id && l["outcome"] == "error" {
			at, err := time.Parse(time.RFC3339Nano, l["time"].(string))
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, at)
		}
	}
	return out
}
