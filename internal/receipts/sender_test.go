package receipts_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/idempotency/stream"
	"github.com/oncehq/once/internal/dynamotest"
	"github.com/oncehq/once/internal/lambdatest"
	"github.com/oncehq/once/internal/mail"
	"github.com/oncehq/once/internal/metrics"
	"github.com/oncehq/once/internal/outbox"
	"github.com/oncehq/once/internal/provider/simulator"
	"github.com/oncehq/once/internal/queue"
	"github.com/oncehq/once/internal/receipts"
	"github.com/oncehq/once/internal/sqstest"
)

// env is an outbox and an orders table of their own, the mail simulator
// over HTTP, a retry queue and its dead-letter queue on a local SQS
// endpoint, and a settable clock.
type env struct {
	db            *dynamodb.Client
	names         dynamotest.Names
	mailURL       string
	sqs           *sqs.Client
	retries, dead string // queue URLs
	mu            sync.Mutex
	now           time.Time
	metrics       *lambdatest.Buffer
	logs          *lambdatest.Buffer
}

func newEnv(t *testing.T) *env {
	t.Helper()
	db := dynamotest.Client(t)
	names := dynamotest.Tables(t, db)
	srv := httptest.NewServer(simulator.New(simulator.Options{DB: db, Table: names.ByLogicalID["ProviderTable"]}))
	t.Cleanup(srv.Close)
	e := &env{db: db, names: names, mailURL: srv.URL, now: time.Now(), metrics: &lambdatest.Buffer{}, logs: &lambdatest.Buffer{}}
	e.sqs = sqstest.Client(t, sqstest.Endpoint(t))
	e.retries = sqstest.Queue(t, e.sqs, "receipt-retry", nil)
	e.dead = sqstest.Queue(t, e.sqs, "receipt-retry-dlq", nil)
	return e
}

func (e *env) clock() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.now
}

func (e *env) advance(d time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.now = e.now.Add(d)
}

// sender returns a Sender on the env's tables (orders on ordersTable) and
// queues that tries each job maxAttempts times, with a claim of 5s.
func (e *env) sender(t *testing.T, ordersTable string, maxAttempts int) *receipts.Sender {
	t.Helper()
	s, err := receipts.New(receipts.Config{
		DB: e.db, Outbox: e.names.ByLogicalID["OutboxTable"], Orders: ordersTable,
		Mail:        mail.New(e.mailURL, &http.Client{Timeout: 2 * time.Second}),
		Retries:     sqstest.Sender(t, e.sqs, e.retries),
		DeadLetters: sqstest.Sender(t, e.sqs, e.dead),
		MaxAttempts: maxAttempts,
		Logger:      slog.New(slog.NewJSONHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Metrics:     metrics.New(e.metrics, "once", map[string]string{"Service": "receipts"}),
		Now:         e.clock, ClaimFor: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// job writes a queued receipt job to the outbox, and its paid order, and
// returns the job. name is at most 24 characters of a-z and 2-7.
func (e *env) job(t *testing.T, name, to string) outbox.Job {
	t.Helper()
	id := name + strings.Repeat("a", 24-len(name))
	order := "ord_" + id
	j := outbox.Job{
		PK: outbox.JobPK("acme", outbox.JobIDPrefix+id), Kind: outbox.KindReceipt, ID: outbox.JobIDPrefix + id, Tenant: "acme",
		Order: order, OrderPK: "acme#" + order, To: to, Subject: "Your receipt for order " + order,
		Text: "Thank you for your order " + order + ".\n", Created: 1767225600, State: outbox.Queued,
	}
	e.put(t, e.names.ByLogicalID["OutboxTable"], j)
	e.put(t, e.names.ByLogicalID["OrdersTable"], map[string]any{"pk": j.OrderPK, "id": order, "tenant": "acme", "status": "paid",
		"recovery_point": "finished", "receipt": "queued", "email": to})
	return j
}

func (e *env) put(t *testing.T, table string, item any) {
	t.Helper()
	m, err := attributevalue.MarshalMap(item)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.db.PutItem(t.Context(), &dynamodb.PutItemInput{TableName: aws.String(table), Item: m}); err != nil {
		t.Fatal(err)
	}
}

// get reads the item pk of table into out.
func (e *env) get(t *testing.T, table, pk string, out any) {
	t.Helper()
	if err := attributevalue.UnmarshalMap(dynamotest.Item(t, e.db, table, pk), out); err != nil {
		t.Fatal(err)
	}
}

// jobNow reads the job as it stands.
func (e *env) jobNow(t *testing.T, j outbox.Job) outbox.Job {
	t.Helper()
	var got outbox.Job
	e.get(t, e.names.ByLogicalID["OutboxTable"], j.PK, &got)
	return got
}

// event is the batch of the INSERTs of jobs, as the outbox stream delivers
// it.
func event(t *testing.T, jobs ...outbox.Job) events.DynamoDBEvent {
	t.Helper()
	var ev events.DynamoDBEvent
	for _, j := range jobs {
		m, err := attributevalue.MarshalMap(j)
		if err != nil {
			t.Fatal(err)
		}
		ev.Records = append(ev.Records, lambdatest.Record(events.DynamoDBOperationTypeInsert, nil, stream.FromSDK(m), nil, time.Now()))
	}
	return ev
}

type sentMessage struct {
	ID, To, Subject, Text, Order string
}

// messages lists what the mail simulator sent to the address.
func (e *env) messages(t *testing.T, to string) []sentMessage {
	t.Helper()
	resp, err := http.Get(e.mailURL + "/v1/messages?to=" + url.QueryEscape(to))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list struct{ Data []sentMessage }
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/messages: %d, %v", resp.StatusCode, err)
	}
	return list.Data
}

func handle(t *testing.T, s *receipts.Sender, ev events.DynamoDBEvent) []string {
	t.Helper()
	resp, err := s.Handle(t.Context(), ev)
	if err != nil {
		t.Fatalf("Handle error = %v, want failures per record only", err)
	}
	return lambdatest.Failures(resp)
}

// retryMessage is a retry as the test reads it.
type retryMessage struct {
	Tenant  string    `json:"tenant"`
	Job     string    `json:"job"`
	Attempt int       `json:"attempt"`
	GaveUp  time.Time `json:"gave_up"`
	Claim   string    `json:"claim"`
	Message string    `json:"message"`
	Order   string    `json:"order"`
}

// queued receives (and deletes) the messages of the queue at url until it
// has at least n of them, waiting up to wait in all; the SQS messages come
// with them, in the same order.
func (e *env) queued(t *testing.T, url string, n int, wait time.Duration) ([]retryMessage, []events.SQSMessage) {
	t.Helper()
	var out []retryMessage
	var raw []events.SQSMessage
	deadline := time.Now().Add(wait)
	for len(out) < n && time.Now().Before(deadline) {
		for _, m := range sqstest.Receive(t, e.sqs, url, time.Second, false) {
			var r retryMessage
			if err := json.Unmarshal([]byte(aws.ToString(m.Body)), &r); err != nil {
				t.Fatal(err)
			}
			out = append(out, r)
			raw = append(raw, events.SQSMessage{MessageId: aws.ToString(m.MessageId), Body: aws.ToString(m.Body), EventSource: "aws:sqs"})
		}
	}
	if len(out) < n {
		t.Fatalf("messages on %s = %d after %v, want %d: %+v", queue.Name(url), len(out), wait, n, out)
	}
	return out, raw
}

// empty checks that nothing is on (nor delayed in) the queue at url.
func (e *env) empty(t *testing.T, url string) {
	t.Helper()
	if v, f, d := sqstest.Counts(t, e.sqs, url); v != "0" || f != "0" || d != "0" {
		t.Errorf("%s: %s visible, %s in flight, %s delayed; want none", queue.Name(url), v, f, d)
	}
}

// retryDelays lists the retry_in of the "retrying" lines logged so far.
func (e *env) retryDelays(t *testing.T) []time.Duration {
	t.Helper()
	var out []time.Duration
	for _, l := range e.logs.Lines(t) {
		if l["outcome"] == "retrying" {
			d, err := time.ParseDuration(fmt.Sprint(l["retry_in"]))
			if err != nil {
				t.Fatalf("retry_in %v: %v", l["retry_in"], err)
			}
			out = append(out, d)
		}
	}
	return out
}

func retries(t *testing.T, s *receipts.Sender, msgs []events.SQSMessage) []string {
	t.Helper()
	resp, err := s.HandleRetries(t.Context(), events.SQSEvent{Records: msgs})
	if err != nil {
		t.Fatalf("HandleRetries error = %v, want failures per message only", err)
	}
	var ids []string
	for _, f := range resp.BatchItemFailures {
		ids = append(ids, f.ItemIdentifier)
	}
	return ids
}

// TestRedeliverySendsOnce: a job is sent once and recorded on the job and
// the order; every redelivery of its stream record sends nothing, and
// nothing goes to the retry queue.
func TestRedeliverySendsOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := e.sender(t, e.names.ByLogicalID["OrdersTable"], 3)
	j := e.job(t, "once", "ada@example.com")
	ev := event(t, j)
	for i := range 4 {
		if f := handle(t, s, ev); f != nil {
			t.Fatalf("delivery %d: failures %v, want none", i+1, f)
		}
	}
	msgs := e.messages(t, "ada@example.com")
	want := []sentMessage{{To: "ada@example.com", Subject: j.Subject, Text: j.Text, Order: j.Order}}
	if diff := cmp.Diff(want, msgs, cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".ID" }, cmp.Ignore())); diff != "" {
		t.Fatalf("messages sent (-want +got):\n%s", diff)
	}
	got := e.jobNow(t, j)
	if got.State != outbox.Sent || got.Attempts != 1 || got.Message != msgs[0].ID || got.Claim != "" || got.SentAt == 0 || got.ExpiresAt <= got.SentAt {
		t.Errorf("job = %+v, want sent once, with the message and an expiry", got)
	}
	var order struct {
		Receipt       string `dynamodbav:"receipt"`
		ReceiptSentAt int64  `dynamodbav:"receipt_sent_at"`
	}
	e.get(t, e.names.ByLogicalID["OrdersTable"], j.OrderPK, &order)
	if order.Receipt != outbox.ReceiptSent || order.ReceiptSentAt != got.SentAt {
		t.Errorf("order receipt = %q at %d, want sent at %d", order.Receipt, order.ReceiptSentAt, got.SentAt)
	}
	counts := lambdatest.Counts(t, e.metrics.String(), "receipts")
	if diff := cmp.Diff(map[string]int{receipts.MetricSent: 1, receipts.MetricDuplicate: 3}, counts); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}
	e.empty(t, e.retries)
}

// TestConcurrentDeliveries races deliveries of one job from both paths, the
// stream record delivered 8 times at once and retry messages of it 8 times,
// while the mail API fails the first sends: one message, however they
// interleave. An attempt that finds the job claimed by another, or whose
// send failed, hands it to the retry queue, never sends; every chain of
// retries ends once the job is sent.
func TestConcurrentDeliveries(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := e.sender(t, e.names.ByLogicalID["OrdersTable"], 10)
	j := e.job(t, "race", "race+fail2@example.com")
	ev := event(t, j)
	retry := events.SQSMessage{Body: fmt.Sprintf(`{"tenant":"acme","job":%q,"attempt":1}`, j.ID), EventSource: "aws:sqs"}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range 8 {
		wg.Go(func() {
			<-start
			_, _ = s.Handle(t.Context(), ev)
		})
		wg.Go(func() {
			<-start
			m := retry
			m.MessageId = fmt.Sprint("race-", i)
			_, _ = s.HandleRetries(t.Context(), events.SQSEvent{Records: []events.SQSMessage{m}})
		})
	}
	close(start)
	wg.Wait()
	// Drain the chains the race started: each message is one more attempt,
	// with the clock past every claim.
	for round := 0; ; round++ {
		e.advance(6 * time.Second)
		v, f, d := sqstest.Counts(t, e.sqs, e.retries)
		if v == "0" && f == "0" && d == "0" {
			break
		}
		if round == 20 {
			t.Fatalf("retries still queued after %d rounds", round)
		}
		_, raw := e.queued(t, e.retries, 1, 10*time.Second)
		if f := retries(t, s, raw); f != nil {
			t.Fatalf("retry failures %v, want none", f)
		}
	}
	if n := len(e.messages(t, j.To)); n != 1 {
		t.Errorf("messages = %d, want 1", n)
	}
	if got := e.jobNow(t, j); got.State != outbox.Sent {
		t.Errorf("job = %s, want sent", got.State)
	}
	if f := handle(t, s, ev); f != nil {
		t.Errorf("redelivery after the race: failures %v, want none (the job is sent)", f)
	}
	e.empty(t, e.retries)
	e.empty(t, e.dead)
}

// TestOutageDoesNotHoldUpTheBatch: a receipt whose mail is down does not
// fail its record nor wait in the invocation: it goes to the retry queue
// (attempt 1, after about RetryBase), released, and the other receipts of
// the batch are sent at once.
func TestOutageDoesNotHoldUpTheBatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := e.sender(t, e.names.ByLogicalID["OrdersTable"], 3)
	down := e.job(t, "down", "cy@"+simulator.UnavailableDomain)
	flaky := e.job(t, "flaky", "bea+fail1@example.com")
	fine := e.job(t, "fine", "dee@example.com")
	if f := handle(t, s, event(t, down, flaky, fine)); f != nil {
		t.Fatalf("batch item failures %v, want none", f)
	}
	for _, tt := range []struct {
		job   outbox.Job
		state outbox.State
		sent  int
	}{{down, outbox.Failed, 0}, {flaky, outbox.Failed, 0}, {fine, outbox.Sent, 1}} {
		got := e.jobNow(t, tt.job)
		if got.State != tt.state || got.Attempts != 1 {
			t.Errorf("%s: job %s after %d attempts, want %s after 1", tt.job.To, got.State, got.Attempts, tt.state)
		}
		if tt.state == outbox.Failed && (!strings.Contains(got.LastError, "not sent") || got.Claim != "") {
			t.Errorf("%s: job %+v, want released, the outage its last error", tt.job.To, got)
		}
		if n := len(e.messages(t, tt.job.To)); n != tt.sent {
			t.Errorf("%s: messages = %d, want %d", tt.job.To, n, tt.sent)
		}
	}
	for _, l := range e.logs.Lines(t) {
		if l["msg"] == "receipts: record" && l["outcome"] == "retrying" {
			if d, err := time.ParseDuration(fmt.Sprint(l["retry_in"])); err != nil || d < 500*time.Millisecond || d > time.Second {
				t.Errorf("job %v retry_in = %v, want 0.5s to 1s", l["job"], l["retry_in"])
			}
		}
	}
	msgs, raw := e.queued(t, e.retries, 2, 10*time.Second)
	want := map[string]retryMessage{down.ID: {Tenant: "acme", Job: down.ID, Attempt: 1}, flaky.ID: {Tenant: "acme", Job: flaky.ID, Attempt: 1}}
	got := map[string]retryMessage{}
	for _, m := range msgs {
		got[m.Job] = m
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("retries (-want +got):\n%s", diff)
	}
	// The outage that ended: the retry sends it; the other is retried again.
	if f := retries(t, s, raw); f != nil {
		t.Fatalf("retry failures %v, want none", f)
	}
	if n := len(e.messages(t, flaky.To)); n != 1 {
		t.Errorf("%s after its retry: messages = %d, want 1", flaky.To, n)
	}
	next, _ := e.queued(t, e.retries, 1, 10*time.Second)
	if diff := cmp.Diff([]retryMessage{{Tenant: "acme", Job: down.ID, Attempt: 2}}, next); diff != "" {
		t.Errorf("next retry (-want +got):\n%s", diff)
	}
	counts := lambdatest.Counts(t, e.metrics.String(), "receipts")
	if diff := cmp.Diff(map[string]int{receipts.MetricSent: 2, receipts.MetricFailed: 3, receipts.MetricRetried: 3}, counts); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}
}

// TestOutageEndsInDeadLetter: a receipt whose mail stays down is tried
// MaxAttempts times, with growing delays, then sent to the dead-letter
// queue, its job failed with its attempts and last error; the order's
// receipt stays queued. Sent back from there once the outage is over, it
// is tried again from the first attempt, and sent once.
func TestOutageEndsInDeadLetter(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const attempts = 3
	s := e.sender(t, e.names.ByLogicalID["OrdersTable"], attempts)
	// The first four messages to the address fail: three attempts, then
	// one more after the redrive.
	j := e.job(t, "dead", "eve+fail4@example.com")
	if f := handle(t, s, event(t, j)); f != nil {
		t.Fatalf("batch item failures %v, want none", f)
	}
	for attempt := 1; attempt < attempts; attempt++ {
		msgs, raw := e.queued(t, e.retries, 1, 10*time.Second)
		if msgs[0].Attempt != attempt {
			t.Fatalf("retry %+v, want attempt %d", msgs[0], attempt)
		}
		if f := retries(t, s, raw); f != nil {
			t.Fatalf("attempt %d: retry failures %v, want none", attempt+1, f)
		}
	}
	e.empty(t, e.retries)
	dead, raw := e.queued(t, e.dead, 1, 5*time.Second)
	if d := dead[0]; d.Job != j.ID || d.Tenant != "acme" || d.Attempt != attempts || d.GaveUp.IsZero() {
		t.Errorf("dead letter = %+v, want the job after %d attempts, with when it was given up", d, attempts)
	}
	got := e.jobNow(t, j)
	if got.State != outbox.Failed || got.Attempts != attempts || !strings.Contains(got.LastError, "not sent") {
		t.Errorf("job = %s after %d attempts (%q), want failed after %d, the outage its last error", got.State, got.Attempts, got.LastError, attempts)
	}
	var order struct{ Receipt string }
	e.get(t, e.names.ByLogicalID["OrdersTable"], j.OrderPK, &order)
	if order.Receipt != "queued" || len(e.messages(t, j.To)) != 0 {
		t.Errorf("order receipt %q, %d messages; want queued, none", order.Receipt, len(e.messages(t, j.To)))
	}
	// The delays grew: 0.5-1s, then 1-2s.
	if delays := e.retryDelays(t); len(delays) != attempts-1 || delays[0] < 500*time.Millisecond || delays[0] > time.Second ||
		delays[1] < time.Second || delays[1] > 2*time.Second {
		t.Errorf("retry delays = %v, want 0.5-1s then 1-2s", delays)
	}

	// oncectl dlq redrive sends the body back to the retry queue.
	if f := retries(t, s, raw); f != nil {
		t.Fatalf("the redriven dead letter: failures %v, want none", f)
	}
	next, raw := e.queued(t, e.retries, 1, 10*time.Second)
	if next[0].Attempt != 1 || !next[0].GaveUp.IsZero() {
		t.Errorf("retry after the redrive = %+v, want attempt 1 of a new round", next[0])
	}
	if f := retries(t, s, raw); f != nil {
		t.Fatalf("retry failures %v, want none", f)
	}
	if n := len(e.messages(t, j.To)); n != 1 {
		t.Errorf("messages = %d, want 1", n)
	}
	if got := e.jobNow(t, j); got.State != outbox.Sent || got.Attempts != attempts+2 {
		t.Errorf("job = %s after %d attempts, want sent after %d", got.State, got.Attempts, attempts+2)
	}
	counts := lambdatest.Counts(t, e.metrics.String(), "receipts")
	if counts[receipts.MetricDeadLettered] != 1 || counts[receipts.MetricSent] != 1 {
		t.Errorf("metrics = %v, want 1 dead-lettered, 1 sent", counts)
	}
	e.empty(t, e.retries)
	e.empty(t, e.dead)
}

// lostAnswer is a mail API whose answers are lost: it sends, then reports
// the outcome unknown, as a timeout after the send (or a crash) leaves it.
type lostAnswer struct{ receipts.Mailer }

func (l lostAnswer) Send(ctx context.Context, m mail.Message) (string, error) {
	if _, err := l.Mailer.Send(ctx, m); err != nil {
		return "", err
	}
	return "", fmt.Errorf("answer lost: %w", mail.ErrOutcomeUnknown)
}

// TestCrashWindow shows the one window left, and what it costs: the send
// happened and nothing says so (its answer lost; a crash would do the
// same). The job stays claimed; the retry waits for the claim to run out.
// A redelivery within the claim sends nothing; the retry after it sends
// the receipt again: a second copy, never none.
func TestCrashWindow(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	j := e.job(t, "window", "eve@example.com")
	ev := event(t, j)
	s := e.sender(t, e.names.ByLogicalID["OrdersTable"], 3)
	lost, err := receipts.New(receipts.Config{
		DB: e.db, Outbox: e.names.ByLogicalID["OutboxTable"], Orders: e.names.ByLogicalID["OrdersTable"],
		Mail: lostAnswer{mail.New(e.mailURL, nil)}, Retries: sqstest.Sender(t, e.sqs, e.retries), Now: e.clock, ClaimFor: 5 * time.Second,
		Logger: slog.New(slog.NewJSONHandler(e.logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	if f := handle(t, lost, ev); f != nil {
		t.Fatalf("failures = %v, want none (the retry queue has the job)", f)
	}
	got := e.jobNow(t, j)
	if got.State != outbox.Sending || got.Claim == "" {
		t.Fatalf("job = %s (claim %q), want sending under the claim", got.State, got.Claim)
	}
	if delays := e.retryDelays(t); len(delays) != 1 || delays[0] < 4900*time.Millisecond {
		t.Errorf("retry delays = %v, want one, the rest of the 5s claim", delays)
	}
	if f := handle(t, s, ev); f != nil {
		t.Errorf("redelivery within the claim: failures %v, want none", f)
	}
	if n := len(e.messages(t, j.To)); n != 1 {
		t.Fatalf("messages within the claim = %d, want 1", n)
	}
	e.advance(6 * time.Second)
	msgs, raw := e.queued(t, e.retries, 2, 15*time.Second)
	for _, m := range msgs {
		if m.Claim != "" || m.Message != "" {
			t.Errorf("retry %+v carries a send, want none (nothing says what was sent)", m)
		}
	}
	for _, m := range raw { // one after the other: the second finds it sent
		if f := retries(t, s, []events.SQSMessage{m}); f != nil {
			t.Errorf("retries after the claim: failures %v, want none", f)
		}
	}
	if n := len(e.messages(t, j.To)); n != 2 {
		t.Errorf("messages after the claim ran out = %d, want 2 (the window's cost: a second copy)", n)
	}
	if got := e.jobNow(t, j); got.State != outbox.Sent || got.Attempts != 2 {
		t.Errorf("job = %s after %d attempts, want sent after 2", got.State, got.Attempts)
	}
	e.empty(t, e.retries)
}

// TestUnrecordedSend: the mail API accepted the message and its record
// fails (here the orders table is missing), attempt after attempt, well
// past the claim. Every retry carries the send and tries to record it, and
// none sends again: one message, through the dead letter and its redrive,
// which records it on the job and the order.
func TestUnrecordedSend(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const attempts = 3
	j := e.job(t, "unrecorded", "gus@example.com")
	broken := e.sender(t, e.names.ByLogicalID["OrdersTable"]+"-missing", attempts)
	if f := handle(t, broken, event(t, j)); f != nil {
		t.Fatalf("failures = %v, want none (the retry queue has the send)", f)
	}
	sent := e.messages(t, j.To)
	if len(sent) != 1 {
		t.Fatalf("messages = %d, want 1", len(sent))
	}
	claimed := e.jobNow(t, j)
	want := retryMessage{Tenant: "acme", Job: j.ID, Attempt: 1, Claim: claimed.Claim, Message: sent[0].ID, Order: j.OrderPK}
	for attempt := 1; attempt < attempts; attempt++ {
		msgs, raw := e.queued(t, e.retries, 1, 10*time.Second)
		want.Attempt = attempt
		if diff := cmp.Diff([]retryMessage{want}, msgs); diff != "" {
			t.Fatalf("retry %d (-want +got):\n%s", attempt, diff)
		}
		e.advance(10 * time.Second) // the claim runs out: the record is still fenced on it
		if f := retries(t, broken, raw); f != nil {
			t.Fatalf("attempt %d: retry failures %v, want none", attempt+1, f)
		}
	}
	// The delays are the backoff's (0.5-1s, then 1-2s), not the claim's.
	if delays := e.retryDelays(t); len(delays) != attempts-1 || delays[0] < 500*time.Millisecond || delays[0] > time.Second ||
		delays[1] < time.Second || delays[1] > 2*time.Second {
		t.Errorf("retry delays = %v, want 0.5-1s then 1-2s", delays)
	}
	e.empty(t, e.retries)
	dead, raw := e.queued(t, e.dead, 1, 5*time.Second)
	if d := dead[0]; d.Claim != want.Claim || d.Message != want.Message || d.Order != j.OrderPK || d.GaveUp.IsZero() {
		t.Errorf("dead letter = %+v, want the send carried", d)
	}
	if got := e.jobNow(t, j); got.State != outbox.Sending || got.Claim != claimed.Claim || got.Attempts != 1 {
		t.Errorf("job = %s (claim %q) after %d attempts, want sending under the first claim after 1", got.State, got.Claim, got.Attempts)
	}

	// The tables are back. A retry carrying the send onto another order
	// (not built from this job) fails, and records nothing.
	s := e.sender(t, e.names.ByLogicalID["OrdersTable"], attempts)
	forged := events.SQSMessage{MessageId: "forged", Body: fmt.Sprintf(`{"tenant":"acme","job":%q,"attempt":1,"claim":%q,"message":%q,"order":"acme#ord_other"}`,
		j.ID, want.Claim, want.Message)}
	if diff := cmp.Diff([]string{"forged"}, retries(t, s, []events.SQSMessage{forged})); diff != "" {
		t.Errorf("a send carried onto another order: failures (-want +got):\n%s", diff)
	}
	if got := e.jobNow(t, j); got.State != outbox.Sending || got.Claim != claimed.Claim {
		t.Errorf("job after the forged retry = %s (claim %q), want sending under the first claim", got.State, got.Claim)
	}
	// The dead letter is redriven.
	if f := retries(t, s, raw); f != nil {
		t.Fatalf("the redriven dead letter: failures %v, want none", f)
	}
	if n := len(e.messages(t, j.To)); n != 1 {
		t.Errorf("messages = %d, want 1", n)
	}
	got := e.jobNow(t, j)
	if got.State != outbox.Sent || got.Message != want.Message || got.Claim != "" || got.Attempts != 1 {
		t.Errorf("job = %+v, want sent with message %s after 1 attempt", got, want.Message)
	}
	var order struct{ Receipt string }
	e.get(t, e.names.ByLogicalID["OrdersTable"], j.OrderPK, &order)
	if order.Receipt != "sent" {
		t.Errorf("order receipt = %q, want sent", order.Receipt)
	}
	// The same retry again (a redelivery) finds its own record: a
	// duplicate, and nothing sent.
	if f := retries(t, s, raw); f != nil {
		t.Fatalf("the retry again: failures %v, want none", f)
	}
	if n := len(e.messages(t, j.To)); n != 1 {
		t.Errorf("messages after the retry again = %d, want 1", n)
	}
	counts := lambdatest.Counts(t, e.metrics.String(), "receipts")
	if diff := cmp.Diff(map[string]int{receipts.MetricSent: 1, receipts.MetricDuplicate: 1, receipts.MetricRetried: attempts - 1, receipts.MetricDeadLettered: 1}, counts); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}
	e.empty(t, e.retries)
	e.empty(t, e.dead)
}

// TestUnrecordedSendOrderMissing: the send's record fails because the
// order item is gone, which no retry will find. The retries carry the send
// and never send again; the chain ends in the dead-letter queue.
func TestUnrecordedSendOrderMissing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	j := e.job(t, "noorder", "ivy@example.com")
	if _, err := e.db.DeleteItem(t.Context(), &dynamodb.DeleteItemInput{
		TableName: aws.String(e.names.ByLogicalID["OrdersTable"]), Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: j.OrderPK}},
	}); err != nil {
		t.Fatal(err)
	}
	s := e.sender(t, e.names.ByLogicalID["OrdersTable"], 2)
	if f := handle(t, s, event(t, j)); f != nil {
		t.Fatalf("failures = %v, want none (the retry queue has the send)", f)
	}
	msgs, raw := e.queued(t, e.retries, 1, 10*time.Second)
	if msgs[0].Claim == "" || msgs[0].Order != j.OrderPK {
		t.Fatalf("retry = %+v, want the send carried", msgs[0])
	}
	e.advance(10 * time.Second)
	if f := retries(t, s, raw); f != nil {
		t.Fatalf("retry failures %v, want none (dead-lettered)", f)
	}
	if dead, _ := e.queued(t, e.dead, 1, 5*time.Second); dead[0].Claim != msgs[0].Claim {
		t.Errorf("dead letter = %+v, want the send carried", dead[0])
	}
	if n := len(e.messages(t, j.To)); n != 1 {
		t.Errorf("messages = %d, want 1", n)
	}
	e.empty(t, e.retries)
}

// TestUnrecordedSendClaimLost: while a send waits to be recorded, its claim
// runs out and a redelivery of the stream record claims the job and sends
// a copy of its own (the cost of the duplicate delivery). The carried send
// then finds the claim gone: a duplicate, not retried, not failed.
func TestUnrecordedSendClaimLost(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	j := e.job(t, "claimlost", "hal@example.com")
	ev := event(t, j)
	broken := e.sender(t, e.names.ByLogicalID["OrdersTable"]+"-missing", 3)
	if f := handle(t, broken, ev); f != nil {
		t.Fatalf("failures = %v, want none", f)
	}
	_, raw := e.queued(t, e.retries, 1, 10*time.Second)
	e.advance(6 * time.Second)
	s := e.sender(t, e.names.ByLogicalID["OrdersTable"], 3)
	if f := handle(t, s, ev); f != nil {
		t.Fatalf("redelivery after the claim: failures %v, want none", f)
	}
	if f := retries(t, s, raw); f != nil {
		t.Fatalf("the carried send: failures %v, want none", f)
	}
	msgs := e.messages(t, j.To)
	if len(msgs) != 2 {
		t.Fatalf("messages = %d, want 2 (the redelivery's copy)", len(msgs))
	}
	if got := e.jobNow(t, j); got.State != outbox.Sent || got.Message != msgs[1].ID {
		t.Errorf("job = %s with message %s, want sent with the redelivery's %s", got.State, got.Message, msgs[1].ID)
	}
	counts := lambdatest.Counts(t, e.metrics.String(), "receipts")
	if counts[receipts.MetricDuplicate] != 1 || counts[receipts.MetricSent] != 1 {
		t.Errorf("metrics = %v, want 1 sent, 1 duplicate", counts)
	}
	e.empty(t, e.retries)
}

// TestRefusalFails: a message the mail API refuses (a 4xx other than 429)
// is no outage: retrying with backoff does not cure it. Its record fails
// (the stream mapping's retries, then its on-failure queue), the job
// released with the refusal; a retry of it fails (the queue's redrive
// policy).
func TestRefusalFails(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := e.sender(t, e.names.ByLogicalID["OrdersTable"], 3)
	j := e.job(t, "refused", "not-an-address")
	ev := event(t, j)
	if diff := cmp.Diff([]string{ev.Records[0].Change.SequenceNumber}, handle(t, s, ev)); diff != "" {
		t.Errorf("batch item failures (-want +got):\n%s", diff)
	}
	if got := e.jobNow(t, j); got.State != outbox.Failed || !strings.Contains(got.LastError, "400") {
		t.Errorf("job = %s (%q), want failed with the refusal", got.State, got.LastError)
	}
	m := events.SQSMessage{MessageId: "m1", Body: fmt.Sprintf(`{"tenant":"acme","job":%q,"attempt":1}`, j.ID)}
	if diff := cmp.Diff([]string{"m1"}, retries(t, s, []events.SQSMessage{m})); diff != "" {
		t.Errorf("retry failures (-want +got):\n%s", diff)
	}
	e.empty(t, e.retries)
}

// TestRetryMessages: what the retry queue may hold besides a receipt to
// send.
func TestRetryMessages(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := e.sender(t, e.names.ByLogicalID["OrdersTable"], 3)
	sent := e.job(t, "sent", "fay@example.com")
	if f := handle(t, s, event(t, sent)); f != nil {
		t.Fatal(f)
	}
	for _, tt := range []struct {
		name, body string
		fails      bool
	}{
		{"not JSON", `nope`, true},
		{"no job", `{"tenant":"acme","attempt":1}`, true},
		{"not a job ID", `{"tenant":"acme","job":"rcpt_1","attempt":1}`, true},
		{"no attempt", fmt.Sprintf(`{"tenant":"acme","job":%q}`, sent.ID), true},
		{"a send without its message", fmt.Sprintf(`{"tenant":"acme","job":%q,"attempt":1,"claim":"c","order":%q}`, sent.ID, sent.OrderPK), true},
		{"a send without its order", fmt.Sprintf(`{"tenant":"acme","job":%q,"attempt":1,"claim":"c","message":"msg_1"}`, sent.ID), true},
		{"a send on another tenant's order", fmt.Sprintf(`{"tenant":"acme","job":%q,"attempt":1,"claim":"c","message":"msg_1","order":"globex#ord_1"}`, sent.ID), true},
		{"a job not in the outbox: nothing to retry", fmt.Sprintf(`{"tenant":"globex","job":%q,"attempt":1}`, sent.ID), false},
		{"a send on a job sent since: a duplicate", fmt.Sprintf(`{"tenant":"acme","job":%q,"attempt":1,"claim":"c","message":"msg_1","order":%q}`, sent.ID, sent.OrderPK), false},
		{"a job sent since: nothing to do", fmt.Sprintf(`{"tenant":"acme","job":%q,"attempt":2}`, sent.ID), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := retries(t, s, []events.SQSMessage{{MessageId: "m", Body: tt.body}})
			if (got != nil) != tt.fails {
				t.Errorf("failures = %v, want failed %v", got, tt.fails)
			}
		})
	}
	if n := len(e.messages(t, sent.To)); n != 1 {
		t.Errorf("messages = %d, want 1", n)
	}
	e.empty(t, e.retries)
	e.empty(t, e.dead)
}

// TestRetryQueueDown: a receipt whose send failed and whose retry cannot
// be sent fails its record, so that the stream tries again.
func TestRetryQueueDown(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s, err := receipts.New(receipts.Config{
		DB: e.db, Outbox: e.names.ByLogicalID["OutboxTable"], Orders: e.names.ByLogicalID["OrdersTable"], Mail: mail.New(e.mailURL, nil),
		Retries: sqstest.Sender(t, e.sqs, e.retries+"-missing"), Now: e.clock,
	})
	if err != nil {
		t.Fatal(err)
	}
	j := e.job(t, "noqueue", "cy@"+simulator.UnavailableDomain)
	ev := event(t, j)
	if diff := cmp.Diff([]string{ev.Records[0].Change.SequenceNumber}, handle(t, s, ev)); diff != "" {
		t.Errorf("batch item failures (-want +got):\n%s", diff)
	}
	if got := e.jobNow(t, j); got.State != outbox.Failed {
		t.Errorf("job = %s, want failed (released for the stream's retry)", got.State)
	}
}

// TestIgnoresOtherRecords: what the filter would not deliver is passed over.
func TestIgnoresOtherRecords(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := e.sender(t, e.names.ByLogicalID["OrdersTable"], 3)
	j := e.job(t, "other", "fay@example.com")
	m, err := attributevalue.MarshalMap(j)
	if err != nil {
		t.Fatal(err)
	}
	img := stream.FromSDK(m)
	ev := events.DynamoDBEvent{Records: []events.DynamoDBEventRecord{
		lambdatest.Record(events.DynamoDBOperationTypeModify, img, img, nil, time.Now()),
		lambdatest.Record(events.DynamoDBOperationTypeInsert, nil, stream.FromSDK(map[string]types.AttributeValue{
			"pk": &types.AttributeValueMemberS{Value: "acme#x"}, "kind": &types.AttributeValueMemberS{Value: "invoice"},
		}), nil, time.Now()),
	}}
	if f := handle(t, s, ev); f != nil {
		t.Errorf("failures = %v, want none", f)
	}
	if n := len(e.messages(t, j.To)); n != 0 {
		t.Errorf("messages = %d, want 0", n)
	}
	poison := ev
	poison.Records = []events.DynamoDBEventRecord{lambdatest.Record(events.DynamoDBOperationTypeInsert, nil, stream.FromSDK(map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: "acme#y"}, "kind": &types.AttributeValueMemberS{Value: "receipt"},
	}), nil, time.Now())}
	if f := handle(t, s, poison); len(f) != 1 {
		t.Errorf("an undecodable receipt job: failures %v, want it", f)
	}
	e.empty(t, e.retries)
}

func TestNew(t *testing.T) {
	t.Parallel()
	_, err := receipts.New(receipts.Config{})
	if err == nil || !strings.Contains(err.Error(), "DB") || !strings.Contains(err.Error(), "Mail") || !strings.Contains(err.Error(), "Retries") {
		t.Errorf("New(zero Config) = %v, want an error naming every missing dependency", err)
	}
}
