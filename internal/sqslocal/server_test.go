package sqslocal_test

import (
	"errors"
	"fmt"
	"net/http/httptest"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
	"github.com/google/go-cmp/cmp"

	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/queue"
	"github.com/oncehq/once/internal/sqslocal"
)

// client starts an endpoint and returns the real SDK client on it.
func client(t *testing.T) *sqs.Client {
	t.Helper()
	srv := httptest.NewServer(sqslocal.New(sqslocal.Options{}))
	t.Cleanup(srv.Close)
	c, err := queue.Client(t.Context(), config.Config{SQSEndpoint: srv.URL, Region: "us-east-1"}, queue.ClientOptions{Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func create(t *testing.T, c *sqs.Client, name string, attrs map[string]string) string {
	t.Helper()
	out, err := c.CreateQueue(t.Context(), &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	if err != nil {
		t.Fatalf("CreateQueue(%s) = %v", name, err)
	}
	return aws.ToString(out.QueueUrl)
}

func arn(t *testing.T, c *sqs.Client, url string) string {
	t.Helper()
	out, err := c.GetQueueAttributes(t.Context(), &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn},
	})
	if err != nil {
		t.Fatal(err)
	}
	return out.Attributes["QueueArn"]
}

func receive(t *testing.T, c *sqs.Client, url string, wait, visibility int32) []types.Message {
	t.Helper()
	out, err := c.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{
		QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: wait, VisibilityTimeout: visibility,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
	})
	if err != nil {
		t.Fatalf("ReceiveMessage = %v", err)
	}
	return out.Messages
}

// TestDelayVisibilityRedrive follows one message through a per-message
// delay, two receives whose visibility timeouts run out, and the move to the
// dead-letter queue on the third receive (maxReceiveCount 2).
func TestDelayVisibilityRedrive(t *testing.T) {
	c := client(t)
	dlq := create(t, c, "work-dlq", nil)
	url := create(t, c, "work", map[string]string{
		"VisibilityTimeout": "1",
		"RedrivePolicy":     `{"deadLetterTargetArn":"` + arn(t, c, dlq) + `","maxReceiveCount":"2"}`,
	})
	sent, err := c.SendMessage(t.Context(), &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(`{"n":1}`), DelaySeconds: 1})
	if err != nil {
		t.Fatalf("SendMessage = %v", err)
	}
	start := time.Now()
	if got := receive(t, c, url, 0, 0); len(got) != 0 {
		t.Fatalf("receive during the delay = %d messages, want none", len(got))
	}
	attrs, err := c.GetQueueAttributes(t.Context(), &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{"All"}})
	if err != nil {
		t.Fatal(err)
	}
	if attrs.Attributes["ApproximateNumberOfMessagesDelayed"] != "1" {
		t.Errorf("ApproximateNumberOfMessagesDelayed = %q, want 1", attrs.Attributes["ApproximateNumberOfMessagesDelayed"])
	}
	for i := 1; i <= 2; i++ {
		got := receive(t, c, url, 5, 0)
		if len(got) != 1 || aws.ToString(got[0].MessageId) != aws.ToString(sent.MessageId) {
			t.Fatalf("receive %d = %v, want the message", i, got)
		}
		if i == 1 && time.Since(start) < 900*time.Millisecond {
			t.Errorf("first receive %v after the send, want after the 1s delay", time.Since(start))
		}
		if n := got[0].Attributes["ApproximateReceiveCount"]; n != strconv.Itoa(i) {
			t.Errorf("receive %d: ApproximateReceiveCount = %q", i, n)
		}
		if got := receive(t, c, url, 0, 0); len(got) != 0 {
			t.Errorf("receive %d: the message is visible during its visibility timeout", i)
		}
	}
	// The third receive moves it instead of delivering it.
	time.Sleep(1100 * time.Millisecond)
	if got := receive(t, c, url, 0, 0); len(got) != 0 {
		t.Fatalf("third receive = %d messages, want none (moved to the dead-letter queue)", len(got))
	}
	got := receive(t, c, dlq, 0, 0)
	if len(got) != 1 || aws.ToString(got[0].MessageId) != aws.ToString(sent.MessageId) || aws.ToString(got[0].Body) != `{"n":1}` {
		t.Fatalf("dead-letter queue = %v, want the message with its ID and body", got)
	}
	sources, err := c.ListDeadLetterSourceQueues(t.Context(), &sqs.ListDeadLetterSourceQueuesInput{QueueUrl: aws.String(dlq)})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{url}, sources.QueueUrls); diff != "" {
		t.Errorf("ListDeadLetterSourceQueues mismatch (-want +got):\n%s", diff)
	}
}

// TestDelete checks that only the latest receipt handle deletes, that a
// message made visible again is delivered again, and the batch calls.
func TestDelete(t *testing.T) {
	c := client(t)
	url := create(t, c, "q", nil)
	if _, err := c.SendMessage(t.Context(), &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("a")}); err != nil {
		t.Fatal(err)
	}
	first := receive(t, c, url, 0, 30)
	if len(first) != 1 {
		t.Fatalf("receive = %v", first)
	}
	if _, err := c.ChangeMessageVisibility(t.Context(), &sqs.ChangeMessageVisibilityInput{
		QueueUrl: aws.String(url), ReceiptHandle: first[0].ReceiptHandle, VisibilityTimeout: 0,
	}); err != nil {
		t.Fatalf("ChangeMessageVisibility = %v", err)
	}
	second := receive(t, c, url, 0, 30)
	if len(second) != 1 {
		t.Fatalf("receive after ChangeMessageVisibility(0) = %v, want the message again", second)
	}
	// The first handle is stale: the call succeeds and deletes nothing.
	if _, err := c.DeleteMessage(t.Context(), &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: first[0].ReceiptHandle}); err != nil {
		t.Fatalf("DeleteMessage(stale handle) = %v, want success", err)
	}
	if _, err := c.ChangeMessageVisibility(t.Context(), &sqs.ChangeMessageVisibilityInput{
		QueueUrl: aws.String(url), ReceiptHandle: second[0].ReceiptHandle, VisibilityTimeout: 0,
	}); err != nil {
		t.Fatal(err)
	}
	third := receive(t, c, url, 0, 30)
	if len(third) != 1 {
		t.Fatalf("the stale handle deleted the message")
	}
	if _, err := c.DeleteMessage(t.Context(), &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: third[0].ReceiptHandle}); err != nil {
		t.Fatal(err)
	}
	_, err := c.ChangeMessageVisibility(t.Context(), &sqs.ChangeMessageVisibilityInput{
		QueueUrl: aws.String(url), ReceiptHandle: third[0].ReceiptHandle, VisibilityTimeout: 0,
	})
	var invalid *types.ReceiptHandleIsInvalid
	if !errors.As(err, &invalid) {
		t.Errorf("ChangeMessageVisibility(deleted) = %v, want ReceiptHandleIsInvalid", err)
	}

	batch, err := c.SendMessageBatch(t.Context(), &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: []types.SendMessageBatchRequestEntry{
		{Id: aws.String("a"), MessageBody: aws.String("1")},
		{Id: aws.String("b"), MessageBody: aws.String("2"), DelaySeconds: 1},
		{Id: aws.String("c"), MessageBody: aws.String("bad \x00 byte")},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(batch.Successful) != 2 || len(batch.Failed) != 1 || aws.ToString(batch.Failed[0].Code) != "InvalidMessageContents" {
		t.Errorf("SendMessageBatch = %d sent, failed %+v; want 2 sent, c InvalidMessageContents", len(batch.Successful), batch.Failed)
	}
	got := receive(t, c, url, 3, 30)
	for len(got) < 2 {
		more := receive(t, c, url, 3, 30)
		if len(more) == 0 {
			t.Fatalf("received %d messages of the batch, want 2", len(got))
		}
		got = append(got, more...)
	}
	entries := []types.DeleteMessageBatchRequestEntry{}
	for i, m := range got {
		entries = append(entries, types.DeleteMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(i)), ReceiptHandle: m.ReceiptHandle})
	}
	del, err := c.DeleteMessageBatch(t.Context(), &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(url), Entries: entries})
	if err != nil || len(del.Successful) != 2 {
		t.Errorf("DeleteMessageBatch = %+v, %v", del, err)
	}
}

// TestErrors checks that the SDK sees SQS's errors.
func TestErrors(t *testing.T) {
	c := client(t)
	url := create(t, c, "q", nil)
	tests := []struct {
		name string
		call func() error
		code string
	}{
		{"no such queue", func() error {
			_, err := c.GetQueueUrl(t.Context(), &sqs.GetQueueUrlInput{QueueName: aws.String("nope")})
			return err
		}, "AWS.SimpleQueueService.NonExistentQueue"},
		{"delay over 900s", func() error {
			_, err := c.SendMessage(t.Context(), &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("x"), DelaySeconds: 901})
			return err
		}, "InvalidParameterValue"},
		{"empty body", func() error {
			_, err := c.SendMessage(t.Context(), &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("")})
			return err
		}, "MissingParameter"},
		{"too many messages", func() error {
			_, err := c.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 11})
			return err
		}, "InvalidParameterValue"},
		{"same name, other attributes", func() error {
			_, err := c.CreateQueue(t.Context(), &sqs.CreateQueueInput{QueueName: aws.String("q"), Attributes: map[string]string{"VisibilityTimeout": "99"}})
			return err
		}, "QueueAlreadyExists"},
		{"unknown attribute", func() error {
			_, err := c.CreateQueue(t.Context(), &sqs.CreateQueueInput{QueueName: aws.String("r"), Attributes: map[string]string{"Colour": "red"}})
			return err
		}, "InvalidAttributeName"},
		{"bad receipt handle", func() error {
			_, err := c.DeleteMessage(t.Context(), &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: aws.String("garbage!")})
			return err
		}, "ReceiptHandleIsInvalid"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var api smithy.APIError
			if err := tt.call(); !errors.As(err, &api) || api.ErrorCode() != tt.code {
				t.Errorf("error = %v, want code %s", err, tt.code)
			}
		})
	}
	_, err := c.GetQueueUrl(t.Context(), &sqs.GetQueueUrlInput{QueueName: aws.String("nope")})
	var missing *types.QueueDoesNotExist
	if !errors.As(err, &missing) {
		t.Errorf("GetQueueUrl(nope) = %v, want a *types.QueueDoesNotExist", err)
	}
}

// TestConcurrentReceivers races receivers on one queue: within the
// visibility timeout every message is received exactly once.
func TestConcurrentReceivers(t *testing.T) {
	c := client(t)
	url := create(t, c, "q", map[string]string{"VisibilityTimeout": "60"})
	const n = 50
	for i := range n {
		if _, err := c.SendMessage(t.Context(), &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String(strconv.Itoa(i))}); err != nil {
			t.Fatal(err)
		}
	}
	var (
		mu  sync.Mutex
		got []string
		wg  sync.WaitGroup
	)
	for range 8 {
		wg.Go(func() {
			for {
				out, err := c.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 3, WaitTimeSeconds: 1})
				if err != nil {
					t.Error(err)
					return
				}
				if len(out.Messages) == 0 {
					return
				}
				mu.Lock()
				for _, m := range out.Messages {
					got = append(got, aws.ToString(m.Body))
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	sort.Strings(got)
	var want []string
	for i := range n {
		want = append(want, strconv.Itoa(i))
	}
	sort.Strings(want)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("received bodies mismatch (-want +got):\n%s", diff)
	}
}

// TestLongPollWakesOnSend checks that a long poll returns as soon as a
// message arrives.
func TestLongPollWakesOnSend(t *testing.T) {
	c := client(t)
	url := create(t, c, "q", nil)
	go func() {
		time.Sleep(300 * time.Millisecond)
		_, _ = c.SendMessage(t.Context(), &sqs.SendMessageInput{QueueUrl: aws.String(url), MessageBody: aws.String("x")})
	}()
	start := time.Now()
	got := receive(t, c, url, 10, 0)
	if len(got) != 1 {
		t.Fatalf("long poll = %v, want the message", got)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("long poll returned after %v, want soon after the send", d)
	}
}
