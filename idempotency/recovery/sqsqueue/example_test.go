package sqsqueue_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/oncehq/once/idempotency/memory"
	"github.com/oncehq/once/idempotency/recovery"
	"github.com/oncehq/once/idempotency/recovery/sqsqueue"
	"github.com/oncehq/once/internal/sqslocal"
)

// TestMain points the example at a local SQS endpoint with a queue, as
// SQS_ENDPOINT and the template's CHECK_QUEUE_URL would.
func TestMain(m *testing.M) {
	srv := httptest.NewServer(sqslocal.New(sqslocal.Options{}))
	os.Setenv("SQS_ENDPOINT", srv.URL)
	c, err := sqsqueue.NewClient(context.Background())
	if err == nil {
		var out *sqs.CreateQueueOutput
		out, err = c.CreateQueue(context.Background(), &sqs.CreateQueueInput{QueueName: aws.String("checks")})
		if err == nil {
			os.Setenv("CHECK_QUEUE_URL", aws.ToString(out.QueueUrl))
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "sqsqueue: the example's queue:", err)
		os.Exit(1)
	}
	code := m.Run()
	srv.Close()
	os.Exit(code)
}

// The check queue of the recovery functions: the Scheduler sends to it, the
// Checker (triggered by it) sends on the checks that arrive early.
func Example() {
	ctx := context.Background()

	client, err := sqsqueue.NewClient(ctx) // AWS_REGION, SQS_ENDPOINT
	if err != nil {
		fmt.Println(err)
		return
	}
	checks, err := sqsqueue.New(client, os.Getenv("CHECK_QUEUE_URL"))
	if err != nil {
		fmt.Println(err)
		return
	}
	store := memory.New() // in a function: dynamo.New(db, table)
	if _, err := recovery.NewScheduler(recovery.SchedulerConfig{Queue: checks}); err != nil {
		fmt.Println(err)
		return
	}
	if _, err := recovery.NewChecker(recovery.CheckerConfig{Store: store, Queue: checks}); err != nil {
		fmt.Println(err)
		return
	}

	// A delay is SQS's DelaySeconds, at most 15 minutes: a check due in an
	// hour arrives after 15, and the Checker sends it on.
	fmt.Println(sqsqueue.DelaySeconds(time.Hour))
	if err := checks.Send(ctx, "due now", 0); err != nil {
		fmt.Println(err)
		return
	}
	out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(checks.URL()), WaitTimeSeconds: 1})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, m := range out.Messages {
		fmt.Println(aws.ToString(m.Body))
	}
	// Output:
	// 900
	// due now
}
