package events_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/idempotency"
	"github.com/oncehq/once/idempotency/stream"
	"github.com/oncehq/once/internal/dynamotest"
	"github.com/oncehq/once/internal/orders"
	"github.com/oncehq/once/internal/outbox"
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
	s.put(t, s.names.ByLogicalID["OrdersTable"], map[string]any{"pk": job.OrderPK, "id": job.Order, "tenant": job.Tenant, "status": "paid",
		"recovery_point": "finished", "receipt": "queued", "email": job.To})
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

// runReceiptOutage: a receipt whose mail API is down fails its record; the
// other receipt of the batch is sent all the same.
func runReceiptOutage(t *testing.T, s *stack, file string) {
	recs := streamEvent(t, file).Records
	down, fine := jobImage(t, recs[0]), jobImage(t, recs[1])
	for _, j := range []outbox.Job{down, fine} {
		s.put(t, s.names.ByLogicalID["OrdersTable"], map[string]any{"pk": j.OrderPK, "id": j.Order, "tenant": j.Tenant, "status": "paid",
			"recovery_point": "finished", "receipt": "queued", "email": j.To})
	}
	resp := s.stream(t, receiptsFunction, file)
	want := []events.DynamoDBBatchItemFailure{{ItemIdentifier: recs[0].Change.SequenceNumber}}
	if diff := cmp.Diff(want, resp.BatchItemFailures); diff != "" {
		t.Errorf("batch item failures (-want +got):\n%s", diff)
	}
	if n := s.messages(t, fine.To); n != 1 {
		t.Errorf("messages to %s = %d, want 1", fine.To, n)
	}
	if n := s.messages(t, down.To); n != 0 {
		t.Errorf("messages to %s = %d, want 0", down.To, n)
	}
	var got outbox.Job
	if err := attributevalue.UnmarshalMap(s.item(t, s.names.ByLogicalID["OutboxTable"], down.PK), &got); err != nil {
		t.Fatal(err)
	}
	if got.State != outbox.Failed || got.Attempts == 0 || got.LastError == "" {
		t.Errorf("job = %s after %d attempts (%q), want failed with its last error", got.State, got.Attempts, got.LastError)
	}
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
