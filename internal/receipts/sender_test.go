package receipts_test

import (
	"encoding/json"
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
	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/idempotency/stream"
	"github.com/oncehq/once/internal/dynamotest"
	"github.com/oncehq/once/internal/lambdatest"
	"github.com/oncehq/once/internal/mail"
	"github.com/oncehq/once/internal/metrics"
	"github.com/oncehq/once/internal/outbox"
	"github.com/oncehq/once/internal/provider/simulator"
	"github.com/oncehq/once/internal/receipts"
)

// env is an outbox and an orders table of their own, the mail simulator
// over HTTP, and a settable clock.
type env struct {
	db      *dynamodb.Client
	names   dynamotest.Names
	mailURL string
	mu      sync.Mutex
	now     time.Time
	metrics *lambdatest.Buffer
}

func newEnv(t *testing.T) *env {
	t.Helper()
	db := dynamotest.Client(t)
	names := dynamotest.Tables(t, db)
	srv := httptest.NewServer(simulator.New(simulator.Options{DB: db, Table: names.ByLogicalID["ProviderTable"]}))
	t.Cleanup(srv.Close)
	return &env{db: db, names: names, mailURL: srv.URL, now: time.Now(), metrics: &lambdatest.Buffer{}}
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

// sender returns a Sender on the env's tables (orders on ordersTable) that
// tries each job three times, 10ms apart at first.
func (e *env) sender(t *testing.T, ordersTable string) *receipts.Sender {
	t.Helper()
	s, err := receipts.New(receipts.Config{
		DB: e.db, Outbox: e.names.ByLogicalID["OutboxTable"], Orders: ordersTable,
		Mail:    mail.New(e.mailURL, &http.Client{Timeout: 2 * time.Second}),
		Metrics: metrics.New(e.metrics, "once", map[string]string{"Service": "receipts"}),
		Now:     e.clock, Tries: 3, Backoff: 10 * time.Millisecond, ClaimFor: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// job writes a queued receipt job to the outbox, and its paid order, and
// returns the job.
func (e *env) job(t *testing.T, name, to string) outbox.Job {
	t.Helper()
	order := "ord_" + name
	j := outbox.Job{
		PK: "acme#rcpt_" + name, Kind: outbox.KindReceipt, ID: "rcpt_" + name, Tenant: "acme",
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

// TestRedeliverySendsOnce: a job is sent once and recorded on the job and
// the order; every redelivery of its stream record sends nothing.
func TestRedeliverySendsOnce(t *testing.T) {
	e := newEnv(t)
	s := e.sender(t, e.names.ByLogicalID["OrdersTable"])
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
	var got outbox.Job
	e.get(t, e.names.ByLogicalID["OutboxTable"], j.PK, &got)
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
	if counts[receipts.MetricSent] != 1 || counts[receipts.MetricDuplicate] != 3 {
		t.Errorf("metrics = %v, want 1 sent and 3 duplicates", counts)
	}
}

// TestConcurrentDeliveries races deliveries of one stream record: one
// message. A delivery that finds the job claimed by another fails its
// record (for a later redelivery), never sends.
func TestConcurrentDeliveries(t *testing.T) {
	e := newEnv(t)
	s := e.sender(t, e.names.ByLogicalID["OrdersTable"])
	j := e.job(t, "race", "race@example.com")
	ev := event(t, j)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 8 {
		wg.Go(func() {
			<-start
			_, _ = s.Handle(t.Context(), ev)
		})
	}
	close(start)
	wg.Wait()
	if f := handle(t, s, ev); f != nil {
		t.Errorf("redelivery after the race: failures %v, want none (the job is sent)", f)
	}
	if n := len(e.messages(t, "race@example.com")); n != 1 {
		t.Errorf("messages = %d, want 1", n)
	}
}

// TestOutage: a mail outage that ends is retried with backoff in the
// invocation and sends once; one that does not end fails its record after
// Tries attempts, without holding back the other receipts of its batch.
func TestOutage(t *testing.T) {
	e := newEnv(t)
	s := e.sender(t, e.names.ByLogicalID["OrdersTable"])
	flaky := e.job(t, "flaky", "bea+fail2@example.com")
	down := e.job(t, "down", "cy@"+simulator.UnavailableDomain)
	fine := e.job(t, "fine", "dee@example.com")
	ev := event(t, down, flaky, fine)
	failures := handle(t, s, ev)
	if diff := cmp.Diff([]string{ev.Records[0].Change.SequenceNumber}, failures); diff != "" {
		t.Fatalf("batch item failures (-want +got):\n%s", diff)
	}
	for _, tt := range []struct {
		job      outbox.Job
		state    outbox.State
		attempts int
		sent     int
	}{
		{flaky, outbox.Sent, 3, 1},
		{fine, outbox.Sent, 1, 1},
		{down, outbox.Failed, 3, 0},
	} {
		var got outbox.Job
		e.get(t, e.names.ByLogicalID["OutboxTable"], tt.job.PK, &got)
		if got.State != tt.state || got.Attempts != tt.attempts {
			t.Errorf("%s: job %s after %d attempts, want %s after %d", tt.job.To, got.State, got.Attempts, tt.state, tt.attempts)
		}
		if tt.state == outbox.Failed && !strings.Contains(got.LastError, "not sent") {
			t.Errorf("%s: last_error = %q, want the outage", tt.job.To, got.LastError)
		}
		if n := len(e.messages(t, tt.job.To)); n != tt.sent {
			t.Errorf("%s: messages = %d, want %d", tt.job.To, n, tt.sent)
		}
	}
	// Lambda redelivers from the failed record on: the sent ones are
	// skipped, the failing one is tried again.
	if diff := cmp.Diff([]string{ev.Records[0].Change.SequenceNumber}, handle(t, s, ev)); diff != "" {
		t.Errorf("redelivery failures (-want +got):\n%s", diff)
	}
	for _, to := range []string{flaky.To, fine.To} {
		if n := len(e.messages(t, to)); n != 1 {
			t.Errorf("%s after the redelivery: messages = %d, want 1", to, n)
		}
	}
	var got outbox.Job
	e.get(t, e.names.ByLogicalID["OutboxTable"], down.PK, &got)
	if got.Attempts != 6 {
		t.Errorf("failing job attempts = %d, want 6", got.Attempts)
	}
}

// TestCrashWindow shows the one window left, and what it costs: the send
// happened, its record did not (here the orders table is missing; a crash
// would do the same). A redelivery during the claim sends nothing; one after
// the claim has run out sends the receipt again: a second copy, never none.
func TestCrashWindow(t *testing.T) {
	e := newEnv(t)
	j := e.job(t, "window", "eve@example.com")
	ev := event(t, j)
	broken := e.sender(t, e.names.ByLogicalID["OrdersTable"]+"-missing")
	if f := handle(t, broken, ev); len(f) != 1 {
		t.Fatalf("failures = %v, want the record (its send is unrecorded)", f)
	}
	var got outbox.Job
	e.get(t, e.names.ByLogicalID["OutboxTable"], j.PK, &got)
	if got.State != outbox.Sending || got.Claim == "" {
		t.Fatalf("job = %s (claim %q), want sending under the claim", got.State, got.Claim)
	}
	s := e.sender(t, e.names.ByLogicalID["OrdersTable"])
	if f := handle(t, s, ev); len(f) != 1 {
		t.Errorf("redelivery within the claim: failures %v, want the record (claimed)", f)
	}
	if n := len(e.messages(t, j.To)); n != 1 {
		t.Fatalf("messages within the claim = %d, want 1", n)
	}
	e.advance(6 * time.Second)
	if f := handle(t, s, ev); f != nil {
		t.Errorf("redelivery after the claim: failures %v, want none", f)
	}
	if n := len(e.messages(t, j.To)); n != 2 {
		t.Errorf("messages after the claim ran out = %d, want 2 (the window's cost: a second copy)", n)
	}
	e.get(t, e.names.ByLogicalID["OutboxTable"], j.PK, &got)
	if got.State != outbox.Sent || got.Attempts != 2 {
		t.Errorf("job = %s after %d attempts, want sent after 2", got.State, got.Attempts)
	}
}

// TestIgnoresOtherRecords: what the filter would not deliver is passed over.
func TestIgnoresOtherRecords(t *testing.T) {
	e := newEnv(t)
	s := e.sender(t, e.names.ByLogicalID["OrdersTable"])
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
}

func TestNew(t *testing.T) {
	_, err := receipts.New(receipts.Config{})
	if err == nil || !strings.Contains(err.Error(), "DB") || !strings.Contains(err.Error(), "Mail") {
		t.Errorf("New(zero Config) = %v, want an error naming every missing dependency", err)
	}
}
