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
	lambdatest.CheckStartupFailure(t, map[string]string{"ONCE_RETENTION": "forever"}, "ONCE_RETENTION")
}

// TestRetentionFloor: a retention under config.MinRetention keeps the
// sweeper from starting, with a reason that names the variable and the
// floor; so does one under a long lease.
func TestRetentionFloor(t *testing.T) {
	lambdatest.CheckStartupFailure(t, map[string]string{"ONCE_RETENTION": "30m"}, `ONCE_RETENTION="30m0s": must be at least 1h0m0s`)
	lambdatest.CheckStartupFailure(t, map[string]string{"ONCE_RETENTION": "2h", "ONCE_LEASE": "3h"}, `ONCE_RETENTION="2h0m0s": must be at least 3h0m0s`)
}

// TestManagedInstancesConcurrency runs main as Lambda Managed Instances run
// it, several invocations at once in one process, and checks that each
// batch's response names its own failed records (here, a TTL deletion of an
// IN_PROGRESS item whose image is no record: an operator's delete of one the
// sweeper ignores).
func TestManagedInstancesConcurrency(t *testing.T) {
	lambdatest.CheckStreamFunction(t, map[string]string{"ONCE_IDEMPOTENCY_TABLE": "once-idempotency", "DYNAMODB_ENDPOINT": "http://127.0.0.1:1",
		// A queue URL is taken as it is: nothing is called at start.
		"SQS_ENDPOINT": "http://127.0.0.1:1", "ONCE_CHECK_QUEUE": "http://127.0.0.1:1/000000000000/once-check"},
		func() events.DynamoDBEventRecord {
			img := map[string]events.DynamoDBAttributeValue{
				"pk":     events.NewStringAttribute("acme#poison"),
				"status": events.NewStringAttribute("IN_PROGRESS"),
			}
			return lambdatest.Record(events.DynamoDBOperationTypeRemove, img, nil, lambdatest.TTLIdentity(), time.Now())
		})
}
