// Package sqstest is test support for code that uses SQS: a local SQS
// endpoint (internal/sqslocal) per test, the SDK's client on it, queues, and
// reading what was sent.
package sqstest

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/oncehq/once/idempotency/recovery/sqsqueue"
	"github.com/oncehq/once/internal/config"
	"github.com/oncehq/once/internal/dynamoclient"
	"github.com/oncehq/once/internal/queue"
	"github.com/oncehq/once/internal/sqslocal"
)

// Endpoint starts a local SQS endpoint that lives until the test ends and
// returns its URL.
func Endpoint(t testing.TB) string {
	t.Helper()
	srv := httptest.NewServer(sqslocal.New(sqslocal.Options{}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// Client returns the SDK's SQS client on endpoint, as queue.Client builds
// it, with room for long polls.
func Client(t testing.TB, endpoint string) *sqs.Client {
	t.Helper()
	c, err := queue.Client(t.Context(), config.Config{SQSEndpoint: endpoint, Region: dynamoclient.LocalRegion}, queue.ClientOptions{Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Queue creates the queue name with attrs and returns its URL.
func Queue(t testing.TB, c *sqs.Client, name string, attrs map[string]string) string {
	t.Helper()
	out, err := c.CreateQueue(t.Context(), &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	if err != nil {
		t.Fatalf("CreateQueue(%s): %v", name, err)
	}
	return aws.ToString(out.QueueUrl)
}

// Sender returns the library's queue (sqsqueue.Queue, what the functions
// send through) at url, reached through c.
func Sender(t testing.TB, c *sqs.Client, url string) *sqsqueue.Queue {
	t.Helper()
	q, err := sqsqueue.New(c, url)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// ARN returns the ARN of the queue at url.
func ARN(t testing.TB, c *sqs.Client, url string) string {
	t.Helper()
	out, err := c.GetQueueAttributes(t.Context(), &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn},
	})
	if err != nil {
		t.Fatalf("GetQueueAttributes(%s): %v", url, err)
	}
	return out.Attributes[string(types.QueueAttributeNameQueueArn)]
}

// Message is a message as received, with the system attributes.
type Message = types.Message

// Receive receives up to ten messages from url, waiting up to wait for the
// first, and deletes them unless keep is set.
func Receive(t testing.TB, c *sqs.Client, url string, wait time.Duration, keep bool) []Message {
	t.Helper()
	out, err := c.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{
		QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: int32(wait / time.Second),
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
	})
	if err != nil {
		t.Fatalf("ReceiveMessage(%s): %v", url, err)
	}
	if !keep {
		for _, m := range out.Messages {
			if _, err := c.DeleteMessage(t.Context(), &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle}); err != nil {
				t.Fatalf("DeleteMessage: %v", err)
			}
		}
	}
	return out.Messages
}

// Counts returns the queue's ApproximateNumberOfMessages (visible),
// ...NotVisible (in flight) and ...Delayed.
func Counts(t testing.TB, c *sqs.Client, url string) (visible, inFlight, delayed string) {
	t.Helper()
	out, err := c.GetQueueAttributes(t.Context(), &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll},
	})
	if err != nil {
		t.Fatalf("GetQueueAttributes(%s): %v", url, err)
	}
	a := out.Attributes
	return a["ApproximateNumberOfMessages"], a["ApproximateNumberOfMessagesNotVisible"], a["ApproximateNumberOfMessagesDelayed"]
}
