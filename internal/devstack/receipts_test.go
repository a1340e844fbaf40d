package devstack_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/oncehq/once/internal/dynamotest"
	"github.com/oncehq/once/internal/lambdatest"
	"github.com/oncehq/once/internal/orders"
	"github.com/oncehq/once/internal/outbox"
	"github.com/oncehq/once/internal/queue"
	"github.com/oncehq/once/internal/sqstest"
)

// TestReceiptsKeepFlowing puts orders whose receipts cannot be mailed (two
// addresses whose mail is down for good, one whose first two messages fail)
// ahead of good ones on the outbox table's stream (one shard), with the
// template's mappings and queues and ONCE_RECEIPT_ATTEMPTS=4:
//
//   - the good receipts are sent within seconds: the failing ones go to the
//     receipt retry queue instead of being retried in place;
//   - the flaky one is sent once, on a retry;
//   - the ones whose mail stays down are tried 4 times, with growing delays,
//     and end in the receipt retry dead-letter queue, their jobs failed and
//     their orders' receipts queued, nothing sent;
//   - retries delivered again (as SQS may) send nothing twice.
func TestReceiptsKeepFlowing(t *testing.T) {
	env := testEnv(t)
	env["ONCE_RECEIPT_ATTEMPTS"] = "4"
	env["LOG_LEVEL"] = "info"
	out := &lambdatest.Buffer{}
	s := &orderStack{Stack: start(t, env, out), out: out, db: dynamotest.Client(t)}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("stack output:\n%s", out.String())
		}
	})
	run := time.Now().UnixNano()
	order := func(t *testing.T, name, email string) orderCase {
		t.Helper()
		c := newOrderCase(fmt.Sprintf("receipts-%s-%d", name, run), "tok_visa")
		c.email = email
		c.body = fmt.Sprintf(`{"amount": 4200, "currency": "EUR", "customer": "cus_42", "email": %q, "source": "tok_visa"}`, email)
		if r := send(t, s.URL(), "/v1/orders", c.key, "", c.body); r.status != http.StatusCreated {
			t.Fatalf("order %s = %d %s, want 201", name, r.status, r.body)
		}
		return c
	}
	var down []orderCase
	for i := range 2 {
		down = append(down, order(t, fmt.Sprint("down-", i), fmt.Sprintf("down%d-%d@unavailable.example", i, run)))
	}
	flaky := order(t, "flaky", fmt.Sprintf("flaky-%d+fail2@example.com", run))
	var good []orderCase
	var answered []time.Time
	for i := range 3 {
		good = append(good, order(t, fmt.Sprint("good-", i), fmt.Sprintf("good%d-%d@example.com", i, run)))
		answered = append(answered, time.Now())
	}
	// From each good order's 201 to its receipt sent.
	took := make([]time.Duration, len(good))
	for deadline := time.Now().Add(10 * time.Second); slices.Contains(took, 0); time.Sleep(20 * time.Millisecond) {
		for i, c := range good {
			if took[i] == 0 && s.messages(t, c.email) > 0 {
				took[i] = time.Since(answered[i])
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("receipts of the good orders behind failing ones not sent 10s after their orders: %v", took)
		}
	}
	slices.Sort(took)
	t.Logf("good receipts sent %v after their orders' 201 (behind 2 receipts whose mail is down and 1 whose first 2 sends fail)", took)
	if took[len(took)-1] > 5*time.Second {
		t.Errorf("slowest good receipt sent %v after its order, want within 5s", took[len(took)-1])
	}
	shards, err := dynamotest.Streams(t).DescribeStream(t.Context(), &dynamodbstreams.DescribeStreamInput{StreamArn: streamARN(t, s.Config().Table("OutboxTable"))})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(shards.StreamDescription.Shards); n != 1 {
		t.Errorf("outbox stream shards = %d, want one: the claim is about receipts on the same shard", n)
	}

	lambdatest.WaitFor(t, 30*time.Second, "the flaky receipt sent on a retry", func() bool {
		o, _ := s.order(t, flaky)
		return o.Receipt == orders.ReceiptSent
	})

	// The receipts whose mail stays down end in the dead-letter queue.
	sq := sqstest.Client(t, s.Config().SQSEndpoint)
	dlq, err := queue.Resolve(t.Context(), sq, s.Config().ReceiptRetryDLQ)
	if err != nil {
		t.Fatal(err)
	}
	type letter struct {
		Tenant, Job string
		Attempt     int
		GaveUp      time.Time `json:"gave_up"`
	}
	letters := map[string]letter{}
	lambdatest.WaitFor(t, 45*time.Second, "both failing receipts in the dead-letter queue", func() bool {
		for _, m := range sqstest.Receive(t, sq, dlq, time.Second, false) {
			var l letter
			if err := json.Unmarshal([]byte(aws.ToString(m.Body)), &l); err != nil {
				t.Fatalf("dead letter %s: %v", aws.ToString(m.Body), err)
			}
			letters[l.Job] = l
		}
		return len(letters) >= len(down)
	})
	for _, c := range down {
		jobID := orders.JobID(c.id(t))
		if l := letters[jobID]; l.Tenant != "acme" || l.Attempt != 4 || l.GaveUp.IsZero() {
			t.Errorf("dead letter of %s = %+v, want acme's, given up after 4 attempts", jobID, l)
		}
		var job outbox.Job
		if err := attributevalue.UnmarshalMap(dynamotest.Item(t, s.db, s.Config().Table("OutboxTable"), outbox.JobPK("acme", jobID)), &job); err != nil {
			t.Fatal(err)
		}
		if job.State != outbox.Failed || job.Attempts != 4 {
			t.Errorf("job %s = %s after %d attempts (%q), want failed after 4", jobID, job.State, job.Attempts, job.LastError)
		}
		if o, _ := s.order(t, c); o.Receipt != orders.ReceiptQueued {
			t.Errorf("order receipt = %q, want queued", o.Receipt)
		}
		if n := s.messages(t, c.email); n != 0 {
			t.Errorf("messages to %s = %d, want 0", c.email, n)
		}
		// The delays before attempts 2, 3 and 4 doubled from 1s, each
		// jittered between half of it and all of it.
		var delays []time.Duration
		for _, l := range out.Lines(t) {
			if l["job"] == jobID && l["outcome"] == "retrying" {
				d, _ := time.ParseDuration(fmt.Sprint(l["retry_in"]))
				delays = append(delays, d)
			}
		}
		if len(delays) != 3 {
			t.Errorf("retries of %s = %v, want 3", jobID, delays)
		}
		for i, d := range delays {
			if nominal := time.Second << i; d < nominal/2 || d > nominal {
				t.Errorf("delay before attempt %d of %s = %v, want %v to %v", i+2, jobID, d, nominal/2, nominal)
			}
		}
	}
	if _, ok := letters[orders.JobID(flaky.id(t))]; ok {
		t.Errorf("the flaky receipt is in the dead-letter queue")
	}

	// SQS delivers at least once: retries of sent receipts, delivered again,
	// send nothing.
	retries, err := queue.Resolve(t.Context(), sq, s.Config().ReceiptRetryQueue)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range append([]orderCase{flaky}, good...) {
		body := fmt.Sprintf(`{"tenant":"acme","job":%q,"attempt":1}`, orders.JobID(c.id(t)))
		for range 2 {
			if _, err := sq.SendMessage(t.Context(), &sqs.SendMessageInput{QueueUrl: aws.String(retries), MessageBody: aws.String(body)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	lambdatest.WaitFor(t, 20*time.Second, "the redelivered retries handled", func() bool {
		v, f, d := sqstest.Counts(t, sq, retries)
		return v == "0" && f == "0" && d == "0"
	})
	for _, c := range append([]orderCase{flaky}, good...) {
		if n := s.messages(t, c.email); n != 1 {
			t.Errorf("messages to %s = %d, want 1", c.email, n)
		}
		if o, _ := s.order(t, c); o.Receipt != orders.ReceiptSent || o.ReceiptSentAt == 0 {
			t.Errorf("order %s receipt = %q at %d, want sent", c.key, o.Receipt, o.ReceiptSentAt)
		}
	}
	metrics := lambdatest.CountsAmong(out.String())
	if metrics["receipt_sent"] != 4 || metrics["receipt_dead_lettered"] != 2 || metrics["receipt_duplicate"] < 8 {
		t.Errorf("metrics sent %d, dead-lettered %d, duplicates %d; want 4, 2 and at least 8",
			metrics["receipt_sent"], metrics["receipt_dead_lettered"], metrics["receipt_duplicate"])
	}
}
