package sqsmapping_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/lambdatest"
	"github.com/oncehq/once/internal/queue"
	"github.com/oncehq/once/internal/sqslocal"
	"github.com/oncehq/once/internal/sqsmapping"
)

// setup starts an endpoint with a queue whose messages go to a dead-letter
// queue after two receives, visible again one second after a receive.
func setup(t *testing.T) (c *sqs.Client, url, dlq string) {
	t.Helper()
	srv := httptest.NewServer(sqslocal.New(sqslocal.Options{}))
	t.Cleanup(srv.Close)
	c, err := queue.Client(t.Context(), config.Config{SQSEndpoint: srv.URL, Region: "us-east-1"}, queue.ClientOptions{Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	d, err := c.CreateQueue(t.Context(), &sqs.CreateQueueInput{QueueName: aws.String("dlq")})
	if err != nil {
		t.Fatal(err)
	}
	q, err := c.CreateQueue(t.Context(), &sqs.CreateQueueInput{QueueName: aws.String("work"), Attributes: map[string]string{
		"VisibilityTimeout": "1",
		"RedrivePolicy":     `{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:dlq","maxReceiveCount":2}`,
	}})
	if err != nil {
		t.Fatal(err)
	}
	return c, aws.ToString(q.QueueUrl), aws.ToString(d.QueueUrl)
}

func send(t *testing.T, c *sqs.Client, url string, bodies ...string) {
	t.Helper()
	for _, b := range bodies {
		if _, err := c.SendMessage(t.Context(), &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(b)}); err != nil {
			t.Fatal(err)
		}
	}
}

// deliveries counts the deliveries of each body.
type deliveries struct {
	mu     sync.Mutex
	counts map[string]int
	events []events.SQSMessage
}

func (d *deliveries) add(m events.SQSMessage) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.counts == nil {
		d.counts = map[string]int{}
	}
	d.counts[m.Body]++
	d.events = append(d.events, m)
	return d.counts[m.Body]
}

func (d *deliveries) count(body string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.counts[body]
}

func run(t *testing.T, c *sqs.Client, url string, report bool, h sqsmapping.Handler) {
	t.Helper()
	p, err := sqsmapping.New(sqsmapping.Options{
		Client: c, QueueURL: url, Handler: h, ReportBatchItemFailures: report,
		WaitTime: time.Second, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	lambdatest.Start(t, p)
}

func dlqBodies(t *testing.T, c *sqs.Client, dlq string) []string {
	t.Helper()
	out, err := c.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(dlq), MaxNumberOfMessages: 10, VisibilityTimeout: 60})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range out.Messages {
		got = append(got, aws.ToString(m.Body))
	}
	return got
}

// TestBatchItemFailures checks that a failed message is delivered again
// until the redrive policy moves it to the dead-letter queue, while the
// others of its batch are deleted after one delivery.
func TestBatchItemFailures(t *testing.T) {
	t.Parallel()
	c, url, dlq := setup(t)
	var d deliveries
	run(t, c, url, true, func(_ context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		var resp events.SQSEventResponse
		for _, m := range ev.Records {
			d.add(m)
			if m.EventSource != "aws:sqs" || m.AWSRegion != "us-east-1" || m.EventSourceARN == "" || m.Attributes["ApproximateReceiveCount"] == "" {
				t.Errorf("record %+v lacks what Lambda sends", m)
			}
			if m.Body == "poison" {
				resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: m.MessageId})
			}
		}
		return resp, nil
	})
	send(t, c, url, "a", "poison", "b")
	lambdatest.WaitFor(t, 15*time.Second, "poison in the dead-letter queue", func() bool {
		return d.count("poison") >= 2
	})
	var got []string
	deadline := time.Now().Add(10 * time.Second)
	for len(got) == 0 && time.Now().Before(deadline) {
		got = dlqBodies(t, c, dlq)
	}
	if len(got) != 1 || got[0] != "poison" {
		t.Fatalf("dead-letter queue = %v, want [poison]", got)
	}
	for body, want := range map[string]int{"a": 1, "b": 1, "poison": 2} {
		if n := d.count(body); n != want {
			t.Errorf("deliveries of %s = %d, want %d", body, n, want)
		}
	}
}

// TestWholeBatchFails checks that a handler error, and a batch item failure
// that names no message, deliver the whole batch again.
func TestWholeBatchFails(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		resp func(ev events.SQSEvent) (events.SQSEventResponse, error)
	}{
		{"handler error", func(events.SQSEvent) (events.SQSEventResponse, error) {
			return events.SQSEventResponse{}, errors.New("boom")
		}},
		{"unknown identifier", func(events.SQSEvent) (events.SQSEventResponse, error) {
			return events.SQSEventResponse{BatchItemFailures: []events.SQSBatchItemFailure{{ItemIdentifier: "nope"}}}, nil
		}},
		{"panic", func(events.SQSEvent) (events.SQSEventResponse, error) { panic("boom") }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, url, _ := setup(t)
			var d deliveries
			run(t, c, url, true, func(_ context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
				first := true
				for _, m := range ev.Records {
					first = d.add(m) == 1 && first
				}
				if first {
					return tt.resp(ev)
				}
				return events.SQSEventResponse{}, nil
			})
			send(t, c, url, "x")
			lambdatest.WaitFor(t, 10*time.Second, "a second delivery", func() bool { return d.count("x") == 2 })
			time.Sleep(1500 * time.Millisecond)
			if n := d.count("x"); n != 2 {
				t.Errorf("deliveries = %d, want 2 (failed, then deleted)", n)
			}
		})
	}
}

// TestWithoutReportBatchItemFailures checks that batch item failures are
// ignored when the mapping does not report them.
func TestWithoutReportBatchItemFailures(t *testing.T) {
	t.Parallel()
	c, url, _ := setup(t)
	var d deliveries
	run(t, c, url, false, func(_ context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		for _, m := range ev.Records {
			d.add(m)
		}
		return events.SQSEventResponse{BatchItemFailures: []events.SQSBatchItemFailure{{ItemIdentifier: ev.Records[0].MessageId}}}, nil
	})
	send(t, c, url, "x")
	lambdatest.WaitFor(t, 10*time.Second, "a delivery", func() bool { return d.count("x") == 1 })
	time.Sleep(1500 * time.Millisecond)
	if n := d.count("x"); n != 1 {
		t.Errorf("deliveries = %d, want 1", n)
	}
	out, err := c.GetQueueAttributes(t.Context(), &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{"All"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"} {
		if out.Attributes[k] != "0" {
			t.Errorf("%s = %s, want 0", k, out.Attributes[k])
		}
	}
}
