package main

import (
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncehq/once/internal/lambdatest"
)

func TestMain(m *testing.M) { lambdatest.Main(m, main) }

// TestStartupFailureIsJSON runs main with a bad configuration: it exits
// with status 1 after one JSON line saying why.
func TestStartupFailureIsJSON(t *testing.T) {
	lambdatest.CheckStartupFailure(t, map[string]string{"ONCE_RECEIPT_RETRY_DLQ": "dead.fifo"}, "ONCE_RECEIPT_RETRY_DLQ")
}

// TestManagedInstancesConcurrency runs main as Lambda Managed Instances run
// it, several invocations at once in one process, and checks that each
// batch's response names its own failed messages (here, retries that name
// no receipt job).
func TestManagedInstancesConcurrency(t *testing.T) {
	lambdatest.CheckSQSFunction(t, map[string]string{"ONCE_MAIL_URL": "http://127.0.0.1:1", "DYNAMODB_ENDPOINT": "http://127.0.0.1:1",
		// Queue URLs are taken as they are: nothing is called at start.
		"SQS_ENDPOINT":             "http://127.0.0.1:1",
		"ONCE_RECEIPT_RETRY_QUEUE": "http://127.0.0.1:1/000000000000/once-receipt-retry",
		"ONCE_RECEIPT_RETRY_DLQ":   "http://127.0.0.1:1/000000000000/once-receipt-retry-dlq"},
		func() events.SQSMessage {
			return events.SQSMessage{Body: `{"tenant":"acme","job":"nope","attempt":1}`, EventSource: "aws:sqs"}
		})
}
