package events_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/stream"
	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/dynamotest"
	"github.com/oncehq/once/internal/orders"
	"github.com/oncehq/once/internal/outbox"
	"github.com/oncehq/once/internal/sqstest"
)

// runCreateOrder: a paid order, its record COMPLETED at finished, one
// charge, its receipt job queued in the outbox.
func runCreateOrder(t *testing.T, s *stack, file string) {
	got := s.api(t, file)
	if got.StatusCode != http.StatusCreated {
		t.Fatalf("status = %d %s, want 201", got.StatusCode, got.Body)
	}
	req := apiRequestOf(t, file)
	key := idempotency.NewKey(req.tenant, req.key)
	fp, err := idempotency.RequestFingerprint(http.MethodPost, orders.RouteCreate, []byte(req.body))
	if err != nil {
		t.Fatal(err)
	}
	id := orders.ID(key, fp)
	var body struct{ ID, Object, Status, Charge, Receipt string }
	if err := json.Unmarshal([]byte(got.Body), &body); err != nil {
		t.Fatal(err)
	}
	if body.ID != id || body.Object != "order" || body.Status != "paid" || body.Receipt != "queued" || got.header("Location") != "/v1/orders/"+id {
		t.Errorf("answer = %s (Location %q), want order %s paid, receipt queued", got.Body, got.header("Location"), id)
	}
	forward := key.Forward(fp + "\x00" + orders.PointChargeCreated)
	if c, err := s.provider.Lookup(t.Context(), forward); err != nil || c.ID != body.Charge {
		t.Errorf("provider charge under the phase's forwarded key = %+v, %v; want %s", c, err, body.Charge)
	}
	if n := s.charges(t, forward); n != 1 {
		t.Errorf("provider charges = %d, want 1", n)
	}
	checkRecordAnswer(t, s, key, got)
	o := s.order(t, req.tenant, id)
	if o.Status != orders.StatusPaid || o.RecoveryPoint != orders.PointFinished || o.Receipt != orders.ReceiptQueued || o.Charge != body.Charge {
		t.Errorf("order = %+v, want paid, finished, receipt queued", o)
	}
	var job outbox.Job
	if err := attributevalue.UnmarshalMap(s.item(t, s.names.ByLogicalID["OutboxTable"], orders.PK(req.tenant, orders.JobID(id))), &job); err != nil {
		t.Fatal(err)
	}
	if job.State != outbox.Queued || job.To != o.Email || job.OrderPK != o.PK {
		t.Errorf("receipt job = %+v, want queued to %s for %s", job, o.Email, o.PK)
	}
}

// runGetOrder: GET shows the order that api-create-order.json created, as it
// stands; another tenant gets 404.
func runGetOrder(t *testing.T, s *stack, file string) {
	if r := s.api(t, "api-create-order.json"); r.StatusCode != http.StatusCreated {
		t.Fatalf("create = %d %s", r.StatusCode, r.Body)
	}
	got := s.api(t, file)
	if got.StatusCode != http.StatusOK || got.header("Cache-Control") != "no-store" {
		t.Fatalf("GET = %d %s (Cache-Control %q), want 200, no-store", got.StatusCode, got.Body, got.header("Cache-Control"))
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(got.Body), &v); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"status": "paid", "recovery_point": "finished", "receipt": "queued", "receipt_sent_at": nil, "object": "order"}
	for k, w := range want {
		if !cmp.Equal(v[k], w) {
			t.Errorf("GET %s = %v, want %v", k, v[k], w)
		}
	}
}

// runReconcileOrder: an order request abandoned at order_created (its order
// item written with the reservation), restored UNKNOWN by the sweeper: the
// reconciler resumes it through the orders Resolver, which charges the
// provider under the phase's forwarded key and finishes the order.
func runReconcileOrder(t *testing.T, s *stack, file string) {
	rec := recordImage(t, streamEvent(t, file).Records[0].Change.NewImage)
	if rec.Status != idempotency.StatusUnknown || rec.Point != orders.PointOrderCreated {
		t.Fatalf("%s: new image %s at %q, want UNKNOWN at order_created", file, rec.Status, rec.Point)
	}
	req, err := orders.Decode(rec.Request)
	if err != nil {
		t.Fatal(err)
	}
	id := rec.Data["order"]
	hold := orders.New(rec.Key.Tenant, id, req, rec.CreatedAt)
	s.put(t, s.names.ByLogicalID["OrdersTable"], hold)
	if resp := s.stream(t, reconcilerFunction, file); len(resp.BatchItemFailures) != 0 {
		t.Fatalf("batch item failures = %v, want none", resp.BatchItemFailures)
	}
	if resp := s.redeliver(t, reconcilerFunction, file); len(resp.BatchItemFailures) != 0 {
		t.Fatalf("redelivery: batch item failures = %v, want none (the record is finished)", resp.BatchItemFailures)
	}
	got, err := s.store().Get(t.Context(), rec.Key)
	if err != nil || got.Status != idempotency.StatusCompleted || got.Response == nil || got.Response.Status != http.StatusCreated {
		t.Fatalf("record = %s %+v, %v; want COMPLETED with the order's 201", got.Status, got.Response, err)
	}
	forward := rec.Key.Forward(rec.Fingerprint + "\x00" + orders.PointChargeCreated)
	if n := s.charges(t, forward); n != 1 {
		t.Errorf("provider charges = %d, want 1", n)
	}
	o := s.order(t, rec.Key.Tenant, id)
	if o.Status != orders.StatusPaid || o.RecoveryPoint != orders.PointFinished || o.Receipt != orders.ReceiptQueued {
		t.Errorf("order = %+v, want paid, finished, receipt queued", o)
	}
	if !strings.Contains(string(got.Response.Body), `"charge":"`+o.Charge+`"`) {
		t.Errorf("stored answer %s, want the order's charge %s", got.Response.Body, o.Charge)
	}
	checkMetrics(t, s, reconcilerFunction, []string{`"reconcile_resolved":1`}, []string{"reconcile_failed"})
}

// runReceiptJob: the receipt is sent once, recorded on the job and the
// order; a redelivery sends nothing.
func runReceiptJob(t *testing.T, s *stack, file string) {
	job := jobImage(t, streamEvent(t, file).Records[0])
	s.paidOrder(t, job)
	if resp := s.stream(t, receiptsFunction, file); len(resp.BatchItemFailures) != 0 {
		t.Fatalf("batch item failures = %v, want none", resp.BatchItemFailures)
	}
	if resp := s.redeliver(t, receiptsFunction, file); len(resp.BatchItemFailures) != 0 {
		t.Fatalf("redelivery: batch item failures = %v, want none (the job is sent)", resp.BatchItemFailures)
	}
	if n := s.messages(t, job.To); n != 1 {
		t.Errorf("messages sent to %s = %d, want 1", job.To, n)
	}
	var o orders.Order
	if err := attributevalue.UnmarshalMap(s.item(t, s.names.ByLogicalID["OrdersTable"], job.OrderPK), &o); err != nil {
		t.Fatal(err)
	}
	var sent outbox.Job
	if err := attributevalue.UnmarshalMap(s.item(t, s.names.ByLogicalID["OutboxTable"], job.PK), &sent); err != nil {
		t.Fatal(err)
	}
	if o.Receipt != orders.ReceiptSent || o.ReceiptSentAt == 0 || sent.State != outbox.Sent || sent.Attempts != 1 || sent.SentAt != o.ReceiptSentAt {
		t.Errorf("order receipt %q at %d, job %s after %d attempts at %d; want sent once, at one time", o.Receipt, o.ReceiptSentAt, sent.State, sent.Attempts, sent.SentAt)
	}
	checkMetrics(t, s, receiptsFunction, []string{`"receipt_sent":1`, `"receipt_duplicate":1`}, nil)
}

// runReceiptOutage: a receipt whose mail API is down does not fail its
// record: it goes to the receipt retry queue (attempt 1), the job failed
// with its error; the other receipt of the batch is sent all the same.
func runReceiptOutage(t *testing.T, s *stack, file string) {
	recs := streamEvent(t, file).Records
	down, fine := jobImage(t, recs[0]), jobImage(t, recs[1])
	for _, j := range []outbox.Job{down, fine} {
		s.paidOrder(t, j)
	}
	if resp := s.stream(t, receiptsFunction, file); len(resp.BatchItemFailures) != 0 {
		t.Errorf("batch item failures = %v, want none (the outage goes to the retry queue)", resp.BatchItemFailures)
	}
	if n := s.messages(t, fine.To); n != 1 {
		t.Errorf("messages to %s = %d, want 1", fine.To, n)
	}
	if n := s.messages(t, down.To); n != 0 {
		t.Errorf("messages to %s = %d, want 0", down.To, n)
	}
	if got := s.job(t, down); got.State != outbox.Failed || got.Attempts != 1 || got.LastError == "" {
		t.Errorf("job = %s after %d attempts (%q), want failed after 1 with its last error", got.State, got.Attempts, got.LastError)
	}
	want := []receiptRetry{{Tenant: down.Tenant, Job: down.ID, Attempt: 1}}
	if diff := cmp.Diff(want, s.queued(t, s.receiptRetryQueue, 5*time.Second)); diff != "" {
		t.Errorf("receipt retry queue (-want +got):\n%s", diff)
	}
	checkMetrics(t, s, receiptsFunction, []string{`"receipt_sent":1`, `"receipt_failed":1`, `"receipt_retried":1`}, nil)
}

// runResenderRetry: a receipt whose mail failed, tried again from the
// retry queue (the receipt of receipts-receipt-job.json, failed once): sent
// once; the message delivered again sends nothing.
func runResenderRetry(t *testing.T, s *stack, file string) {
	job := jobImage(t, streamEvent(t, "receipts-receipt-job.json").Records[0])
	retry := receiptRetryIn(t, file)
	if retry.Job != job.ID || retry.Tenant != job.Tenant {
		t.Fatalf("%s retries %+v, want the job of receipts-receipt-job.json", file, retry)
	}
	job.State, job.Attempts, job.LastError = outbox.Failed, retry.Attempt, "mail: send: not sent: status 503: mail_unavailable"
	s.put(t, s.names.ByLogicalID["OutboxTable"], job)
	s.paidOrder(t, job)
	for i := range 2 {
		if resp := s.sqsEvent(t, resenderFunction, file); len(resp.BatchItemFailures) != 0 {
			t.Fatalf("delivery %d: batch item failures = %v, want none", i+1, resp.BatchItemFailures)
		}
	}
	if n := s.messages(t, job.To); n != 1 {
		t.Errorf("messages sent to %s = %d, want 1", job.To, n)
	}
	if got := s.job(t, job); got.State != outbox.Sent || got.Attempts != retry.Attempt+1 {
		t.Errorf("job = %s after %d attempts, want sent after %d", got.State, got.Attempts, retry.Attempt+1)
	}
	if o := s.order(t, job.Tenant, job.Order); o.Receipt != orders.ReceiptSent {
		t.Errorf("order receipt = %q, want sent", o.Receipt)
	}
	if got := s.queued(t, s.receiptRetryQueue, 0); len(got) != 0 {
		t.Errorf("retries sent = %+v, want none", got)
	}
	checkMetrics(t, s, resenderFunction, []string{`"receipt_sent":1`, `"receipt_duplicate":1`}, []string{"receipt_retried"})
}

// runResenderDeadLetter: the last attempt at a receipt whose mail is still
// down (the first job of receipts-batch-with-outage.json, tried
// ONCE_RECEIPT_ATTEMPTS - 1 times): it fails too, and the resender gives
// up: the retry goes to the dead-letter queue, whose alarm fires, with the
// time it gave up; no more retries; the job failed after every attempt.
func runResenderDeadLetter(t *testing.T, s *stack, file string) {
	job := jobImage(t, streamEvent(t, "receipts-batch-with-outage.json").Records[0])
	retry := receiptRetryIn(t, file)
	if retry.Job != job.ID || retry.Attempt != config.DefaultReceiptAttempts-1 {
		t.Fatalf("%s retries %+v, want attempt %d of the down job of receipts-batch-with-outage.json", file, retry, config.DefaultReceiptAttempts-1)
	}
	job.State, job.Attempts = outbox.Failed, retry.Attempt
	s.put(t, s.names.ByLogicalID["OutboxTable"], job)
	s.paidOrder(t, job)
	if resp := s.sqsEvent(t, resenderFunction, file); len(resp.BatchItemFailures) != 0 {
		t.Fatalf("batch item failures = %v, want none", resp.BatchItemFailures)
	}
	dead := s.queued(t, s.receiptDLQ, 5*time.Second)
	if len(dead) != 1 || dead[0].Job != job.ID || dead[0].Attempt != config.DefaultReceiptAttempts || dead[0].GaveUp.IsZero() {
		t.Errorf("dead letters = %+v, want the job after %d attempts, given up", dead, config.DefaultReceiptAttempts)
	}
	if got := s.queued(t, s.receiptRetryQueue, 0); len(got) != 0 {
		t.Errorf("retries sent = %+v, want none", got)
	}
	if got := s.job(t, job); got.State != outbox.Failed || got.Attempts != config.DefaultReceiptAttempts {
		t.Errorf("job = %s after %d attempts, want failed after %d", got.State, got.Attempts, config.DefaultReceiptAttempts)
	}
	if n := s.messages(t, job.To); n != 0 {
		t.Errorf("messages to %s = %d, want 0", job.To, n)
	}
	checkMetrics(t, s, resenderFunction, []string{`"receipt_dead_lettered":1`, `"receipt_failed":1`}, []string{"receipt_sent", "receipt_retried"})
}

// receiptRetry is a message of the receipt retry queue or its dead-letter
// queue.
type receiptRetry struct {
	Tenant  string    `json:"tenant"`
	Job     string    `json:"job"`
	Attempt int       `json:"attempt"`
	GaveUp  time.Time `json:"gave_up"`
}

// receiptRetryIn decodes the retry of an SQS event file.
func receiptRetryIn(t *testing.T, file string) receiptRetry {
	t.Helper()
	var ev events.SQSEvent
	if err := json.Unmarshal(readFile(t, file), &ev); err != nil {
		t.Fatal(err)
	}
	var r receiptRetry
	if len(ev.Records) != 1 || json.Unmarshal([]byte(ev.Records[0].Body), &r) != nil {
		t.Fatalf("%s: want one receipt retry", file)
	}
	return r
}

// queued receives (and deletes) the messages of the queue at url,
// waiting up to wait for them (delayed ones included).
func (s *stack) queued(t *testing.T, url string, wait time.Duration) []receiptRetry {
	t.Helper()
	var out []receiptRetry
	deadline := time.Now().Add(wait)
	for {
		for _, m := range sqstest.Receive(t, s.sqs, url, 0, false) {
			var r receiptRetry
			if err := json.Unmarshal([]byte(aws.ToString(m.Body)), &r); err != nil {
				t.Fatal(err)
			}
			out = append(out, r)
		}
		if len(out) > 0 || !time.Now().Before(deadline) {
			return out
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// paidOrder writes the paid order of job, its receipt queued.
func (s *stack) paidOrder(t *testing.T, job outbox.Job) {
	t.Helper()
	s.put(t, s.names.ByLogicalID["OrdersTable"], map[string]any{"pk": job.OrderPK, "id": job.Order, "tenant": job.Tenant, "status": "paid",
		"recovery_point": "finished", "receipt": "queued", "email": job.To})
}

// job reads job as it stands in the outbox.
func (s *stack) job(t *testing.T, job outbox.Job) outbox.Job {
	t.Helper()
	var got outbox.Job
	if err := attributevalue.UnmarshalMap(s.item(t, s.names.ByLogicalID["OutboxTable"], job.PK), &got); err != nil {
		t.Fatal(err)
	}
	return got
}

// checkJobImage checks a receipt job image: the item the orders flow
// writes (orders.NewReceiptJob), for its order.
func checkJobImage(t *testing.T, where string, img map[string]events.DynamoDBAttributeValue) {
	t.Helper()
	item := stream.ToSDK(img)
	var j outbox.Job
	if err := attributevalue.UnmarshalMap(item, &j); err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	if j.Kind != outbox.KindReceipt || j.ID != orders.JobID(j.Order) || j.PK != orders.PK(j.Tenant, j.ID) ||
		j.OrderPK != orders.PK(j.Tenant, j.Order) || !orders.ValidID(j.Order) || j.State != outbox.Queued {
		t.Errorf("%s: job %+v, want a queued receipt job keyed by its order", where, j)
	}
	back, err := attributevalue.MarshalMap(j)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(plainMap(back), plainMap(item)); diff != "" {
		t.Errorf("%s: image is not the item the orders flow writes (-written +image):\n%s", where, diff)
	}
}

func jobImage(t *testing.T, rec events.DynamoDBEventRecord) outbox.Job {
	t.Helper()
	var j outbox.Job
	if err := attributevalue.UnmarshalMap(stream.ToSDK(rec.Change.NewImage), &j); err != nil {
		t.Fatal(err)
	}
	return j
}

// order reads tenant's order id.
func (s *stack) order(t *testing.T, tenant, id string) orders.Order {
	t.Helper()
	o, err := orders.NewTable(s.client, s.names.ByLogicalID["OrdersTable"]).Get(t.Context(), tenant, id)
	if err != nil {
		t.Fatalf("order %s: %v", id, err)
	}
	return o
}

// item reads the item pk of table.
func (s *stack) item(t *testing.T, table, pk string) map[string]types.AttributeValue {
	t.Helper()
	return dynamotest.Item(t, s.client, table, pk)
}

func (s *stack) put(t *testing.T, table string, item any) {
	t.Helper()
	m, err := attributevalue.MarshalMap(item)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.client.PutItem(t.Context(), &dynamodb.PutItemInput{TableName: aws.String(table), Item: m}); err != nil {
		t.Fatal(err)
	}
}

// redeliver feeds the stream event file to fn again, as a redelivery: the
// table is left as the first delivery left it.
func (s *stack) redeliver(t *testing.T, fn, file string) events.DynamoDBEventResponse {
	t.Helper()
	out, err := s.invoke(t, fn, file)
	if err != nil {
		t.Fatalf("%s: invoke error = %v, want nil", file, err)
	}
	var r events.DynamoDBEventResponse
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("%s: response %s: %v", file, out, err)
	}
	return r
}

// messages counts what the mail simulator sent to the address.
func (s *stack) messages(t *testing.T, to string) int {
	t.Helper()
	resp, err := http.Get(s.simURL + "/v1/messages?to=" + url.QueryEscape(to))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list struct{ Data []json.RawMessage }
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/messages: %d, %v", resp.StatusCode, err)
	}
	return len(list.Data)
}
