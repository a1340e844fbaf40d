package main

import (
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/oncehq/once/internal/lambdatest"
)

func TestMain(m *testing.M) { lambdatest.Main(m, main) }

// TestStartupFailureIsJSON runs main with a bad configuration: it exits
// with status 1 after one JSON line saying why.
func TestStartupFailureIsJSON(t *testing.T) {
	lambdatest.CheckStartupFailure(t, map[string]string{"ONCE_RECEIPT_ATTEMPTS": "1"}, "ONCE_RECEIPT_ATTEMPTS")
}

// TestManagedInstancesConcurrency runs main as Lambda Managed Instances run
// it, several invocations at once in one process, and checks that each
// batch's response names its own failed records (here, receipt jobs'
// inserts whose images are no receipt job).
func TestManagedInstancesConcurrency(t *testing.T) {
	lambdatest.CheckStreamFunctionEach(t, map[string]string{"ONCE_MAIL_URL": "http://127.0.0.1:1", "DYNAMODB_ENDPOINT": "http://127.0.0.1:1",
		// A queue URL is taken as it is: nothing is called at start.
		"SQS_ENDPOINT": "http://127.0.0.1:1", "ONCE_RECEIPT_RETRY_QUEUE": "http://127.0.0.1:1/000000000000/once-receipt-retry"},
		func() events.DynamoDBEventRecord {
			img := map[string]events.DynamoDBAttributeValue{
				"pk":   events.NewStringAttribute("acme#poison"),
				"kind": events.NewStringAttribute("receipt"),
			}
			return lambdatest.Record(events.DynamoDBOperationTypeInsert, nil, img, nil, time.Now())
		})
}
