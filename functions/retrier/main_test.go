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
	for _, tc := range []struct{ name, value string }{
		{"ONCE_WORKER_RETRY_WINDOW", "forever"},
		{"ONCE_WORKER_LOOKUP_HORIZON", "1m"},
		{"ONCE_WORKER_LOOKUP_HORIZON", "720h"},
	} {
		lambdatest.CheckStartupFailure(t, map[string]string{tc.name: tc.value}, tc.name)
	}
}

// TestManagedInstancesConcurrency runs main as Lambda Managed Instances run
// it, several invocations at once in one process, and checks that each
// batch's response names its own failed messages (here, retries that name
// no payment).
func TestManagedInstancesConcurrency(t *testing.T) {
	lambdatest.CheckSQSFunction(t, map[string]string{"ONCE_PAYMENTS_TABLE": "once-payments", "ONCE_PROVIDER_URL": "http://127.0.0.1:1", "DYNAMODB_ENDPOINT": "http://127.0.0.1:1",
		// A queue URL is taken as it is: nothing is called at start.
		"SQS_ENDPOINT": "http://127.0.0.1:1", "ONCE_WORKER_RETRY_QUEUE": "http://127.0.0.1:1/000000000000/once-worker-retry"},
		func() events.SQSMessage {
			return events.SQSMessage{Body: `{"tenant":"acme","payment":"nope","attempt":1}`, EventSource: "aws:sqs"}
		})
}
